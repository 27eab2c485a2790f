/* SPDX-License-Identifier: MIT */
/*
 * pkv_engine_save_prefix_cache and pkv_engine_load_prefix_cache: the
 * prefix cache as portable bytes, so that a restarted server answers its
 * first shared prompt with a hit (docs/design.md, "A prefix cache that
 * survives restarts", has the format).
 *
 * Saved: every cached block a lookup can still reach (its parent chain
 * valid up to the first block of a prompt), parents first, each with its
 * token ids, salt, the index of its parent and its KV as stored. Loaded:
 * into free blocks only (never evicting what the engine caches), skipping
 * blocks the engine already caches and blocks whose parent did not load;
 * the hashes are computed again, and every loaded block is cached and
 * unreferenced, first in line for eviction after the engine's own.
 */
#include "check.h"
#include "engine.h"
#include "kv_layout.h"
#include "seqs.h"
#include "kv/prefix_groups.h"
#include "seal.h"
#include "wire.h"

#include <stdlib.h>
#include <string.h>

#define HEADER_BYTES 64u
/* Versions 3 and 4: versions 1 and 2 with an XXH3 checksum (wire.h);
 * older ones are refused as made by an older pkv. Version 4: an engine
 * with hybrid memory's groups; its header goes on with a u32 group and a
 * u32 arena per layer, and each entry names its block's group. */
#define FORMAT_VERSION 3u
#define FORMAT_VERSION_GROUPS 4u
#define ROOT UINT32_MAX /* parent index of a prompt's first block */
static const uint8_t MAGIC[8] = {'P', 'K', 'V', 'P', 'F', 'X', '\r', '\n'};

/* Header fields after the common ones (wire.h). */
enum {
    AT_NUM_ENTRIES = PKV__AT_FORMAT_FIELDS, /* u32 */
    AT_BLOCK_BYTES = 48,                    /* u64 */
    AT_CHECKSUM = 56                        /* u64 */
};

/* An entry: u32 parent index (ROOT: none), u32 group (0 in version 3),
 * u64 salt, the block's token ids as u32. A block of group g > 0 has the
 * group-0 block of the same tokens as its parent (prefix_groups.h). */
static size_t entry_bytes(uint32_t block_size)
{
    return 16 + (size_t)4 * block_size;
}

/* The engine's version and header bytes. */
static uint32_t version_of(const pkv_engine *e)
{
    return e->kv.groups.num_groups > 1 ? FORMAT_VERSION_GROUPS : FORMAT_VERSION;
}

static uint32_t header_bytes(const pkv_engine *e)
{
    return e->kv.groups.num_groups > 1 ? HEADER_BYTES + 8 * e->kv.groups.num_layers
                                    : HEADER_BYTES;
}

/* Version 4's layer table: each layer's group and arena. */
static void put_layout(const pkv_engine *e, uint8_t *at)
{
    for (uint32_t l = 0; l < e->kv.groups.num_layers; l++) {
        pkv__put_u32(at + 8 * l, e->kv.groups.layer_group[l]);
        pkv__put_u32(at + 8 * l + 4, e->kv.groups.layer_arena[l]);
    }
}

typedef struct ranked {
    uint32_t depth, block;
} ranked;

static int by_depth(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->depth != y->depth)
        return x->depth < y->depth ? -1 : 1;
    return (x->block > y->block) - (x->block < y->block);
}

/* The reachable cached blocks, parents first, into order[0..*n) (room
 * for every block). depth (num_blocks entries, scratch) ends with each
 * block's depth + 1, or UINT32_MAX when a lookup cannot reach it. */
static void reachable(const pkv_engine *e, uint32_t *depth, uint32_t *path,
                      ranked *order, uint32_t *n)
{
    const pkv__pool *pool = &e->kv.pool;
    const pkv__prefix *prefix = &e->kv.prefix;
    uint32_t nb = pool->num_blocks;
    memset(depth, 0, nb * sizeof *depth);
    *n = 0;
    for (uint32_t b = 1; b < nb; b++) {
        if (!pool->blocks[b].cached || depth[b] != 0)
            continue;
        /* Climb to the first block whose depth is known (or the root). */
        uint32_t len = 0, x = b, base = UINT32_MAX;
        while (len < nb) {
            path[len++] = x;
            const pkv__prefix_entry *en = &prefix->entries[x];
            uint32_t p = en->parent;
            if (p == PKV__NULL_BLOCK) {
                if (en->parent_generation ==
                    pool->blocks[PKV__NULL_BLOCK].generation)
                    base = 0;
                break;
            }
            if (!pool->blocks[p].cached ||
                pool->blocks[p].generation != en->parent_generation)
                break;
            if (depth[p] != 0) {
                base = depth[p];
                break;
            }
            x = p;
        }
        for (uint32_t i = len; i-- > 0;) {
            base = base == UINT32_MAX ? UINT32_MAX : base + 1;
            depth[path[i]] = base;
            if (base != UINT32_MAX) {
                order[*n].depth = base;
                order[(*n)++].block = path[i];
            }
        }
    }
    qsort(order, *n, sizeof *order, by_depth);
}

