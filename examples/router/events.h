/* SPDX-License-Identifier: MIT */
/*
 * A backend's KV events, as vLLM's vllm/distributed/kv_events.py
 * documents them: each ZeroMQ message is three frames, a topic, an 8-byte
 * big-endian sequence number and a msgpack KVEventBatch, whose events are
 * BlockStored, BlockRemoved and AllBlocksCleared (msgspec tagged
 * structs). Both of msgspec's layouts are read: array_like (a batch
 * [ts, events, data_parallel_rank?], an event [tag, fields in declaration
 * order...]) and maps (a batch {"ts", "events", ...}, an event {"type":
 * tag, field: value...}). Fields read, by position in the array layout:
 *
 *   BlockStored      1 block_hashes, 2 parent_block_hash, 3 token_ids,
 *                    4 block_size, 9 group_idx, 10 kv_cache_spec_kind,
 *                    11 kv_cache_spec_sliding_window
 *   BlockRemoved     1 block_hashes, 3 group_idx
 *   AllBlocksCleared -
 *
 * the others (lora_id, medium, lora_name, extra_keys...) are not read; an
 * event of another tag is skipped. Hybrid memory: only one group's blocks
 * are kept, the first full-attention group a backend's events name (no
 * sliding window, and a kind, if given, of full_attention or
 * mla_attention; an event without group_idx is group 0's, as vLLM's
 * were before groups were named); stores of other groups are skipped,
 * and so are removals that name another group (one naming none applies).
 */
#ifndef PKV_ROUTER_EVENTS_H
#define PKV_ROUTER_EVENTS_H

#include "index.h"

#include <stddef.h>
#include <stdint.h>

/* What a backend's stream has said so far. */
typedef struct rt_feed {
    uint32_t backend;
    int have_seq;      /* a message was read: next_seq is expected */
    uint64_t next_seq;
    int catching_up;   /* replayed up to next_seq: live messages before
                          it are the replayed ones again */
    int64_t group;     /* the group kept, or RT_GROUP_UNSET */
    uint64_t batches, gaps, bad, skipped;
    uint64_t replayed; /* messages applied from a replay */
} rt_feed;

#define RT_GROUP_UNSET INT64_MIN

/* Apply one msgpack KVEventBatch, payload[0, len), to the feed's backend
 * in x. 0; -1 when the payload is not a batch as documented (the events
 * before the bad one are applied: the caller clears the backend). */
int rt_events_apply(rt_index *x, rt_feed *f, const void *payload,
                    size_t len);

/* Drop the backend's blocks and forget its group. */
void rt_feed_reset(rt_index *x, rt_feed *f);

#endif
