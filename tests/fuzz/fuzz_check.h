/* SPDX-License-Identifier: MIT */
/* CHECK for the fuzz targets: a broken check prints its file, line and
 * condition and aborts, which libFuzzer and the replay driver both report
 * as a crash with the input that caused it. */
#ifndef PKV_FUZZ_CHECK_H
#define PKV_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>

static inline void pkv_fuzz_fail(const char *file, int line, const char *what)
{
    fprintf(stderr, "%s:%d: check failed: %s\n", file, line, what);
    abort();
}

#define CHECK(cond)                                   \
    do {                                              \
        if (!(cond))                                  \
            pkv_fuzz_fail(__FILE__, __LINE__, #cond); \
    } while (0)

#endif
