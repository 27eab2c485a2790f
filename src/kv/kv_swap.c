/* SPDX-License-Identifier: MIT */
/* A sequence's KV out to host memory and back (kv.h): preemption by swap,
 * and an import, which comes in as a swap-in. */
#include "kv/kv.h"

#include <string.h>

uint32_t pkv__kv_blocks_from(const pkv__kv *kv, uint32_t next,
                             uint32_t tokens)
{
    uint32_t bs = kv->pool.block_size;
    uint32_t n = 0, all = pkv__blocks_for(tokens, bs);
    for (uint32_t g = 0; g < kv->groups.num_groups; g++)
        n += all - pkv__groups_first_seen(&kv->groups, g, bs, next);
    return n;
}

size_t pkv__kv_swap_bytes(const pkv__kv *kv, uint32_t computed)
{
    return pkv__kv_blocks_from(kv, computed, computed) * kv->swap_block_bytes +
           kv->stage_bytes;
}

int pkv__kv_swap_reserve(pkv__kv *kv, pkv__kv_seq *s,
                         const pkv__allocator *alloc, uint32_t computed)
{
    pkv__kv_record *r = s->record;
    uint32_t n = pkv__kv_blocks_from(kv, computed, computed);
    size_t size = pkv__kv_swap_bytes(kv, computed);
    uint8_t *bytes = pkv__calloc(alloc, size, 1);
    uint32_t *blocks = pkv__calloc(alloc, n, sizeof *blocks);
    if (bytes == NULL || (n > 0 && blocks == NULL)) {
        pkv__free(alloc, bytes, size, 1);
        pkv__free(alloc, blocks, n, sizeof *blocks);
        return 0;
    }
    r->swap = bytes;
    r->swap_size = size;
    r->swap_blocks = blocks;
    r->swap_num_blocks = n;
    return 1;
}

uint32_t pkv__kv_swap_out(pkv__kv *kv, pkv__kv_seq *s, uint32_t computed)
{
    pkv__kv_record *r = s->record;
    /* Its windowed groups first drop what its next row cannot see, so
     * that each group's blocks out are the ones a swap-in makes. */
    uint32_t dropped = pkv__kv_slide(kv, s, computed);
    uint32_t n = 0;
    for (uint32_t g = 0; g < kv->groups.num_groups; g++) {
        const pkv__table *t = &s->tables[g];
        memcpy(r->swap_blocks + n, t->blocks + t->first_held,
               pkv__table_held(t) * sizeof *r->swap_blocks);
        n += pkv__table_held(t);
    }
    r->swap_stage = s->stage;
    kv->swap_used += r->swap_size;
    return dropped;
}

pkv_status pkv__kv_swap_copy_out(pkv__kv *kv, pkv__kv_seq *s,
                                 const pkv__allocator *alloc)
{
    const pkv__device *dev = kv->device;
    pkv__kv_record *r = s->record;
    uint32_t n = r->swap_num_blocks;
    pkv_status st =
        dev->ops->swap_out(dev->backend, r->swap_blocks, n, r->swap);
    if (st == PKV_OK && r->swap_stage != PKV__NO_STAGE)
        st = dev->ops->stage_out(dev->backend, r->swap_stage,
                                r->swap + n * kv->swap_block_bytes);
    pkv__free(alloc, r->swap_blocks, n, sizeof *r->swap_blocks);
    r->swap_blocks = NULL;
    r->swap_num_blocks = 0;
    return st;
}

pkv_status pkv__kv_swap_in(pkv__kv *kv, pkv__kv_seq *s, uint32_t next,
                           uint32_t tokens)
{
    pkv__pool *pool = &kv->pool;
    uint32_t bs = pool->block_size;
    if (pkv__kv_blocks_from(kv, next, tokens) > pkv__pool_available(pool))
        return PKV_ERR_NO_BLOCKS;
    for (uint32_t g = 0; g < kv->groups.num_groups; g++) {
        pkv__table *t = &s->tables[g];
        uint32_t first = pkv__groups_first_seen(&kv->groups, g, bs, next);
        pkv__block_copy none;
        pkv_status st = pkv__table_adopt_from(t, pool, NULL, first, first);
        if (st == PKV_OK)
            st = pkv__table_append(t, pool, tokens - first * bs, &none);
        if (st != PKV_OK) {
            pkv__kv_truncate(kv, s, 0);
            return st;
        }
        for (uint32_t i = first; g > 0 && i < t->num_blocks; i++)
            pkv__pool_set_group(pool, t->blocks[i], g);
    }
    return PKV_OK;
}

pkv_status pkv__kv_swap_copy_in(pkv__kv *kv, pkv__kv_seq *s,
                                const pkv__allocator *alloc,
                                uint32_t computed)
{
    const pkv__device *dev = kv->device;
    pkv__kv_record *r = s->record;
    uint32_t all = pkv__blocks_for(computed, kv->pool.block_size), done = 0;
    /* Every group's held blocks, group after group, as the swap-out
     * wrote them. */
    for (uint32_t g = 0; g < kv->groups.num_groups; g++) {
        const pkv__table *t = &s->tables[g];
        uint32_t n = all - t->first_held;
        pkv_status st = dev->ops->swap_in(
            kv->device->backend, r->swap + (size_t)done * kv->swap_block_bytes,
            t->blocks + t->first_held, n);
        if (st != PKV_OK)
            return st;
        done += n;
    }
    if (s->stage != PKV__NO_STAGE) {
        pkv_status st = dev->ops->stage_in(
            kv->device->backend, r->swap + (size_t)done * kv->swap_block_bytes,
            s->stage);
        if (st != PKV_OK)
            return st;
    }
    pkv__kv_drop_swap(kv, s, alloc);
    return PKV_OK;
}

pkv_status pkv__kv_read(const pkv__kv *kv, const pkv__kv_seq *s,
                        uint32_t computed, uint8_t *host)
{
    const pkv__device *dev = kv->device;
    uint32_t bs = kv->pool.block_size, all = pkv__blocks_for(computed, bs);
    uint32_t done = 0;
    for (uint32_t g = 0; g < kv->groups.num_groups; g++) {
        const pkv__table *t = &s->tables[g];
        uint32_t first = pkv__groups_first_seen(&kv->groups, g, bs, computed);
        pkv_status st = dev->ops->swap_out(
            kv->device->backend, t->blocks + first, all - first,
            host + (size_t)done * kv->swap_block_bytes);
        if (st != PKV_OK)
            return st;
        done += all - first;
    }
    if (s->stage == PKV__NO_STAGE)
        return PKV_OK;
    return dev->ops->stage_out(dev->backend, s->stage,
                              host + (size_t)done * kv->swap_block_bytes);
}

void pkv__kv_swap_import(pkv__kv_seq *s, uint8_t *bytes, size_t size)
{
    s->record->swap = bytes;
    s->record->swap_size = size;
    s->record->swap_imported = 1;
}

void pkv__kv_drop_swap(pkv__kv *kv, pkv__kv_seq *s,
                       const pkv__allocator *alloc)
{
    pkv__kv_record *r = s->record;
    if (r->swap == NULL)
        return;
    if (!r->swap_imported)
        kv->swap_used -= r->swap_size;
    r->swap_imported = 0;
    pkv__free(alloc, r->swap, r->swap_size, 1);
    r->swap = NULL;
    r->swap_size = 0;
}