pkv_status pkv_engine_save_prefix_cache(pkv_engine *e, void *buffer,
                                        size_t capacity, size_t *size)
{
    pkv_status checked = pkv__engine_check_size_out(e != NULL ? e->message : NULL, size);
    if (checked != PKV_OK)
        return checked;
    if (e->step.in_step)
        return pkv__engine_fail(e->message, PKV_ERR_BAD_STATE,
                                "save the prefix cache during a step: call "
                                "it after step_end");
    const pkv__backend_config *c = &e->backend_config;
    uint32_t nb = e->kv.pool.num_blocks, bs = c->block_size;
    uint32_t *depth = pkv__calloc(&e->alloc, nb, sizeof *depth);
    uint32_t *path = pkv__calloc(&e->alloc, nb, sizeof *path);
    ranked *order = pkv__calloc(&e->alloc, nb, sizeof *order);
    uint32_t *blocks = pkv__calloc(&e->alloc, nb, sizeof *blocks);
    pkv_status st = PKV_OK;
    if (!depth || !path || !order || !blocks) {
        st = pkv__engine_fail(e->message, PKV_ERR_OUT_OF_MEMORY,
                              "save the prefix cache: index of %u blocks",
                              (unsigned)nb);
        goto done;
    }
    uint32_t n;
    reachable(e, depth, path, order, &n);
    size_t block_bytes = pkv__backend_swap_block_bytes(c);
    uint32_t head = header_bytes(e);
    size_t kv_at = head + n * entry_bytes(bs);
    size_t content = kv_at + n * block_bytes;
    /* With a seal, the file goes after the seal's header. */
    size_t seal_at = e->seal != NULL ? PKV__SEAL_HEADER_BYTES : 0;
    *size = seal_at + content;
    if (buffer == NULL && capacity == 0)
        goto done;
    if (buffer == NULL || capacity < *size) {
        st = pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                              "the prefix cache takes %zu bytes; the buffer "
                              "has %zu",
                              *size, buffer == NULL ? (size_t)0 : capacity);
        goto done;
    }
    uint8_t *out = (uint8_t *)buffer + seal_at;
    for (uint32_t i = 0; i < n; i++)
        blocks[i] = order[i].block;
    st = e->device.ops->swap_out(e->device.backend, blocks, n, out + kv_at);
    if (st != PKV_OK) {
        st = pkv__engine_fail(e->message, st, "save the prefix cache: reading the "
                                     "KV: %s",
                              pkv_last_error());
        goto done;
    }
    /* Where each block went: its parent's index. path is free again. */
    for (uint32_t i = 0; i < n; i++)
        path[blocks[i]] = i;
    pkv__wire_put_header(out, head, MAGIC, version_of(e), c);
    pkv__put_u64(out + AT_BLOCK_BYTES, block_bytes);
    pkv__put_u32(out + AT_NUM_ENTRIES, n);
    if (e->kv.groups.num_groups > 1)
        put_layout(e, out + HEADER_BYTES);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t b = blocks[i];
        const pkv__prefix_entry *en = &e->kv.prefix.entries[b];
        uint8_t *p = out + head + i * entry_bytes(bs);
        pkv__put_u32(p, en->parent == PKV__NULL_BLOCK ? ROOT
                                                      : path[en->parent]);
        pkv__put_u32(p + 4, e->kv.pool.blocks[b].group);
        pkv__put_u64(p + 8, en->salt);
        for (uint32_t t = 0; t < bs; t++)
            pkv__put_u32(p + 16 + 4 * t,
                         (uint32_t)e->kv.prefix.tokens[(size_t)b * bs + t]);
    }
    pkv__put_u64(out + AT_CHECKSUM, pkv__checksum(out, content, AT_CHECKSUM));
    if (e->seal != NULL) {
        st = pkv__seal_close(e->seal, buffer, content, NULL, 0);
        if (st != PKV_OK)
            st = pkv__engine_fail(e->message, st, "save the prefix cache: sealing "
                                         "%zu bytes failed",
                                  content);
    }
