/* SPDX-License-Identifier: MIT */
/* pkv_engine_*: creation, destruction, messages and counters. */
#include "engine.h"

#include "kv_layout.h"

#include <stdio.h>
#include <string.h>

/* The struct sizes this library accepts: from its first published layout
 * to the one it was built with (fields are append-only). */
#define PARAMS_MIN_SIZE sizeof(pkv_engine_params)
#define STATS_MIN_SIZE sizeof(pkv_engine_stats)

#define DEFAULT_CACHE_BYTES (256ull << 20)
#define MAX_HEAD_DIM 512
#define MAX_BLOCK_SIZE 256

pkv_status pkv_engine_params_init(pkv_engine_params *params)
{
    if (params == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "params is NULL");
    memset(params, 0, sizeof *params);
    params->struct_size = sizeof *params;
    params->block_size = 16;
    params->kv_dtype = PKV_KV_F16;
    params->key_quant = PKV_QUANT_DEFAULT;
    params->value_quant = PKV_QUANT_DEFAULT;
    params->cache_bytes = DEFAULT_CACHE_BYTES;
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
    if (in->struct_size < PARAMS_MIN_SIZE || in->struct_size > sizeof *p)
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
    if (!is_power_of_two(p->block_size) || p->block_size > MAX_BLOCK_SIZE)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->block_size is %u; must be a power of two "
                         "up to %u",
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
    if (p->key_quant == PKV_QUANT_DEFAULT)
        p->key_quant = PKV_QUANT_PER_CHANNEL;
    if (p->value_quant == PKV_QUANT_DEFAULT)
        p->value_quant = PKV_QUANT_PER_TOKEN;

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
            n = UINT32_MAX - 1;
        p->num_blocks = (uint32_t)n;
    } else if (p->num_blocks < 2 || p->num_blocks == UINT32_MAX) {
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->num_blocks is %u; must be at least 2 "
                         "(block 0 is reserved)",
                         (unsigned)p->num_blocks);
    }
    p->cache_bytes = block_bytes * p->num_blocks;
    return PKV_OK;
}

pkv_status pkv_engine_create(const pkv_engine_params *params,
                             pkv_engine **out)
{
    if (out == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    if (params == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "params is NULL");
    pkv_engine_params p;
    pkv_status st = resolve_params(params, &p);
    if (st != PKV_OK)
        return st;
    pkv__allocator alloc;
    if (pkv__allocator_resolve(&p.allocator, &alloc) != PKV_OK)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->allocator: alloc and free must both be set "
                         "or both be NULL");

    pkv_engine *e = pkv__calloc(&alloc, 1, sizeof *e);
    if (e == NULL)
        return pkv__fail(PKV_ERR_OUT_OF_MEMORY, "engine object");
    e->alloc = alloc;
    e->params = p;
    e->block_bytes = pkv__block_bytes(&p);
    st = pkv__pool_init(&e->pool, &alloc, p.num_blocks, p.block_size);
    if (st != PKV_OK) {
        pkv__free(&alloc, e, 1, sizeof *e);
        return pkv__fail(st, "block pool of %u blocks", (unsigned)p.num_blocks);
    }
    st = pkv__prefix_init(&e->prefix, &e->pool);
    if (st != PKV_OK) {
        pkv__pool_release(&e->pool);
        pkv__free(&alloc, e, 1, sizeof *e);
        return pkv__fail(st, "prefix index of %u blocks",
                         (unsigned)p.num_blocks);
    }
    pkv__engine_log(e, PKV_LOG_INFO,
                    "pkv %s: %u blocks of %u tokens, %llu bytes per block",
                    PKV_VERSION_STRING, (unsigned)p.num_blocks,
                    (unsigned)p.block_size,
                    (unsigned long long)e->block_bytes);
    *out = e;
    return PKV_OK;
}

void pkv_engine_destroy(pkv_engine *engine)
{
    if (engine == NULL)
        return;
    pkv__allocator alloc = engine->alloc;
    pkv__prefix_release(&engine->prefix);
    pkv__pool_release(&engine->pool);
    pkv__free(&alloc, engine, 1, sizeof *engine);
}

const char *pkv_engine_last_error(const pkv_engine *engine)
{
    if (engine == NULL)
        return pkv_last_error();
    return engine->last_error;
}

pkv_status pkv__engine_fail(pkv_engine *engine, pkv_status status,
                            const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    pkv__format_error(engine->last_error, status, fmt, args);
    va_end(args);
    pkv__engine_log(engine, PKV_LOG_ERROR, "%s", engine->last_error);
    return status;
}

void pkv__engine_log(const pkv_engine *engine, int32_t level, const char *fmt,
                     ...)
{
    if (engine->params.log == NULL || level > engine->params.log_level)
        return;
    char line[PKV__ERROR_MAX];
    va_list args;
    va_start(args, fmt);
    vsnprintf(line, sizeof line, fmt, args);
    va_end(args);
    engine->params.log(engine->params.log_user, level, line);
}

pkv_status pkv_engine_get_stats(const pkv_engine *engine,
                                pkv_engine_stats *stats)
{
    if (engine == NULL || stats == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "%s is NULL",
                         engine == NULL ? "engine" : "stats");
    if (stats->struct_size < STATS_MIN_SIZE ||
        stats->struct_size > sizeof(pkv_engine_stats))
        return pkv__fail(PKV_ERR_STRUCT_SIZE,
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
    memcpy(stats, &s, stats->struct_size);
    return PKV_OK;
}
