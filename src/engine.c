/* SPDX-License-Identifier: MIT */
/* pkv_engine_*: creation, destruction, messages and counters. */
#include "engine.h"
#include "struct_sizes.h"

#include "kv_layout.h"

#include <stdio.h>
#include <string.h>

/* The struct sizes this library accepts: from its first published layout
 * to the one it was built with (fields are append-only). */

#define DEFAULT_CACHE_BYTES (256ull << 20)
#define MAX_HEAD_DIM 512
#define MAX_BLOCK_SIZE 256
#define MAX_MODEL_LEN (1u << 24)
#define MAX_NUM_SEQS 65536
#define MAX_BATCH_TOKENS (1u << 20)
#define MAX_ROLLBACK_BLOCKS 64

pkv_status pkv_engine_params_init(pkv_engine_params *params)
{
    if (params == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "params is NULL");
    memset(params, 0, sizeof *params);
    params->struct_size = sizeof *params;
    params->block_size = 0; /* follow the device */
    params->kv_dtype = PKV_KV_F16;
    params->key_quant = PKV_QUANT_DEFAULT;
    params->value_quant = PKV_QUANT_DEFAULT;
    params->cache_bytes = DEFAULT_CACHE_BYTES;
    params->max_model_len = 4096;
    params->max_num_seqs = 256;
    params->max_batch_tokens = 2048;
    params->policy = PKV_POLICY_FCFS;
    params->preempt_mode = PKV_PREEMPT_RECOMPUTE;
    params->watermark = 0.01f;
    params->backend = PKV_BACKEND_AUTO;
    params->log_level = PKV_LOG_INFO;
    return PKV_OK;
}

static int is_power_of_two(uint32_t x)
{
    return x != 0 && (x & (x - 1)) == 0;
}

uint64_t pkv__block_bytes(const pkv_engine_params *p)
{
    uint64_t k = PKV_LAYOUT_PART_BYTES((uint64_t)p->kv_dtype,
                                       (uint64_t)p->key_quant,
                                       (uint64_t)p->block_size,
                                       (uint64_t)p->head_dim);
    uint64_t v = PKV_LAYOUT_PART_BYTES((uint64_t)p->kv_dtype,
                                       (uint64_t)p->value_quant,
                                       (uint64_t)p->block_size,
                                       (uint64_t)p->head_dim);
    /* Geometry is bounded by validation, so this cannot overflow. */
    return (k + v) * p->num_kv_heads * p->num_layers;
}

/* Copy the caller's params over the defaults, then check every field.
 * Messages go to the thread-local error: no engine exists yet. */
