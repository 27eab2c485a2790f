/* SPDX-License-Identifier: MIT */
/* A backend's KV events, read with msgpack-c (events.h). */
#include "events.h"

#include <msgpack.h>

#include <stdlib.h>
#include <string.h>

/* Bounds on one event, far above a real engine's (vLLM stores at most a
 * request's blocks in one event). */
#define MAX_BLOCKS 65536u
#define MAX_BLOCK_SIZE 4096u

void rt_feed_reset(rt_index *x, rt_feed *f)
{
    rt_index_clear(x, f->backend);
    f->group = RT_GROUP_UNSET;
}

static int is_str(const msgpack_object *o, const char *s)
{
    size_t n = strlen(s);
    return o != NULL && o->type == MSGPACK_OBJECT_STR &&
           o->via.str.size == n && memcmp(o->via.str.ptr, s, n) == 0;
}

static int is_nil(const msgpack_object *o)
{
    return o == NULL || o->type == MSGPACK_OBJECT_NIL;
}

/* A struct's field: at pos in the array layout, under name in maps. */
static const msgpack_object *field(const msgpack_object *o, uint32_t pos,
                                   const char *name)
{
    if (o->type == MSGPACK_OBJECT_ARRAY)
        return pos < o->via.array.size ? &o->via.array.ptr[pos] : NULL;
    if (o->type == MSGPACK_OBJECT_MAP)
        for (uint32_t i = 0; i < o->via.map.size; i++)
            if (is_str(&o->via.map.ptr[i].key, name))
                return &o->via.map.ptr[i].val;
    return NULL;
}

/* A whole number >= 0 below limit. */
static int get_uint(const msgpack_object *o, uint64_t limit, uint64_t *out)
{
    if (o == NULL || o->type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
        o->via.u64 >= limit)
        return -1;
    *out = o->via.u64;
    return 0;
}

/* A hash: an integer (its 8 big-endian bytes), bytes, or nil (allowed
 * where nil_ok: a root block's parent). */
static int get_hash(const msgpack_object *o, int nil_ok, rt_hash *h)
{
    memset(h, 0, sizeof *h);
    if (is_nil(o))
        return nil_ok ? 0 : -1;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
        o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        uint64_t v = o->via.u64; /* the same bits as via.i64 */
        h->kind = RT_HASH_INT;
        h->len = 8;
        for (int i = 7; i >= 0; i--, v >>= 8)
            h->bytes[i] = (uint8_t)v;
        return 0;
    }
    if (o->type == MSGPACK_OBJECT_BIN && o->via.bin.size > 0 &&
        o->via.bin.size <= RT_HASH_MAX) {
        h->kind = RT_HASH_BYTES;
        h->len = (uint8_t)o->via.bin.size;
        memcpy(h->bytes, o->via.bin.ptr, o->via.bin.size);
        return 0;
    }
    return -1;
}

/* block_hashes: 1 .. MAX_BLOCKS hashes, into a new array. */
static rt_hash *get_hashes(const msgpack_object *o, uint32_t *n)
{
    if (o == NULL || o->type != MSGPACK_OBJECT_ARRAY ||
        o->via.array.size == 0 || o->via.array.size > MAX_BLOCKS)
        return NULL;
    rt_hash *h = malloc(o->via.array.size * sizeof *h);
    for (uint32_t i = 0; h != NULL && i < o->via.array.size; i++) {
        if (get_hash(&o->via.array.ptr[i], 0, &h[i]) != 0) {
            free(h);
            h = NULL;
        }
    }
    *n = o->via.array.size;
    return h;
}

/* The group an event names: -1 for none (absent or nil), -2 bad. */
static int64_t get_group(const msgpack_object *o)
{
    uint64_t g;
    if (is_nil(o))
        return -1;
    return get_uint(o, INT64_MAX, &g) == 0 ? (int64_t)g : -2;
}

