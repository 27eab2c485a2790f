/* SPDX-License-Identifier: MIT */
/* The engine object: pkv_engine_create and pkv_engine_destroy, its step
 * arrays, its backend, and its counters. */
#include "engine.h"
#include "engine_params.h"
#include "kv_layout.h"
#include "struct_sizes.h"

#include <string.h>

/* The step arrays, sized by max_num_seqs and max_batch_tokens. */
static pkv_status alloc_step_arrays(pkv_engine *e)
{
    const pkv__allocator *a = &e->alloc;
    size_t seqs = e->params.max_num_seqs, rows = e->params.max_batch_tokens;
    e->layer_done = pkv__calloc(a, e->params.num_layers, 1);
    /* The params' windows become the engine's own copy. */
    const uint32_t *given = e->params.layer_windows;
    e->layer_windows =
        pkv__calloc(a, e->params.num_layers, sizeof *e->layer_windows);
    if (e->layer_windows == NULL)
        return PKV_ERR_OUT_OF_MEMORY;
    for (uint32_t l = 0; l < e->params.num_layers; l++)
        e->layer_windows[l] =
            given != NULL ? given[l] : e->params.sliding_window;
    e->params.layer_windows = e->layer_windows;
    e->step_seqs = pkv__calloc(a, seqs, sizeof *e->step_seqs);
    e->actions = pkv__calloc(a, 3 * seqs, sizeof *e->actions);
    e->copy_pairs = pkv__calloc(a, 3 * seqs, sizeof *e->copy_pairs);
    e->seq_ids = pkv__calloc(a, seqs, sizeof *e->seq_ids);
    e->seq_user_data = pkv__calloc(a, seqs, sizeof *e->seq_user_data);
    e->query_start = pkv__calloc(a, seqs + 1, sizeof *e->query_start);
    e->context_lens = pkv__calloc(a, seqs, sizeof *e->context_lens);
    e->stages = pkv__calloc(a, seqs, sizeof *e->stages);
    e->step_tables = pkv__calloc(a, seqs, sizeof *e->step_tables);
    e->table_versions = pkv__calloc(a, seqs, sizeof *e->table_versions);
    /* A sample per row at most (drafts sample every row). */
    e->sample_rows = pkv__calloc(a, rows, sizeof *e->sample_rows);
    e->sample_seq_ids = pkv__calloc(a, rows, sizeof *e->sample_seq_ids);
    e->preempted = pkv__calloc(a, seqs, sizeof *e->preempted);
    e->seq_bad = pkv__calloc(a, seqs, 1);
    e->token_ids = pkv__calloc(a, rows, sizeof *e->token_ids);
    e->positions = pkv__calloc(a, rows, sizeof *e->positions);
    e->slots = pkv__calloc(a, rows, sizeof *e->slots);
    e->row_bad = pkv__calloc(a, rows, 1);
    if (PKV_LAYOUT_QUANTIZED(e->params.kv_dtype)) {
        e->free_stages = pkv__calloc(a, seqs, sizeof *e->free_stages);
        if (e->free_stages == NULL)
            return PKV_ERR_OUT_OF_MEMORY;
        for (uint32_t i = 0; i < seqs; i++)
            e->free_stages[i] = (uint32_t)(seqs - 1 - i);
        e->num_free_stages = (uint32_t)seqs;
        size_t windows = seqs * e->params.u8_rollback_blocks;
        if (windows > 0) {
            e->window_blocks =
                pkv__calloc(a, windows, sizeof *e->window_blocks);
            e->row_windows = pkv__calloc(a, rows, sizeof *e->row_windows);
            if (e->window_blocks == NULL || e->row_windows == NULL)
                return PKV_ERR_OUT_OF_MEMORY;
            memset(e->window_blocks, 0xff, /* PKV__NO_BLOCK */
                   windows * sizeof *e->window_blocks);
        }
    }
    if (!e->layer_done || !e->step_seqs || !e->actions || !e->copy_pairs ||
        !e->seq_ids ||
        !e->seq_user_data || !e->query_start || !e->context_lens || !e->stages ||
        !e->step_tables || !e->table_versions ||
        !e->sample_rows || !e->sample_seq_ids || !e->preempted ||
        !e->seq_bad || !e->token_ids || !e->positions || !e->slots ||
        !e->row_bad)
        return PKV_ERR_OUT_OF_MEMORY;
    return PKV_OK;
}

