/* SPDX-License-Identifier: MIT */
/*
 * The smallest struct_size each size-prefixed public struct accepts: its
 * size in pkv 0.1.0, the first release, up to the end of its last field
 * then (docs/abi.md). A program built against 0.1.0 passes at least this
 * much; fields appended later keep their defaults for it, so code reads an
 * appended field only from a copy made over the defaults (as the params
 * are) or after checking that struct_size covers it. Never change these
 * lines: append a field to the struct instead.
 */
#ifndef PKV_STRUCT_SIZES_H
#define PKV_STRUCT_SIZES_H

#include "pkv/pkv.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define PKV__END_OF(type, field)                                              \
    (offsetof(type, field) + sizeof(((type *)0)->field))

#define PKV__ENGINE_PARAMS_MIN_SIZE PKV__END_OF(pkv_engine_params, opencl_queue)
#define PKV__ENGINE_STATS_MIN_SIZE PKV__END_OF(pkv_engine_stats, seqs_finished)
#define PKV__SEQ_PARAMS_MIN_SIZE PKV__END_OF(pkv_seq_params, cache_salt)
#define PKV__TENSOR_MIN_SIZE PKV__END_OF(pkv_tensor, offset)
/* Structs that came after 0.1.0: their size when they came. */
#define PKV__STORE_MIN_SIZE PKV__END_OF(pkv_store, model)

/* The check every size-prefixed struct a caller passes gets: its
 * struct_size (`size`) from `min` (the sizes above) to `known` (this
 * library's sizeof). 0 when it fits; else 1 with why[] saying so, naming
 * the struct as the caller knows it (`name`, e.g. "params->store") and
 * the function that sets struct_size (`init`). */
static inline int pkv__struct_size_bad(uint32_t size, size_t min,
                                       size_t known, const char *name,
                                       const char *init, char *why,
                                       size_t why_size)
{
    if (size >= min && size <= known)
        return 0;
    snprintf(why, why_size,
             "%s->struct_size is %u; this library knows %u (call %s)", name,
             (unsigned)size, (unsigned)known, init);
    return 1;
}

/* Read a size-prefixed struct a caller passed, the one way pkv reads
 * them: its struct_size (`size`, the struct's first field) checked as
 * pkv__struct_size_bad does, then that many bytes of in copied over out,
 * which holds the defaults, so that a field appended after the caller was
 * built keeps its default. 0, or 1 with why[] set and out unchanged. */
static inline int pkv__struct_read(void *out, const void *in, uint32_t size,
                                   size_t min, size_t known,
                                   const char *name, const char *init,
                                   char *why, size_t why_size)
{
    if (pkv__struct_size_bad(size, min, known, name, init, why, why_size))
        return 1;
    memcpy(out, in, size);
    return 0;
}

#endif