static pkv_status resolve_params(const pkv_engine_params *in,
                                 pkv_engine_params *p)
{
    if (in->struct_size < PKV__ENGINE_PARAMS_MIN_SIZE ||
        in->struct_size > sizeof *p)
        return pkv__fail(PKV_ERR_STRUCT_SIZE,
                         "params->struct_size is %u; this library knows %u",
                         (unsigned)in->struct_size, (unsigned)sizeof *p);
    pkv_engine_params_init(p);
    memcpy(p, in, in->struct_size);
    if (p->flags != 0)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->flags is %#x; no flags are defined",
                         (unsigned)p->flags);
    if (p->num_layers == 0 || p->num_layers > 4096)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->num_layers is %u; must be 1..4096",
                         (unsigned)p->num_layers);
    if (p->num_kv_heads == 0 || p->num_kv_heads > 1024 ||
        p->num_q_heads == 0 || p->num_q_heads > 4096)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->num_q_heads %u / num_kv_heads %u: both "
                         "must be set (at most 4096 / 1024)",
                         (unsigned)p->num_q_heads, (unsigned)p->num_kv_heads);
    if (p->num_q_heads % p->num_kv_heads != 0)
        return pkv__fail(PKV_ERR_UNSUPPORTED,
                         "num_q_heads %u is not a multiple of num_kv_heads %u",
                         (unsigned)p->num_q_heads, (unsigned)p->num_kv_heads);
    if (p->head_dim == 0 || p->head_dim % 4 != 0 ||
        p->head_dim > MAX_HEAD_DIM)
        return pkv__fail(PKV_ERR_UNSUPPORTED,
                         "params->head_dim is %u; must be a multiple of 4 "
                         "up to %u",
                         (unsigned)p->head_dim, (unsigned)MAX_HEAD_DIM);
    if (p->block_size != 0 &&
        (!is_power_of_two(p->block_size) || p->block_size > MAX_BLOCK_SIZE))
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->block_size is %u; must be a power of two "
                         "up to %u, or 0 to follow the device",
                         (unsigned)p->block_size, (unsigned)MAX_BLOCK_SIZE);
    if (p->kv_dtype < PKV_KV_F32 || p->kv_dtype > PKV_KV_U8)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->kv_dtype is %d; not a pkv_kv_dtype",
                         (int)p->kv_dtype);
    if (p->key_quant < PKV_QUANT_DEFAULT || p->key_quant > PKV_QUANT_PER_TOKEN ||
        p->value_quant < PKV_QUANT_DEFAULT ||
        p->value_quant > PKV_QUANT_PER_TOKEN)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->key_quant %d / value_quant %d: not "
                         "pkv_quant_group values",
                         (int)p->key_quant, (int)p->value_quant);
    if (p->max_model_len < 2 || p->max_model_len > MAX_MODEL_LEN)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->max_model_len is %u; must be 2..%u",
                         (unsigned)p->max_model_len, (unsigned)MAX_MODEL_LEN);
    if (!(p->scale >= 0.0f && p->scale < 1e30f))
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->scale is %g; must be finite and >= 0 "
                         "(0: 1/sqrt(head_dim))",
                         (double)p->scale);
    if (p->max_num_seqs == 0 || p->max_num_seqs > MAX_NUM_SEQS)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->max_num_seqs is %u; must be 1..%u",
                         (unsigned)p->max_num_seqs, (unsigned)MAX_NUM_SEQS);
    if (p->max_batch_tokens == 0 || p->max_batch_tokens > MAX_BATCH_TOKENS)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->max_batch_tokens is %u; must be 1..%u",
                         (unsigned)p->max_batch_tokens,
                         (unsigned)MAX_BATCH_TOKENS);
    if (p->policy != PKV_POLICY_FCFS && p->policy != PKV_POLICY_PRIORITY)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->policy is %d; not a pkv_sched_policy",
                         (int)p->policy);
    if (p->preempt_mode != PKV_PREEMPT_RECOMPUTE &&
        p->preempt_mode != PKV_PREEMPT_SWAP)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->preempt_mode is %d; not a pkv_preempt_mode",
                         (int)p->preempt_mode);
    if (!(p->watermark >= 0.0f && p->watermark < 1.0f))
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->watermark is %g; must be in [0, 1)",
                         (double)p->watermark);
    if (p->backend < PKV_BACKEND_AUTO || p->backend > PKV_BACKEND_OPENCL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->backend is %d; not a pkv_backend_kind",
                         (int)p->backend);
    if (p->u8_rollback_blocks > MAX_ROLLBACK_BLOCKS)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->u8_rollback_blocks is %u; at most %u",
                         (unsigned)p->u8_rollback_blocks,
                         (unsigned)MAX_ROLLBACK_BLOCKS);
    if (p->kv_dtype != PKV_KV_U8)
        p->u8_rollback_blocks = 0; /* documented: ignored */
    if (p->key_quant == PKV_QUANT_DEFAULT)
        p->key_quant = PKV_QUANT_PER_CHANNEL;
    if (p->value_quant == PKV_QUANT_DEFAULT)
        p->value_quant = PKV_QUANT_PER_TOKEN;
    return PKV_OK;
}