static void free_step_arrays(pkv_engine *e)
{
    const pkv__allocator *a = &e->alloc;
    size_t seqs = e->params.max_num_seqs, rows = e->params.max_batch_tokens;
    pkv__free(a, e->layer_done, e->params.num_layers, 1);
    pkv__free(a, e->layer_windows, e->params.num_layers,
              sizeof *e->layer_windows);
    pkv__free(a, e->step_seqs, seqs, sizeof *e->step_seqs);
    pkv__free(a, e->actions, 3 * seqs, sizeof *e->actions);
    pkv__free(a, e->copy_pairs, 3 * seqs, sizeof *e->copy_pairs);
    pkv__free(a, e->seq_ids, seqs, sizeof *e->seq_ids);
    pkv__free(a, e->seq_user_data, seqs, sizeof *e->seq_user_data);
    pkv__free(a, e->query_start, seqs + 1, sizeof *e->query_start);
    pkv__free(a, e->context_lens, seqs, sizeof *e->context_lens);
    pkv__free(a, e->stages, seqs, sizeof *e->stages);
    pkv__free(a, e->sample_rows, rows, sizeof *e->sample_rows);
    pkv__free(a, e->sample_seq_ids, rows, sizeof *e->sample_seq_ids);
    pkv__free(a, e->preempted, seqs, sizeof *e->preempted);
    pkv__free(a, e->seq_bad, seqs, 1);
    pkv__free(a, e->token_ids, rows, sizeof *e->token_ids);
    pkv__free(a, e->positions, rows, sizeof *e->positions);
    pkv__free(a, e->slots, rows, sizeof *e->slots);
    pkv__free(a, e->row_bad, rows, 1);
    pkv__free(a, e->free_stages, seqs, sizeof *e->free_stages);
    pkv__free(a, e->window_blocks, seqs * e->params.u8_rollback_blocks,
              sizeof *e->window_blocks);
    pkv__free(a, e->row_windows, rows, sizeof *e->row_windows);
    pkv__free(a, e->step_tables, seqs, sizeof *e->step_tables);
    pkv__free(a, e->table_versions, seqs, sizeof *e->table_versions);
    pkv__free(a, e->finished, e->finished_capacity, sizeof *e->finished);
    pkv__free(a, e->finished_user_data, e->finished_user_data_capacity,
              sizeof *e->finished_user_data);
    pkv__plan_release(&e->plan, a);
    pkv__free(a, e->hit_blocks, e->hit_blocks_capacity,
              sizeof *e->hit_blocks);
    pkv__free(a, e->scratch, e->scratch_capacity, sizeof *e->scratch);
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
    return pkv__backend_create_for(p, c, &e->alloc, &e->ops, &e->backend);
}

