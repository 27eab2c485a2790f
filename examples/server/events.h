/* SPDX-License-Identifier: MIT */
/*
 * pkv-server's KV events publisher (--kv-events ENDPOINT): the engine's
 * KV events (pkv_engine_params.kv_events) sent over a ZeroMQ PUB socket
 * in vLLM's KV-events wire format, so that a KV-aware router built for
 * vLLM (llm-d's KV-cache indexer, Dynamo's router) can follow a pkv
 * engine's prefix cache. Each message has three frames: the topic, an
 * 8-byte big-endian sequence number (0, 1, ... per publisher) and a
 * msgpack KVEventBatch, as vllm/distributed/kv_events.py's
 * ZmqEventPublisher sends them with array-like, tagged msgspec structs:
 *
 *   KVEventBatch     [ts (float, Unix seconds), [event, ...],
 *                     data_parallel_rank (0)]
 *   BlockStored      ["BlockStored", [block_hash], parent_block_hash or
 *                     nil, [token_id, ...], block_size, lora_id (nil),
 *                     medium, lora_name (nil), extra_keys (nil),
 *                     group_idx, kv_cache_spec_kind, sliding_window or
 *                     nil]
 *   BlockRemoved     ["BlockRemoved", [block_hash], medium, group_idx]
 *   AllBlocksCleared ["AllBlocksCleared"]
 *
 * One event per block, hashes as pkv names them (pkv.h, pkv_kv_event:
 * 64-bit, unsigned), medium "GPU" on the OpenCL backend and "CPU" on the
 * CPU backend, kv_cache_spec_kind "full_attention" or "sliding_window"
 * (a group with a window, hybrid memory). Each call of the engine's
 * callback (up to 256 events) is one batch. The callback runs on the
 * stepping thread, never blocks (a subscriber too slow for the socket's
 * high-water mark loses messages, which the sequence numbers show), and
 * allocates nothing per event once the first batch ran (with replay, a
 * copy of each batch is kept in place of the one 1,024 before). Replay
 * requests are answered by a thread of their own as they come, the
 * server idle or not.
 */
#ifndef PKV_SERVER_EVENTS_H
#define PKV_SERVER_EVENTS_H

#include <pkv/pkv.h>

typedef struct srv_events srv_events;

/* A publisher on endpoint (bound if it holds '*' or "::", or is ipc://
 * or inproc://, as vLLM's is, else connected), its messages under topic, and when replay is not NULL a
 * ROUTER bound there that sends the last 1,024 messages again from a
 * sequence number on (vLLM's replay protocol: events.c). NULL after
 * printing why. */
srv_events *srv_events_open(const char *endpoint, const char *replay,
                            const char *topic);

/* The medium its events name: the engine's backend (pkv_engine_backend_
 * name), known once the engine exists, before its first step. */
void srv_events_set_medium(srv_events *ev, const char *backend_name);

/* Close the socket (pending messages dropped) and free; NULL: nothing. */
void srv_events_close(srv_events *ev);

/* The engine's callback (pkv_kv_events_fn): user is a srv_events. */
void srv_events_publish(void *user, const pkv_kv_event *events,
                        uint32_t count);

#endif