done:
    pkv__free(&e->alloc, depth, nb, sizeof *depth);
    pkv__free(&e->alloc, path, nb, sizeof *path);
    pkv__free(&e->alloc, order, nb, sizeof *order);
    pkv__free(&e->alloc, blocks, nb, sizeof *blocks);
    if (st != PKV_OK)
        *size = st == PKV_ERR_INVALID_ARGUMENT ? *size : 0;
    return st;
}

/* The header's and entries' checks; PKV_OK when e may load data. */
static pkv_status check_file(pkv_engine *e, const uint8_t *d, size_t size)
{
    char why[128];
    /* A file from an engine with groups or without into one of the
     * other kind: its blocks hold other layers. */
    uint32_t version = size >= HEADER_BYTES && memcmp(d, MAGIC, 8) == 0
                           ? pkv__get_u32(d + PKV__AT_VERSION)
                           : version_of(e);
    if ((version == FORMAT_VERSION_GROUPS) != (e->kv.groups.num_groups > 1) &&
        (version == FORMAT_VERSION || version == FORMAT_VERSION_GROUPS))
        return pkv__engine_fail(
            e->message, PKV_ERR_UNSUPPORTED,
            "load: saved by an engine %s hybrid memory's groups of layers; "
            "this one has %s",
            version == FORMAT_VERSION ? "without" : "with",
            e->kv.groups.num_groups > 1 ? "them" : "none");
    uint32_t head = header_bytes(e);
    pkv_status st =
        pkv__wire_check_opening(d, size, MAGIC, version_of(e), head,
                                "a saved pkv prefix cache", why, sizeof why);
    if (st != PKV_OK)
        return pkv__engine_fail(e->message, st, "load: %s", why);
    uint32_t n = pkv__get_u32(d + AT_NUM_ENTRIES);
    uint32_t bs = pkv__get_u32(d + PKV__AT_BLOCK_SIZE);
    uint64_t block_bytes = pkv__get_u64(d + AT_BLOCK_BYTES);
    uint64_t total = block_bytes > UINT32_MAX || bs > UINT16_MAX
                         ? UINT64_MAX
                         : head + (uint64_t)n * (16 + 4 * bs) +
                               (uint64_t)n * block_bytes;
    if (total != size)
        return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                "load: the header says %u blocks, not %zu "
                                "bytes (truncated?)",
                                (unsigned)n, size);
    if (pkv__checksum(d, size, AT_CHECKSUM) != pkv__get_u64(d + AT_CHECKSUM))
        return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                "load: checksum mismatch: the bytes were "
                                "changed or damaged");
    uint8_t mine[HEADER_BYTES];
    pkv__wire_put_header(mine, HEADER_BYTES, MAGIC, FORMAT_VERSION,
                         &e->backend_config);
    if (memcmp(d + PKV__AT_KV_DTYPE, mine + PKV__AT_KV_DTYPE,
               PKV__AT_FORMAT_FIELDS - PKV__AT_KV_DTYPE) != 0 ||
        block_bytes != pkv__backend_swap_block_bytes(&e->backend_config))
        return pkv__engine_fail(
            e->message, PKV_ERR_UNSUPPORTED,
            "load: saved with kv_dtype %u, quant %u/%u, %u layers, %u kv "
            "heads, head_dim %u, block_size %u; this engine differs",
            (unsigned)pkv__get_u32(d + PKV__AT_KV_DTYPE),
            (unsigned)pkv__get_u32(d + PKV__AT_KEY_QUANT),
            (unsigned)pkv__get_u32(d + PKV__AT_VALUE_QUANT),
            (unsigned)pkv__get_u32(d + PKV__AT_NUM_LAYERS),
            (unsigned)pkv__get_u32(d + PKV__AT_NUM_KV_HEADS),
            (unsigned)pkv__get_u32(d + PKV__AT_HEAD_DIM), (unsigned)bs);
    if (e->kv.groups.num_groups > 1) {
        uint8_t layout[8];
        for (uint32_t l = 0; l < e->kv.groups.num_layers; l++) {
            pkv__put_u32(layout, e->kv.groups.layer_group[l]);
            pkv__put_u32(layout + 4, e->kv.groups.layer_arena[l]);
            if (memcmp(d + HEADER_BYTES + 8 * l, layout, 8) != 0)
                return pkv__engine_fail(
                    e->message, PKV_ERR_UNSUPPORTED,
                    "load: saved with layer %u in group %u, arena %u; this "
                    "engine has it in group %u, arena %u",
                    (unsigned)l,
                    (unsigned)pkv__get_u32(d + HEADER_BYTES + 8 * l),
                    (unsigned)pkv__get_u32(d + HEADER_BYTES + 8 * l + 4),
                    (unsigned)e->kv.groups.layer_group[l],
                    (unsigned)e->kv.groups.layer_arena[l]);
        }
    }
    uint32_t vocab = e->params.vocab_size;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *p = d + head + i * entry_bytes(bs);
        uint32_t parent = pkv__get_u32(p), group = pkv__get_u32(p + 4);
        /* A group-0 block follows a group-0 block; another group's block
         * names the group-0 block of its tokens. */
        uint32_t parent_group =
            parent == ROOT || parent >= i
                ? 0
                : pkv__get_u32(d + head + parent * entry_bytes(bs) + 4);
        if ((parent != ROOT && parent >= i) ||
            group >= e->kv.groups.num_groups || parent_group != 0 ||
            (group != 0 && parent == ROOT))
            return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                    "load: block %u of group %u has parent "
                                    "%u; parents come first, in group 0",
                                    (unsigned)i, (unsigned)group,
                                    (unsigned)parent);
        for (uint32_t t = 0; t < bs; t++) {
            uint32_t tok = pkv__get_u32(p + 16 + 4 * t);
            if (tok > INT32_MAX || (vocab != 0 && tok >= vocab))
                return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                        "load: block %u holds token %u; "
                                        "this engine's ids are 0..%u",
                                        (unsigned)i, (unsigned)tok,
                                        (unsigned)(vocab ? vocab - 1
                                                         : INT32_MAX));
        }
    }
    return PKV_OK;
}

