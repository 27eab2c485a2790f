/* SPDX-License-Identifier: MIT */
/*
 * KV events (pkv_engine_params.kv_events): the prefix cache's gains and
 * losses since the last delivery, kept per block so that nothing is
 * allocated while the cache changes. A block is NONE (not announced),
 * QUEUED (joined since the last delivery, listed in stored), ANNOUNCED
 * (delivered as stored), or DROPPED (listed in stored, but left again
 * before a delivery: announced neither way). A block that leaves while
 * ANNOUNCED lists its hash in removed. Each block is listed at most once
 * in either list between deliveries, so both fit in num_blocks.
 */
#ifndef PKV_KV_EVENTS_H
#define PKV_KV_EVENTS_H

#include "alloc.h"
#include "kv/groups.h"

#include <stdint.h>

/* Events handed to the host per call. */
#define PKV__KV_EVENTS_CHUNK 256u

typedef struct pkv__kv_events {
    pkv_kv_events_fn fn; /* NULL: off, nothing below is allocated */
    void *user;
    uint32_t num_blocks;
    uint8_t *state;          /* [num_blocks]: enum in events.c */
    uint64_t *hash;          /* [num_blocks]: queued or announced hash */
    uint64_t *parent;        /* [num_blocks]: a queued block's parent hash */
    uint8_t *has_parent;     /* [num_blocks] */
    uint32_t *stored;        /* blocks that joined, in order */
    uint32_t num_stored;
    uint64_t *removed;       /* hashes of announced blocks that left */
    uint8_t *removed_group;  /* and their groups */
    uint32_t *removed_block; /* and the blocks that held them */
    uint32_t num_removed;
    int cleared;             /* the cache was reset since the delivery */
    pkv_kv_event chunk[PKV__KV_EVENTS_CHUNK];
} pkv__kv_events;

/* Events for a pool of num_blocks blocks when fn is set (else off).
 * PKV_ERR_OUT_OF_MEMORY leaves it off. */
pkv_status pkv__kv_events_init(pkv__kv_events *ev,
                               const pkv__allocator *alloc,
                               pkv_kv_events_fn fn, void *user,
                               uint32_t num_blocks);
void pkv__kv_events_release(pkv__kv_events *ev, const pkv__allocator *alloc);

/* Block `block` joined the prefix cache under hash, after the block of
 * parent_hash (parent NULL: a prompt's first block). */
void pkv__kv_events_stored(pkv__kv_events *ev, uint32_t block, uint64_t hash,
                           const uint64_t *parent);

/* Block `block`, of group `group`, left the prefix cache. */
void pkv__kv_events_removed(pkv__kv_events *ev, uint32_t block,
                            uint32_t group);

/* The prefix cache was emptied: what was pending is dropped, and the next
 * delivery starts with ALL_CLEARED. */
void pkv__kv_events_clear(pkv__kv_events *ev);

/* Deliver what changed since the last delivery (nothing: no call). The
 * queued blocks' tokens are read from tokens (block_size per block, by
 * block id), their groups from blocks, the windows from groups. */
void pkv__kv_events_deliver(pkv__kv_events *ev, const int32_t *tokens,
                            uint32_t block_size, const pkv__block *blocks,
                            const pkv__groups *groups);

#endif
