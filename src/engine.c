/* SPDX-License-Identifier: MIT */
/* The engine object: pkv_engine_create and pkv_engine_destroy, its step
 * arrays, its backend, and its counters. */
#include "engine.h"
#include "engine_params.h"
#include "store/engine_store.h"
#include "kv_layout.h"
#include "seal.h"
#include "struct_sizes.h"

#include <string.h>

/* The engine's own copy of each layer's window (params.layer_windows,
 * else sliding_window for every layer); params points at it. */
static pkv_status copy_layer_windows(pkv_engine *e)
{
    const uint32_t *given = e->params.layer_windows;
    e->layer_windows = pkv__calloc(&e->alloc, e->params.num_layers,
                                   sizeof *e->layer_windows);
    if (e->layer_windows == NULL)
        return PKV_ERR_OUT_OF_MEMORY;
    for (uint32_t l = 0; l < e->params.num_layers; l++)
        e->layer_windows[l] =
            given != NULL ? given[l] : e->params.sliding_window;
    e->params.layer_windows = e->layer_windows;
    return PKV_OK;
}

/* The backend's config from the params; the backend (backend.c). */
static pkv_status create_backend(pkv_engine *e)
{
    const pkv_engine_params *p = &e->params;
    pkv__backend_config *c = &e->backend_config;
    c->num_layers = p->num_layers;
    c->num_q_heads = p->num_q_heads;
    c->num_kv_heads = p->num_kv_heads;
    c->head_dim = p->head_dim;
    c->block_size = p->block_size;
    c->num_blocks = p->num_blocks;
    c->kv_dtype = p->kv_dtype;
    c->key_quant = p->key_quant;
    c->value_quant = p->value_quant;
    c->u4_group = p->u4_group;
    /* Working tails 0..max_num_seqs-1, then each one's rollback window
     * tails (rollback.h). */
    c->num_stages = PKV_LAYOUT_QUANTIZED(p->kv_dtype)
                        ? p->max_num_seqs * (1 + p->u8_rollback_blocks)
                        : 0;
    c->max_step_seqs = p->max_num_seqs;
    c->max_seq_tokens = p->max_model_len;
    c->parallel = p->parallel;
    c->parallel_user = p->parallel_user;
    c->workers = p->parallel_workers;
    /* The layers' places in the groups and arenas (kv/groups.h). */
    const pkv__groups *g = &e->kv.groups;
    c->num_groups = g->num_groups;
    c->num_arenas = g->slots;
    c->layer_arena = g->layer_arena;
    c->layer_group = g->layer_group;
    c->group_windows = g->group_windows;
    return pkv__backend_create_for(p, c, &e->alloc, &e->device.ops,
                                   &e->device.backend);
}

/* Release everything create may have made; fields not made are NULL. */
static void engine_free(pkv_engine *e)
{
    pkv__seq_list *lists[] = {&e->seqs.waiting, &e->seqs.running,
                              &e->seqs.swapped, &e->seqs.ended};
    for (size_t l = 0; l < 4; l++)
        for (uint32_t i = 0; i < lists[l]->count; i++)
            pkv__kv_drop(&e->kv, &lists[l]->items[i]->kv);
    /* Before the backend and pool: the store's operations in flight are
     * cancelled, so the connector stops writing into their buffers. */
    pkv__store_release(e->store);
    pkv__seal_destroy(e->seal, &e->alloc);
    if (e->device.ops != NULL)
        e->device.ops->destroy(e->device.backend);
    pkv__seqs_release(&e->seqs);
    pkv__step_state_release(&e->step, &e->alloc);
    pkv__kv_release(&e->kv, &e->alloc);
    pkv__free(&e->alloc, e->layer_windows, e->params.num_layers,
              sizeof *e->layer_windows);
    pkv__allocator alloc = e->alloc;
    pkv__engine_message_destroy(e->message, &alloc);
    pkv__free(&alloc, e, 1, sizeof *e);
}

