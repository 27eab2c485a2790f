/* SPDX-License-Identifier: MIT */
/* KV events (events.h): what the prefix cache gained and lost, per block,
 * delivered to the host's callback. */
#include "kv/events.h"

#include <string.h>

enum { NONE = 0, QUEUED = 1, ANNOUNCED = 2, DROPPED = 3 };

pkv_status pkv__kv_events_init(pkv__kv_events *ev,
                               const pkv__allocator *alloc,
                               pkv_kv_events_fn fn, void *user,
                               uint32_t num_blocks)
{
    memset(ev, 0, sizeof *ev);
    if (fn == NULL)
        return PKV_OK;
    ev->num_blocks = num_blocks;
    ev->state = pkv__calloc(alloc, num_blocks, sizeof *ev->state);
    ev->hash = pkv__calloc(alloc, num_blocks, sizeof *ev->hash);
    ev->parent = pkv__calloc(alloc, num_blocks, sizeof *ev->parent);
    ev->has_parent = pkv__calloc(alloc, num_blocks, sizeof *ev->has_parent);
    ev->stored = pkv__calloc(alloc, num_blocks, sizeof *ev->stored);
    ev->removed = pkv__calloc(alloc, num_blocks, sizeof *ev->removed);
    ev->removed_group =
        pkv__calloc(alloc, num_blocks, sizeof *ev->removed_group);
    ev->removed_block =
        pkv__calloc(alloc, num_blocks, sizeof *ev->removed_block);
    if (ev->state == NULL || ev->hash == NULL || ev->parent == NULL ||
        ev->has_parent == NULL || ev->stored == NULL || ev->removed == NULL ||
        ev->removed_group == NULL || ev->removed_block == NULL) {
        pkv__kv_events_release(ev, alloc);
        return PKV_ERR_OUT_OF_MEMORY;
    }
    ev->fn = fn;
    ev->user = user;
    return PKV_OK;
}

void pkv__kv_events_release(pkv__kv_events *ev, const pkv__allocator *alloc)
{
    uint32_t n = ev->num_blocks;
    pkv__free(alloc, ev->state, n, sizeof *ev->state);
    pkv__free(alloc, ev->hash, n, sizeof *ev->hash);
    pkv__free(alloc, ev->parent, n, sizeof *ev->parent);
    pkv__free(alloc, ev->has_parent, n, sizeof *ev->has_parent);
    pkv__free(alloc, ev->stored, n, sizeof *ev->stored);
    pkv__free(alloc, ev->removed, n, sizeof *ev->removed);
    pkv__free(alloc, ev->removed_group, n, sizeof *ev->removed_group);
    pkv__free(alloc, ev->removed_block, n, sizeof *ev->removed_block);
    memset(ev, 0, sizeof *ev);
}

void pkv__kv_events_stored(pkv__kv_events *ev, uint32_t block, uint64_t hash,
                           const uint64_t *parent)
{
    /* A block joins only while it is not cached: NONE, or DROPPED (left
     * since the delivery, so already listed). */
    if (ev->state[block] == NONE)
        ev->stored[ev->num_stored++] = block;
    ev->state[block] = QUEUED;
    ev->hash[block] = hash;
    ev->has_parent[block] = parent != NULL;
    ev->parent[block] = parent != NULL ? *parent : 0;
}

void pkv__kv_events_removed(pkv__kv_events *ev, uint32_t block,
                            uint32_t group)
{
    switch (ev->state[block]) {
    case QUEUED:
        ev->state[block] = DROPPED;
        break;
    case ANNOUNCED:
        ev->removed[ev->num_removed] = ev->hash[block];
        ev->removed_group[ev->num_removed] = (uint8_t)group;
        ev->removed_block[ev->num_removed++] = block;
        ev->state[block] = NONE;
        break;
    default:
        break;
    }
}

void pkv__kv_events_clear(pkv__kv_events *ev)
{
    memset(ev->state, NONE, ev->num_blocks * sizeof *ev->state);
    ev->num_stored = 0;
    ev->num_removed = 0;
    ev->cleared = 1;
}

/* Hand the chunk to the host once it is full (or, last, not empty). */
static void push(pkv__kv_events *ev, uint32_t *n, const pkv_kv_event *e)
{
    ev->chunk[(*n)++] = *e;
    if (*n == PKV__KV_EVENTS_CHUNK) {
        ev->fn(ev->user, ev->chunk, *n);
        *n = 0;
    }
}

void pkv__kv_events_deliver(pkv__kv_events *ev, const int32_t *tokens,
                            uint32_t block_size, const pkv__block *blocks,
                            const pkv__groups *groups)
{
    if (ev->fn == NULL)
        return;
    uint32_t n = 0;
    pkv_kv_event e;
    if (ev->cleared) {
        memset(&e, 0, sizeof e);
        e.kind = PKV_KV_EVENT_ALL_CLEARED;
        e.block_size = block_size;
        push(ev, &n, &e);
        ev->cleared = 0;
    }
    for (uint32_t i = 0; i < ev->num_removed; i++) {
        memset(&e, 0, sizeof e);
        e.kind = PKV_KV_EVENT_REMOVED;
        e.hash = ev->removed[i];
        e.block_size = block_size;
        e.group = ev->removed_group[i];
        e.window = pkv__groups_window(groups, e.group);
        e.block = ev->removed_block[i];
        push(ev, &n, &e);
    }
    for (uint32_t i = 0; i < ev->num_stored; i++) {
        uint32_t b = ev->stored[i];
        if (ev->state[b] == DROPPED) {
            ev->state[b] = NONE;
            continue;
        }
        memset(&e, 0, sizeof e);
        e.kind = PKV_KV_EVENT_STORED;
        e.flags = ev->has_parent[b] ? PKV_KV_EVENT_HAS_PARENT : 0;
        e.hash = ev->hash[b];
        e.parent_hash = ev->parent[b];
        e.token_ids = tokens + (size_t)b * block_size;
        e.block_size = block_size;
        e.group = blocks[b].group;
        e.window = pkv__groups_window(groups, e.group);
        e.block = b;
        ev->state[b] = ANNOUNCED;
        push(ev, &n, &e);
    }
    ev->num_stored = 0;
    ev->num_removed = 0;
    if (n > 0)
        ev->fn(ev->user, ev->chunk, n);
}