#define NOT_LOADED UINT32_MAX
#define NEW_BLOCK (UINT32_MAX - 1)

/* pkv_engine_load_prefix_cache of size bytes of a saved prefix cache at
 * d (opened when sealed). */
static pkv_status load_file(pkv_engine *e, const uint8_t *d, size_t size,
                            uint32_t *num_loaded)
{
    pkv_status st = check_file(e, d, size);
    if (st != PKV_OK)
        return st;
    pkv__pool *pool = &e->kv.pool;
    uint32_t n = pkv__get_u32(d + AT_NUM_ENTRIES);
    uint32_t bs = pool->block_size;
    size_t block_bytes = pkv__backend_swap_block_bytes(&e->backend_config);
    uint32_t head = header_bytes(e);
    const uint8_t *kv = d + head + n * entry_bytes(bs);
    uint32_t cap = n ? n : 1;
    uint32_t *target = pkv__calloc(&e->alloc, cap, sizeof *target);
    uint64_t *hash = pkv__calloc(&e->alloc, cap, sizeof *hash);
    int32_t *tokens = pkv__calloc(&e->alloc, (size_t)cap * bs,
                                  sizeof *tokens);
    uint32_t *fresh = pkv__calloc(&e->alloc, cap, sizeof *fresh);
    uint8_t *bytes = NULL;
    size_t bytes_size = 0;
    uint32_t k = 0;
    if (!target || !hash || !tokens || !fresh) {
        st = pkv__engine_fail(e->message, PKV_ERR_OUT_OF_MEMORY,
                              "load: index of %u blocks", (unsigned)n);
        goto done;
    }
    /* Which entries to load: every block that is not cached already and
     * whose parent is (or loads), while free blocks last. */
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *p = d + head + i * entry_bytes(bs);
        uint32_t parent = pkv__get_u32(p), group = pkv__get_u32(p + 4);
        uint64_t salt = pkv__get_u64(p + 8);
        int32_t *t = tokens + (size_t)i * bs;
        for (uint32_t j = 0; j < bs; j++)
            t[j] = (int32_t)pkv__get_u32(p + 16 + 4 * j);
        hash[i] = group != 0 ? pkv__prefix_group_hash(hash[parent], group)
                             : pkv__prefix_hash(parent == ROOT ? 0
                                                               : hash[parent],
                                                t, bs, salt);
        uint32_t above = parent == ROOT ? PKV__NULL_BLOCK : target[parent];
        target[i] = NOT_LOADED;
        if (above == NOT_LOADED)
            continue;
        if (above != NEW_BLOCK) {
            uint32_t b = pkv__prefix_find_group(
                &e->kv.prefix, group, hash[i], t, salt, above,
                pool->blocks[above].generation);
            if (b != PKV__NO_BLOCK) {
                target[i] = b;
                continue;
            }
        }
        if (k < pool->num_free) {
            target[i] = NEW_BLOCK;
            fresh[k++] = i;
        }
    }
    /* Their KV, in load order, then every change. */
    bytes_size = k * block_bytes;
    bytes = pkv__calloc(&e->alloc, bytes_size ? bytes_size : 1, 1);
    if (bytes == NULL) {
        st = pkv__engine_fail(e->message, PKV_ERR_OUT_OF_MEMORY,
                              "load: %zu bytes of KV", bytes_size);
        goto done;
    }
    for (uint32_t j = 0; j < k; j++)
        memcpy(bytes + j * block_bytes, kv + fresh[j] * block_bytes,
               block_bytes);
    uint32_t *ids = fresh; /* becomes the blocks, entry by entry */
    for (uint32_t j = 0; j < k; j++) {
        uint32_t i = fresh[j];
        pkv__pool_alloc(pool, 1, &ids[j]); /* free blocks: cannot fail */
        pkv__pool_set_group(
            pool, ids[j],
            pkv__get_u32(d + head + i * entry_bytes(bs) + 4));
        target[i] = ids[j];
    }
    st = e->device.ops->swap_in(e->device.backend, bytes, ids, k);
    if (st != PKV_OK) {
        for (uint32_t j = 0; j < k; j++)
            pkv__pool_decref(pool, ids[j]);
        st = pkv__engine_fail(e->message, st, "load: writing the KV: %s",
                              pkv_last_error());
        goto done;
    }
    /* Register parents first (entries are in that order). */
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *p = d + head + i * entry_bytes(bs);
        uint32_t b = target[i];
        if (b == NOT_LOADED || pool->blocks[b].cached)
            continue;
        uint32_t parent = pkv__get_u32(p);
        uint32_t above = parent == ROOT ? PKV__NULL_BLOCK : target[parent];
        pkv__pool_set_fill(pool, b, bs);
        pkv__prefix_insert(&e->kv.prefix, b, hash[i], tokens + (size_t)i * bs,
                           pkv__get_u64(p + 8), above,
                           pool->blocks[above].generation);
    }
    /* Unreferenced: children first into the LRU queue, so that they go
     * before their parents. */
    for (uint32_t j = k; j-- > 0;)
        pkv__pool_decref(pool, ids[j]);
    if (num_loaded != NULL)
        *num_loaded = k;
    PKV__ENGINE_CHECK(e);
