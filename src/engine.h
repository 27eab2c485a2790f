/* SPDX-License-Identifier: MIT */
/*
 * The engine object: what pkv_engine_* functions hold between calls, as
 * one part per owner. Only the engine's own call files include this (the
 * API's entry points, the scheduler and plan, the lifecycle, state
 * transfer and the store's engine side: tests/check_layout.py keeps the
 * list); a module below them takes the part it works on.
 */
#ifndef PKV_ENGINE_H
#define PKV_ENGINE_H

#include "backend.h"
#include "engine_error.h"
#include "inbox.h"
#include "seqs.h"
#include "kv/kv.h"
#include "step_state.h"

struct pkv__engine_store;
struct pkv__seal;

struct pkv_engine {
    pkv__allocator alloc;
    pkv_engine_params params; /* defaults resolved */
    uint32_t *layer_windows;  /* [num_layers]: each layer's window (0:
                                 all), params.layer_windows points here */
    uint64_t block_bytes;     /* one block over all layers (with hybrid
                                 memory, one group's layers) */
    uint32_t watermark_blocks; /* blocks admission leaves free */
    uint64_t drafts_step; /* the step the latest pkv_seq_propose was for:
                             in the others, no sequence has drafts */
    pkv__kv kv;                /* the KV-cache manager (kv/kv.h) */
    pkv__device device;        /* backend.h */
    pkv__backend_config backend_config;
    pkv__inbox inbox;          /* sequences added from any thread */
    pkv__seqs seqs;            /* lifecycle.h */
    pkv__step_state step;      /* step_state.h */
    struct pkv__engine_store *store; /* store/engine_store.h */
    struct pkv__seal *seal; /* seal.h; NULL: no seal_key */
    pkv_engine_stats totals; /* the cumulative counters */
    pkv__engine_message *message; /* engine_error.h */
};

#endif
