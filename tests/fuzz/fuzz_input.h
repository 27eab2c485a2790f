/* SPDX-License-Identifier: MIT */
/* What the fuzz targets' builders read their choices from: the input's
 * bytes one at a time, then zeros, so that any input builds something
 * (fuzz_events.c, fuzz_lookup.c). */
#ifndef PKV_FUZZ_INPUT_H
#define PKV_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>

typedef struct bytes {
    const uint8_t *p;
    size_t n;
} bytes;

/* The next byte, 0 once they are used up. */
static inline unsigned take(bytes *b)
{
    if (b->n == 0)
        return 0;
    b->n--;
    return *b->p++;
}

#endif
