/* SPDX-License-Identifier: MIT */
/* The KV-cache manager (kv.h): its making and release, the staging
 * tails. */
#include "kv/kv.h"

#include "kv_layout.h"

#include <string.h>

pkv_status pkv__kv_init(pkv__kv *kv, const pkv__allocator *alloc,
                        const pkv_engine_params *params)
{
    memset(kv, 0, sizeof *kv);
    kv->lock = pkv__calloc(alloc, 1, sizeof *kv->lock);
    if (kv->lock == NULL)
        return PKV_ERR_OUT_OF_MEMORY;
    if (pkv__lock_init(kv->lock) != 0) {
        pkv__free(alloc, kv->lock, 1, sizeof *kv->lock);
        kv->lock = NULL;
        return PKV_ERR_OUT_OF_MEMORY;
    }
    pkv_status st = pkv__groups_init(&kv->groups, alloc, params);
    if (st == PKV_OK && PKV_LAYOUT_QUANTIZED(params->kv_dtype)) {
        kv->free_stages = pkv__calloc(alloc, params->max_num_seqs,
                                      sizeof *kv->free_stages);
        if (kv->free_stages == NULL)
            return PKV_ERR_OUT_OF_MEMORY;
        kv->max_stages = params->max_num_seqs;
        for (uint32_t i = 0; i < kv->max_stages; i++)
            kv->free_stages[i] = kv->max_stages - 1 - i;
        kv->num_free_stages = kv->max_stages;
    }
    if (st == PKV_OK)
        st = pkv__rollback_init(&kv->rollback, alloc, params);
    return st;
}

pkv_status pkv__kv_init_pool(pkv__kv *kv, const pkv__allocator *alloc,
                             const pkv__device *device,
                             const pkv__backend_config *config,
                             const pkv_engine_params *params)
{
    kv->device = device;
    kv->swap_block_bytes = pkv__backend_swap_block_bytes(config);
    kv->stage_bytes =
        pkv__backend_quantized(config) ? pkv__backend_stage_bytes(config) : 0;
    pkv_status st = pkv__pool_init(&kv->pool, alloc, config->num_blocks,
                                   config->block_size);
    if (st == PKV_OK)
        st = pkv__prefix_init(&kv->prefix, &kv->pool);
    if (st == PKV_OK)
        st = pkv__kv_events_init(&kv->events, alloc, params->kv_events,
                                 params->kv_events_user, config->num_blocks);
    if (st == PKV_OK && kv->events.fn != NULL)
        kv->prefix.events = &kv->events;
    return st;
}

void pkv__kv_release(pkv__kv *kv, const pkv__allocator *alloc)
{
    pkv__kv_events_release(&kv->events, alloc);
    if (kv->prefix.pool != NULL)
        pkv__prefix_release(&kv->prefix);
    if (kv->pool.blocks != NULL)
        pkv__pool_release(&kv->pool);
    pkv__rollback_release(&kv->rollback, alloc);
    pkv__free(alloc, kv->free_stages, kv->max_stages,
              sizeof *kv->free_stages);
    pkv__groups_release(&kv->groups, alloc);
    if (kv->lock != NULL) {
        pkv__lock_destroy(kv->lock);
        pkv__free(alloc, kv->lock, 1, sizeof *kv->lock);
    }
    memset(kv, 0, sizeof *kv);
}

void pkv__kv_take_stage(pkv__kv *kv, pkv__kv_seq *s)
{
    if (kv->max_stages > 0)
        s->stage = kv->free_stages[--kv->num_free_stages];
}

/* Give back s's staging tail and forget its windows. */
static void release_stage(pkv__kv *kv, pkv__kv_seq *s)
{
    if (s->stage == PKV__NO_STAGE)
        return;
    pkv__rollback_reset(&kv->rollback, s->stage);
    kv->free_stages[kv->num_free_stages++] = s->stage;
    s->stage = PKV__NO_STAGE;
}

void pkv__kv_drop(pkv__kv *kv, pkv__kv_seq *s)
{
    release_stage(kv, s);
    for (uint32_t g = 0; s->record != NULL && g < kv->groups.num_groups; g++)
        pkv__table_release(&s->tables[g], &kv->pool);
    pkv__prefix_chain_release(&s->chain, &kv->pool);
}

pkv_status pkv__kv_fork(pkv__kv *kv, pkv__kv_seq *dst,
                        const pkv__kv_seq *src)
{
    const pkv__device *dev = kv->device;
    pkv_status st = PKV_OK;
    for (uint32_t g = 0; st == PKV_OK && g < kv->groups.num_groups; g++)
        st = pkv__table_fork(&dst->tables[g], &src->tables[g], &kv->pool);
    if (st == PKV_OK)
        st = pkv__prefix_chain_adopt(&dst->chain, &kv->pool,
                                     src->chain.links, src->chain.num_links);
    /* A quantized cache: the child's tokens of a partly filled block are
     * in its own tail, a copy of the parent's. */
    if (st == PKV_OK && kv->max_stages > 0) {
        pkv__block_copy pair = {src->stage,
                                kv->free_stages[kv->num_free_stages - 1]};
        st = dev->ops->copy_stages(dev->backend, &pair, 1);
        if (st == PKV_OK)
            pkv__kv_take_stage(kv, dst);
    }
    if (st != PKV_OK)
        pkv__kv_drop(kv, dst);
    return st;
}
