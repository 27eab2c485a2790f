/* SPDX-License-Identifier: MIT */
/* The prefix cache as saved blocks (kv.h): the cached blocks a lookup can
 * still reach, parents first, and saved blocks joining the cache again
 * (a saved prefix cache's file is prefix_file.c's). */
#include "kv/kv.h"
#include "kv/prefix_groups.h"

#include <stdlib.h>
#include <string.h>

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
static void rank(const pkv__kv *kv, uint32_t *depth, uint32_t *path,
                 ranked *order, uint32_t *n)
{
    const pkv__pool *pool = &kv->pool;
    const pkv__prefix *prefix = &kv->prefix;
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

pkv_status pkv__kv_reachable(const pkv__kv *kv, const pkv__allocator *alloc,
                             uint32_t *blocks, pkv__kv_saved *saved,
                             uint32_t *n)
{
    uint32_t nb = kv->pool.num_blocks, bs = kv->pool.block_size;
    uint32_t *depth = pkv__calloc(alloc, nb, sizeof *depth);
    uint32_t *path = pkv__calloc(alloc, nb, sizeof *path);
    ranked *order = pkv__calloc(alloc, nb, sizeof *order);
    pkv_status st = PKV_ERR_OUT_OF_MEMORY;
    *n = 0;
    if (depth != NULL && path != NULL && order != NULL) {
        rank(kv, depth, path, order, n);
        /* Where each block went: its children's parent index. */
        for (uint32_t i = 0; i < *n; i++) {
            blocks[i] = order[i].block;
            path[blocks[i]] = i;
        }
        for (uint32_t i = 0; i < *n; i++) {
            uint32_t b = blocks[i];
            const pkv__prefix_entry *en = &kv->prefix.entries[b];
            saved[i].parent =
                en->parent == PKV__NULL_BLOCK ? PKV__KV_ROOT : path[en->parent];
            saved[i].group = kv->pool.blocks[b].group;
            saved[i].salt = en->salt;
            saved[i].tokens = kv->prefix.tokens + (size_t)b * bs;
        }
        st = PKV_OK;
    }
    pkv__free(alloc, depth, nb, sizeof *depth);
    pkv__free(alloc, path, nb, sizeof *path);
    pkv__free(alloc, order, nb, sizeof *order);
    return st;
}

#define NOT_LOADED UINT32_MAX
#define NEW_BLOCK (UINT32_MAX - 1)

/* Which of the saved blocks to load, into target (NOT_LOADED, NEW_BLOCK
 * or the cached block that holds it already) with their hashes: every
 * block not cached already whose parent is (or loads), while free blocks
 * last; the new ones' indices into fresh, *k of them. */
static void choose(const pkv__kv *kv, const pkv__kv_saved *saved,
                   uint32_t n, uint32_t *target, uint64_t *hash,
                   uint32_t *fresh, uint32_t *k)
{
    const pkv__pool *pool = &kv->pool;
    uint32_t bs = pool->block_size;
    *k = 0;
    for (uint32_t i = 0; i < n; i++) {
        const pkv__kv_saved *s = &saved[i];
        uint32_t parent = s->parent;
        hash[i] = s->group != 0
                      ? pkv__prefix_group_hash(hash[parent], s->group)
                      : pkv__prefix_hash(parent == PKV__KV_ROOT ? 0
                                                                : hash[parent],
                                         s->tokens, bs, s->salt);
        uint32_t above =
            parent == PKV__KV_ROOT ? PKV__NULL_BLOCK : target[parent];
        target[i] = NOT_LOADED;
        if (above == NOT_LOADED)
            continue;
        if (above != NEW_BLOCK) {
            uint32_t b = pkv__prefix_find_group(
                &kv->prefix, s->group, hash[i], s->tokens, s->salt, above,
                pool->blocks[above].generation);
            if (b != PKV__NO_BLOCK) {
                target[i] = b;
                continue;
            }
        }
        if (*k < pool->num_free) {
            target[i] = NEW_BLOCK;
            fresh[(*k)++] = i;
        }
    }
}

pkv_status pkv__kv_load_saved(pkv__kv *kv, const pkv__allocator *alloc,
                              const pkv__kv_saved *saved, uint32_t n,
                              const uint8_t *bytes, uint32_t *loaded)
{
    const pkv__device *dev = kv->device;
    pkv__pool *pool = &kv->pool;
    uint32_t bs = pool->block_size, cap = n ? n : 1, k = 0;
    size_t block_bytes = kv->swap_block_bytes;
    uint32_t *target = pkv__calloc(alloc, cap, sizeof *target);
    uint64_t *hash = pkv__calloc(alloc, cap, sizeof *hash);
    uint32_t *fresh = pkv__calloc(alloc, cap, sizeof *fresh);
    uint8_t *chosen = NULL;
    size_t chosen_size = 0;
    pkv_status st = PKV_ERR_OUT_OF_MEMORY;
    *loaded = 0;
    if (target == NULL || hash == NULL || fresh == NULL)
        goto done;
    choose(kv, saved, n, target, hash, fresh, &k);
    /* Their KV, in load order, then every change. */
    chosen_size = k * block_bytes;
    chosen = pkv__calloc(alloc, chosen_size ? chosen_size : 1, 1);
    if (chosen == NULL)
        goto done;
    for (uint32_t j = 0; j < k; j++)
        memcpy(chosen + j * block_bytes, bytes + fresh[j] * block_bytes,
               block_bytes);
    uint32_t *ids = fresh; /* becomes the blocks, entry by entry */
    for (uint32_t j = 0; j < k; j++) {
        uint32_t i = fresh[j];
        pkv__pool_alloc(pool, 1, &ids[j]); /* free blocks: cannot fail */
        pkv__pool_set_group(pool, ids[j], saved[i].group);
        target[i] = ids[j];
    }
    st = dev->ops->swap_in(dev->backend, chosen, ids, k);
    if (st != PKV_OK) {
        for (uint32_t j = 0; j < k; j++)
            pkv__pool_decref(pool, ids[j]);
        goto done;
    }
    /* Register parents first (the saved blocks are in that order). */
    for (uint32_t i = 0; i < n; i++) {
        uint32_t b = target[i];
        if (b == NOT_LOADED || pool->blocks[b].cached)
            continue;
        uint32_t parent = saved[i].parent;
        uint32_t above =
            parent == PKV__KV_ROOT ? PKV__NULL_BLOCK : target[parent];
        /* The block before it in its group: a group g > 0 block's parent
         * is the group-0 block of its tokens, whose parent is that. */
        uint32_t before =
            saved[i].group != 0 ? saved[parent].parent : parent;
        uint64_t before_hash =
            before == PKV__KV_ROOT ? 0
            : saved[i].group != 0
                ? pkv__prefix_group_hash(hash[before], saved[i].group)
                : hash[before];
        pkv__pool_set_fill(pool, b, bs);
        pkv__prefix_insert(&kv->prefix, b, hash[i], saved[i].tokens,
                           saved[i].salt, above,
                           pool->blocks[above].generation,
                           before == PKV__KV_ROOT ? NULL : &before_hash);
    }
    /* Unreferenced: children first into the LRU queue, so that they go
     * before their parents. */
    for (uint32_t j = k; j-- > 0;)
        pkv__pool_decref(pool, ids[j]);
    *loaded = k;
done:
    pkv__free(alloc, target, cap, sizeof *target);
    pkv__free(alloc, hash, cap, sizeof *hash);
    pkv__free(alloc, fresh, cap, sizeof *fresh);
    pkv__free(alloc, chosen, chosen_size ? chosen_size : 1, 1);
    return st;
}