pkv_status pkv_engine_create(const pkv_engine_params *params,
                             pkv_engine **out)
{
    pkv__set_error(""); /* no message left over from an earlier failure */
    if (out == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    if (params == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "params is NULL");
    pkv_engine_params p;
    pkv_status st = pkv__params_resolve(params, &p);
    if (st != PKV_OK)
        return st;
    pkv__backend_log_loader(&p);
    if (p.block_size == 0)
        p.block_size = pkv__backend_default_block_size(&p);
    st = pkv__params_size_pool(&p);
    if (st != PKV_OK)
        return st;
    pkv__allocator alloc;
    if (pkv__allocator_resolve(&p.allocator, &alloc) != PKV_OK)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->allocator: alloc and free must both be set "
                         "or both be NULL");

    pkv_engine *e = pkv__calloc(&alloc, 1, sizeof *e);
    if (e == NULL || pkv__engine_message_create(&alloc, &p, &e->message) !=
                         PKV_OK) {
        pkv__free(&alloc, e, 1, sizeof *e);
        return pkv__fail(PKV_ERR_OUT_OF_MEMORY, "engine object");
    }
    e->alloc = alloc;
    e->params = p;
    e->block_bytes = pkv__block_bytes(&p);
    e->watermark_blocks = (uint32_t)(p.watermark * (float)(p.num_blocks - 1));
    e->drafts_step = UINT64_MAX; /* none proposed */
    if (pkv__inbox_init(&e->inbox, &alloc) != PKV_OK) {
        engine_free(e);
        return pkv__fail(PKV_ERR_OUT_OF_MEMORY, "inbox mutex");
    }
    if (copy_layer_windows(e) != PKV_OK ||
        pkv__kv_init(&e->kv, &alloc, &e->params) != PKV_OK) {
        pkv__inbox_release(&e->inbox, &alloc);
        engine_free(e);
        return pkv__fail(PKV_ERR_OUT_OF_MEMORY,
                         "layer windows, staging tails, rollback window");
    }
    /* The KV storage first: a cache too large for the machine fails before
     * the host metadata (proportional to the blocks) is built. */
    const char *what = "backend";
    st = create_backend(e);
    if (st != PKV_OK)
        e->device.ops = NULL;
    if (st == PKV_OK) {
        what = "block pool";
        pkv__set_error(""); /* the backend may have noted a fallback */
        st = pkv__kv_init_pool(&e->kv, &alloc, &e->device,
                               &e->backend_config, &e->params);
    }
    /* The key itself is not kept: the seal holds what it derives. */
    e->params.seal_key = NULL;
    if (st == PKV_OK && p.seal_key != NULL) {
        what = "seal";
        st = pkv__seal_create(p.seal_key, &alloc, &e->seal);
    }
    if (st == PKV_OK) {
        what = "store state";
        pkv__store_env env = {&e->kv,         &e->backend_config, e->seal,
                              &e->totals,     e->message,         &e->inbox,
                              alloc};
        st = pkv__store_init(&e->store, &env, p.store);
        if (st == PKV_OK && p.store != NULL)
            e->params.store = &e->store->cb;
    }
    if (st == PKV_OK) {
        what = "step arrays";
        st = pkv__step_state_init(&e->step, &alloc, &p);
    }
    if (st == PKV_OK) {
        what = "sequence lists";
        st = pkv__seqs_init(&e->seqs, &alloc, &p, &e->kv, e->store,
                            &e->totals);
    }
    if (st != PKV_OK) {
        char why[PKV__ERROR_MAX];
        /* An inner call that set no message leaves the one cleared at the
         * start: say what the status means instead. */
        strncpy(why, pkv_last_error()[0] ? pkv_last_error()
                                         : pkv_status_string(st),
                sizeof why - 1);
        why[sizeof why - 1] = '\0';
        pkv__inbox_release(&e->inbox, &alloc);
        engine_free(e);
        return pkv__fail(st, "%s of %u blocks: %s", what,
                         (unsigned)p.num_blocks, why);
    }
    pkv__engine_log(e->message, PKV_LOG_LEVEL_INFO,
                    "pkv %s: %s backend, %u blocks of %u tokens, %llu bytes "
                    "per block",
                    PKV_VERSION_STRING, e->device.ops->name,
                    (unsigned)p.num_blocks, (unsigned)p.block_size,
                    (unsigned long long)e->block_bytes);
    *out = e;
    return PKV_OK;
}

void pkv_engine_destroy(pkv_engine *engine)
{
    if (engine == NULL)
        return;
    pkv__inbox_release(&engine->inbox, &engine->alloc);
    engine_free(engine);
}