/* Release everything create may have made; fields not made are NULL. */
static void engine_free(pkv_engine *e)
{
    pkv__seq_list *lists[] = {&e->waiting, &e->running, &e->swapped,
                              &e->ended};
    for (size_t l = 0; l < 4; l++) {
        for (uint32_t i = 0; i < lists[l]->count; i++) {
            pkv__seq *s = lists[l]->items[i];
            if (e->pool.blocks != NULL)
                pkv__table_release(&s->table, &e->pool);
            pkv__prefix_chain_release(&s->chain, &e->pool);
            pkv__seq_free(s, &e->alloc);
        }
        pkv__seq_list_release(lists[l], &e->alloc);
    }
    /* Before the backend and pool: the store's operations in flight are
     * cancelled, so the connector stops writing into their buffers. */
    pkv__store_release(e);
    if (e->ops != NULL)
        e->ops->destroy(e->backend);
    free_step_arrays(e);
    pkv__map_release(&e->tenant_blocks, &e->alloc);
    pkv__map_release(&e->seqs_by_id, &e->alloc);
    if (e->prefix.pool != NULL)
        pkv__prefix_release(&e->prefix);
    if (e->pool.blocks != NULL)
        pkv__pool_release(&e->pool);
    pkv__allocator alloc = e->alloc;
    pkv__lock_destroy(e->error_lock);
    pkv__free(&alloc, e->error_lock, 1, sizeof *e->error_lock);
    pkv__free(&alloc, e->last_error, PKV__ERROR_MAX, 1);
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
    char *message = pkv__calloc(&alloc, PKV__ERROR_MAX, 1);
    pkv__lock *lock = pkv__calloc(&alloc, 1, sizeof *lock);
    if (e == NULL || message == NULL || lock == NULL ||
        pkv__lock_init(lock) != 0) {
        pkv__free(&alloc, e, 1, sizeof *e);
        pkv__free(&alloc, message, PKV__ERROR_MAX, 1);
        pkv__free(&alloc, lock, 1, sizeof *lock);
        return pkv__fail(PKV_ERR_OUT_OF_MEMORY, "engine object");
    }
    e->last_error = message;
    e->error_lock = lock;
    e->alloc = alloc;
    e->params = p;
    e->block_bytes = pkv__block_bytes(&p);
    e->watermark_blocks = (uint32_t)(p.watermark * (float)(p.num_blocks - 1));
    e->drafts_step = UINT64_MAX; /* none proposed */
    if (pkv__inbox_init(&e->inbox, &alloc) != PKV_OK) {
        engine_free(e);
        return pkv__fail(PKV_ERR_OUT_OF_MEMORY, "inbox mutex");
    }
    /* The KV storage first: a cache too large for the machine fails before
     * the host metadata (proportional to the blocks) is built. */
    const char *what = "backend";
    st = create_backend(e);
    if (st != PKV_OK)
        e->ops = NULL;
    if (st == PKV_OK) {
        what = "block pool";
        pkv__set_error(""); /* the backend may have noted a fallback */
        st = pkv__pool_init(&e->pool, &alloc, p.num_blocks, p.block_size);
    }
    if (st == PKV_OK) {
        what = "prefix index";
        st = pkv__prefix_init(&e->prefix, &e->pool);
    }
    if (st == PKV_OK) {
        what = "store state";
        st = pkv__store_init(e, p.store);
        e->params.store = p.store != NULL ? &e->store.cb : NULL;
    }
    if (st == PKV_OK) {
        what = "step arrays";
        st = alloc_step_arrays(e);
    }
    if (st == PKV_OK) {
        what = "tenant map";
        st = pkv__map_reserve(&e->tenant_blocks, &alloc, p.max_num_seqs);
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
    pkv__engine_log(e, PKV_LOG_INFO,
                    "pkv %s: %s backend, %u blocks of %u tokens, %llu bytes "
                    "per block",
                    PKV_VERSION_STRING, e->ops->name, (unsigned)p.num_blocks,
                    (unsigned)p.block_size,
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
    return engine == NULL ? "" : engine->ops->name;
}

pkv_status pkv_engine_stats_init(pkv_engine_stats *stats)
{
    if (stats == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "stats is NULL");
    memset(stats, 0, sizeof *stats);
    stats->struct_size = sizeof *stats;
    return PKV_OK;
}

pkv_status pkv_engine_get_stats(const pkv_engine *engine,
                                pkv_engine_stats *stats)
{
    if (engine == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "engine is NULL");
    if (stats == NULL)
        return pkv__engine_fail(engine, PKV_ERR_INVALID_ARGUMENT,
                                "stats is NULL");
    if (stats->struct_size < PKV__ENGINE_STATS_MIN_SIZE ||
        stats->struct_size > sizeof(pkv_engine_stats))
        return pkv__engine_fail(engine, PKV_ERR_STRUCT_SIZE,
                         "stats->struct_size is %u; this library knows %u",
                         (unsigned)stats->struct_size,
                         (unsigned)sizeof(pkv_engine_stats));
    const pkv__pool *pool = &engine->pool;
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
    s.num_waiting = engine->waiting.count;
    s.num_running = engine->running.count;
    s.num_swapped = engine->swapped.count;
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
    s.num_loading = engine->store.num_loading;
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
    memcpy(stats, &s, stats->struct_size);
    return PKV_OK;
}
