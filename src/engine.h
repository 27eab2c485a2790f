/* SPDX-License-Identifier: MIT */
/* The engine object: what pkv_engine_* functions hold between calls. */
#ifndef PKV_ENGINE_H
#define PKV_ENGINE_H

#include "error.h"
#include "prefix.h"

struct pkv_engine {
    pkv__allocator alloc;
    pkv_engine_params params; /* defaults resolved */
    uint64_t block_bytes;     /* one block over all layers */
    pkv__pool pool;
    pkv__prefix prefix;
    char last_error[PKV__ERROR_MAX];
};

/* Set the engine's message (and this thread's) and return status. */
pkv_status pkv__engine_fail(pkv_engine *engine, pkv_status status,
                            const char *fmt, ...) PKV__PRINTF(3, 4);

/* Send one line to the engine's log callback if level is enabled. */
void pkv__engine_log(const pkv_engine *engine, int32_t level, const char *fmt,
                     ...) PKV__PRINTF(3, 4);

/* Bytes of one block over all layers for validated params; 0 on overflow. */
uint64_t pkv__block_bytes(const pkv_engine_params *params);

#endif