const char *pkv_engine_backend_name(const pkv_engine *engine)
{
    return engine == NULL ? "" : engine->device.ops->name;
}

pkv_status pkv_engine_stats_init(pkv_engine_stats *stats)
{
    if (stats == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "stats is NULL");
    memset(stats, 0, sizeof *stats);
    stats->struct_size = sizeof *stats;
    return PKV_OK;
}

pkv_status pkv_engine_get_group_stats(const pkv_engine *engine,
                                      uint32_t group, uint32_t *window,
                                      uint64_t *blocks_used,
                                      uint64_t *tokens_stored)
{
    if (engine == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "engine is NULL");
    if (window == NULL || blocks_used == NULL || tokens_stored == NULL)
        return pkv__engine_fail(engine->message, PKV_ERR_INVALID_ARGUMENT,
                                "every out-parameter must be set");
    if (group >= engine->kv.groups.num_groups)
        return pkv__engine_fail(engine->message, PKV_ERR_INVALID_ARGUMENT,
                                "group %u of %u", (unsigned)group,
                                (unsigned)engine->kv.groups.num_groups);
    *window = pkv__groups_window(&engine->kv.groups, group);
    *blocks_used = engine->kv.pool.group_used[group];
    *tokens_stored = engine->kv.pool.group_tokens[group];
    return PKV_OK;
}

pkv_status pkv_engine_get_stats(const pkv_engine *engine,
                                pkv_engine_stats *stats)
{
    if (engine == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "engine is NULL");
    if (stats == NULL)
        return pkv__engine_fail(engine->message, PKV_ERR_INVALID_ARGUMENT,
                                "stats is NULL");
    char why[128];
    if (pkv__struct_size_bad(stats->struct_size, PKV__ENGINE_STATS_MIN_SIZE,
                             sizeof *stats, "stats", "pkv_engine_stats_init",
                             why, sizeof why))
        return pkv__engine_fail(engine->message, PKV_ERR_STRUCT_SIZE, "%s",
                                why);
    const pkv__pool *pool = &engine->kv.pool;
    pkv_engine_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = stats->struct_size;
    s.block_size = pool->block_size;
    s.blocks_total = pool->num_blocks;
    s.blocks_free = pool->num_free;
    s.blocks_cached_free = pool->num_cached_free;
    s.blocks_used = pool->num_used;
    s.tokens_stored = pool->tokens_stored;
    s.slots_allocated = (uint64_t)(pool->num_used - 1) * pool->block_size;
    s.block_bytes = engine->block_bytes;
    s.num_waiting = engine->seqs.waiting.count;
    s.num_running = engine->seqs.running.count;
    s.num_swapped = engine->seqs.swapped.count;
    s.steps = engine->totals.steps;
    s.prefix_query_tokens = engine->totals.prefix_query_tokens;
    s.prefix_hit_tokens = engine->totals.prefix_hit_tokens;
    s.preemptions = engine->totals.preemptions;
    s.swap_outs = engine->totals.swap_outs;
    s.swap_ins = engine->totals.swap_ins;
    s.seqs_finished = engine->totals.seqs_finished;
    s.draft_tokens = engine->totals.draft_tokens;
    s.draft_tokens_accepted = engine->totals.draft_tokens_accepted;
    /* The store's counters are kept in totals as they are reported. */
    const pkv_engine_stats *t = &engine->totals;
    s.num_loading = engine->store->num_loading;
    s.store_lookups = t->store_lookups;
    s.store_query_blocks = t->store_query_blocks;
    s.store_hit_blocks = t->store_hit_blocks;
    s.store_hit_tokens = t->store_hit_tokens;
    s.store_load_bytes = t->store_load_bytes;
    s.store_wait_us = t->store_wait_us;
    s.store_saves = t->store_saves;
    s.store_save_bytes = t->store_save_bytes;
    s.store_saves_skipped = t->store_saves_skipped;
    s.store_load_failures = t->store_load_failures;
    s.store_save_failures = t->store_save_failures;
    s.store_timeouts = t->store_timeouts;
    s.store_damaged = t->store_damaged;
    s.store_mismatched = t->store_mismatched;
    s.kv_groups = engine->kv.groups.num_groups;
    s.group_layers = engine->kv.groups.slots;
    memcpy(stats, &s, stats->struct_size);
    return PKV_OK;
}
