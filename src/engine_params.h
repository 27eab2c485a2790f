/* SPDX-License-Identifier: MIT */
/* An engine's parameters (engine_params.c): defaults, checks, and sizes
 * derived from them. */
#ifndef PKV_ENGINE_PARAMS_H
#define PKV_ENGINE_PARAMS_H

#include "pkv/pkv.h"

/* Copy the caller's params (struct_size bytes of them) over the defaults
 * into *out, then check every field. Messages go to the thread-local
 * error: no engine exists yet. */
pkv_status pkv__params_resolve(const pkv_engine_params *in,
                               pkv_engine_params *out);

/* The pool's size: num_blocks, or as many blocks as cache_bytes holds,
 * for params whose block_size is set. */
pkv_status pkv__params_size_pool(pkv_engine_params *params);

/* Bytes of one pool block for validated params: every layer, or one
 * group's layers with hybrid memory (groups.h). */
uint64_t pkv__block_bytes(const pkv_engine_params *params);

#endif