/* Whether a BlockStored is of a full-attention group. */
static int full_attention(const msgpack_object *ev)
{
    const msgpack_object *kind = field(ev, 10, "kv_cache_spec_kind");
    const msgpack_object *window =
        field(ev, 11, "kv_cache_spec_sliding_window");
    uint64_t w = 0;
    if (!is_nil(window) && (get_uint(window, UINT64_MAX, &w) != 0 || w != 0))
        return 0;
    return is_nil(kind) || is_str(kind, "full_attention") ||
           is_str(kind, "mla_attention");
}

static int stored(rt_index *x, rt_feed *f, const msgpack_object *ev)
{
    int64_t group = get_group(field(ev, 9, "group_idx"));
    if (group == -2)
        return -1;
    if (group == -1)
        group = 0; /* vLLM's events before groups were named */
    if (!full_attention(ev) ||
        (f->group != RT_GROUP_UNSET && group != f->group)) {
        f->skipped++;
        return 0;
    }
    rt_hash parent;
    uint64_t block_size;
    uint32_t n = 0;
    const msgpack_object *ids = field(ev, 3, "token_ids");
    if (get_hash(field(ev, 2, "parent_block_hash"), 1, &parent) != 0 ||
        get_uint(field(ev, 4, "block_size"), MAX_BLOCK_SIZE + 1,
                 &block_size) != 0 ||
        block_size == 0 || ids == NULL || ids->type != MSGPACK_OBJECT_ARRAY)
        return -1;
    rt_hash *hashes = get_hashes(field(ev, 1, "block_hashes"), &n);
    if (hashes == NULL || ids->via.array.size != n * block_size) {
        free(hashes);
        return -1;
    }
    int32_t *tokens = malloc(ids->via.array.size * sizeof *tokens);
    int rc = tokens != NULL ? 0 : -1;
    for (uint32_t i = 0; rc == 0 && i < ids->via.array.size; i++) {
        uint64_t t;
        rc = get_uint(&ids->via.array.ptr[i], (uint64_t)INT32_MAX + 1, &t);
        if (rc == 0)
            tokens[i] = (int32_t)t;
    }
    if (rc == 0)
        rc = rt_index_store(x, f->backend, &parent, hashes, n, tokens,
                            (uint32_t)block_size);
    if (rc == 0)
        f->group = group;
    free(tokens);
    free(hashes);
    return rc;
}

static int removed(rt_index *x, rt_feed *f, const msgpack_object *ev)
{
    int64_t group = get_group(field(ev, 3, "group_idx"));
    uint32_t n = 0;
    if (group == -2)
        return -1;
    if (group != -1 && group != f->group) {
        f->skipped++;
        return 0;
    }
    rt_hash *hashes = get_hashes(field(ev, 1, "block_hashes"), &n);
    if (hashes == NULL)
        return -1;
    for (uint32_t i = 0; i < n; i++)
        rt_index_remove(x, f->backend, &hashes[i]);
    free(hashes);
    return 0;
}

static int apply_event(rt_index *x, rt_feed *f, const msgpack_object *ev)
{
    const msgpack_object *tag = field(ev, 0, "type");
    if (tag == NULL || tag->type != MSGPACK_OBJECT_STR)
        return -1;
    if (is_str(tag, "BlockStored"))
        return stored(x, f, ev);
    if (is_str(tag, "BlockRemoved"))
        return removed(x, f, ev);
    if (is_str(tag, "AllBlocksCleared"))
        rt_feed_reset(x, f);
    else
        f->skipped++;
    return 0;
}

int rt_events_apply(rt_index *x, rt_feed *f, const void *payload,
                    size_t len)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int rc = -1;
    if (msgpack_unpack_next(&u, payload, len, &off) ==
            MSGPACK_UNPACK_SUCCESS &&
        off == len) {
        const msgpack_object *events = field(&u.data, 1, "events");
        if (events != NULL && events->type == MSGPACK_OBJECT_ARRAY) {
            rc = 0;
            for (uint32_t i = 0; rc == 0 && i < events->via.array.size; i++)
                rc = apply_event(x, f, &events->via.array.ptr[i]);
        }
    }
    msgpack_unpacked_destroy(&u);
    f->batches++;
    if (rc != 0)
        f->bad++;
    return rc;
}
