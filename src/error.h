/* SPDX-License-Identifier: MIT */
/* Error messages: the thread-local one for failures before an engine exists,
 * and the formatting shared with the per-engine message. */
#ifndef PKV_ERROR_H
#define PKV_ERROR_H

#include "pkv/pkv.h"

#include <stdarg.h>
#include <stddef.h>

#define PKV__ERROR_MAX 512

#if defined(__GNUC__)
#define PKV__PRINTF(fmt_index, first_arg) \
    __attribute__((format(printf, fmt_index, first_arg)))
#else
#define PKV__PRINTF(fmt_index, first_arg)
#endif

/* Write "PKV_ERR_X: <formatted text>" into buf (PKV__ERROR_MAX bytes). */
void pkv__format_error(char *buf, pkv_status status, const char *fmt,
                       va_list args);

/* Write a formatted description into buf (size bytes) and return buf:
 * what an invariant check says is broken. */
const char *pkv__describe(char *buf, size_t size, const char *fmt, ...)
    PKV__PRINTF(3, 4);

/* Set this thread's message to a finished one ("" clears it). */
void pkv__set_error(const char *message);

/* Set this thread's message and return status, so failures read
 * `return pkv__fail(PKV_ERR_..., "...")`. */
pkv_status pkv__fail(pkv_status status, const char *fmt, ...) PKV__PRINTF(2, 3);

/* Send a formatted line to a host's log callback (pkv_engine_params.log)
 * when it is set and level <= max_level. */
void pkv__log(pkv_log_fn log, void *user, int32_t max_level, int32_t level,
              const char *fmt, ...) PKV__PRINTF(5, 6);
void pkv__vlog(pkv_log_fn log, void *user, int32_t max_level, int32_t level,
               const char *fmt, va_list args);

#endif