/* The pool's size: num_blocks, or as many blocks as cache_bytes holds. */
static pkv_status size_pool(pkv_engine_params *p)
{
    uint64_t block_bytes = pkv__block_bytes(p);
    if (p->num_blocks == 0) {
        uint64_t n = p->cache_bytes / block_bytes;
        if (n < 2)
            return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                             "cache_bytes %llu holds %llu blocks of %llu "
                             "bytes; at least 2 are needed",
                             (unsigned long long)p->cache_bytes,
                             (unsigned long long)n,
                             (unsigned long long)block_bytes);
        if (n >= UINT32_MAX)
            return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                             "cache_bytes %llu holds %llu blocks of %llu "
                             "bytes; at most %u are addressable (32-bit "
                             "block ids, 0xffffffff is no block)",
                             (unsigned long long)p->cache_bytes,
                             (unsigned long long)n,
                             (unsigned long long)block_bytes,
                             (unsigned)(UINT32_MAX - 1));
        p->num_blocks = (uint32_t)n;
    } else if (p->num_blocks < 2) {
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->num_blocks is %u; must be at least 2 "
                         "(block 0 is reserved)",
                         (unsigned)p->num_blocks);
    } else if (p->num_blocks == UINT32_MAX) {
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->num_blocks is %u; at most %u (32-bit "
                         "block ids, 0xffffffff is no block)",
                         (unsigned)p->num_blocks,
                         (unsigned)(UINT32_MAX - 1));
    }
    p->cache_bytes = block_bytes * p->num_blocks;
    return PKV_OK;
}

/* The step arrays, sized by max_num_seqs and max_batch_tokens. */
static pkv_status alloc_step_arrays(pkv_engine *e)
{
    const pkv__allocator *a = &e->alloc;
    size_t seqs = e->params.max_num_seqs, rows = e->params.max_batch_tokens;
    e->layer_done = pkv__calloc(a, e->params.num_layers, 1);
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
    if (e->params.kv_dtype == PKV_KV_U8) {
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
    /* Working tails 0..max_num_seqs-1, then each one's rollback window
     * tails (rollback.h). */
    c->num_stages = p->kv_dtype == PKV_KV_U8
                        ? p->max_num_seqs * (1 + p->u8_rollback_blocks)
                        : 0;
    c->max_step_seqs = p->max_num_seqs;
    c->max_seq_tokens = p->max_model_len;
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
    pkv_status st = resolve_params(params, &p);
    if (st != PKV_OK)
        return st;
    pkv__backend_log_loader(&p);
    if (p.block_size == 0)
        p.block_size = pkv__backend_default_block_size(&p);
    st = size_pool(&p);
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

/* pkv_engine_last_error's copy: the engine's message may change on
 * another thread while the caller reads it. */
static _Thread_local char engine_error_copy[PKV__ERROR_MAX];

const char *pkv_engine_last_error(const pkv_engine *engine)
{
    if (engine == NULL)
        return pkv_last_error();
    pkv__lock_take(engine->error_lock);
    memcpy(engine_error_copy, engine->last_error, PKV__ERROR_MAX);
    pkv__lock_give(engine->error_lock);
    return engine_error_copy;
}

const char *pkv_engine_backend_name(const pkv_engine *engine)
{
    return engine == NULL ? "" : engine->ops->name;
}

/* Format the message into message[PKV__ERROR_MAX], then copy it to this
 * thread's and, under the lock, the engine's. */
static void record(const pkv_engine *engine, char *message, pkv_status status,
                   const char *fmt, va_list args)
{
    pkv__format_error(message, status, fmt, args);
    pkv__set_error(message);
    pkv__lock_take(engine->error_lock);
    snprintf(engine->last_error, PKV__ERROR_MAX, "%s", message);
    pkv__lock_give(engine->error_lock);
}

pkv_status pkv__engine_fail(const pkv_engine *engine, pkv_status status,
                            const char *fmt, ...)
{
    char message[PKV__ERROR_MAX];
    va_list args;
    va_start(args, fmt);
    record(engine, message, status, fmt, args);
    va_end(args);
    pkv__engine_log(engine, PKV_LOG_ERROR, "%s", message);
    return status;
}

pkv_status pkv__engine_fail_any_thread(const pkv_engine *engine,
                                       pkv_status status, const char *fmt,
                                       ...)
{
    char message[PKV__ERROR_MAX];
    va_list args;
    va_start(args, fmt);
    record(engine, message, status, fmt, args);
    va_end(args);
    return status;
}

void pkv__engine_log(const pkv_engine *engine, int32_t level, const char *fmt,
                     ...)
{
    va_list args;
    va_start(args, fmt);
    pkv__vlog(engine->params.log, engine->params.log_user,
              engine->params.log_level, level, fmt, args);
    va_end(args);
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
    memcpy(stats, &s, stats->struct_size);
    return PKV_OK;
}