done:
    pkv__free(&e->alloc, target, cap, sizeof *target);
    pkv__free(&e->alloc, hash, cap, sizeof *hash);
    pkv__free(&e->alloc, tokens, (size_t)cap * bs, sizeof *tokens);
    pkv__free(&e->alloc, fresh, cap, sizeof *fresh);
    pkv__free(&e->alloc, bytes, bytes_size ? bytes_size : 1, 1);
    return st;
}

pkv_status pkv_engine_load_prefix_cache(pkv_engine *e, const void *data,
                                        size_t size, uint32_t *num_loaded)
{
    if (num_loaded != NULL)
        *num_loaded = 0;
    if (e == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "engine is NULL");
    if (data == NULL)
        return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT, "data is NULL");
    if (e->step.in_step)
        return pkv__engine_fail(e->message, PKV_ERR_BAD_STATE,
                                "load the prefix cache during a step: call "
                                "it after step_end");
    const uint8_t *d;
    size_t n;
    uint8_t *owned;
    char why[160];
    pkv_status st = pkv__seal_unwrap(e->seal, &e->alloc, data, size, MAGIC,
                                     &d, &n, &owned, why, sizeof why);
    if (st != PKV_OK)
        return pkv__engine_fail(e->message, st, "load: %s", why);
    st = load_file(e, d, n, num_loaded);
    pkv__free(&e->alloc, owned, n, 1);
    return st;
}
