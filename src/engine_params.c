/* SPDX-License-Identifier: MIT */
/* An engine's parameters (engine_params.h): their defaults, the check of
 * every field, and the sizes derived from them (block bytes, the pool). */
#include "engine_params.h"

#include "error.h"
#include "kv/groups.h"
#include "kv_layout.h"
#include "quant.h"
#include "seal.h"
#include "store/store_params.h"
#include "struct_sizes.h"

#include <string.h>

/* The bounds the fields are checked against (pkv.h states them). */
#define DEFAULT_CACHE_BYTES (256ull << 20)
#define MAX_HEAD_DIM 512
#define MAX_BLOCK_SIZE 256
#define MAX_MODEL_LEN (1u << 24)
#define MAX_NUM_SEQS 65536
#define MAX_BATCH_TOKENS (1u << 20)
#define MAX_ROLLBACK_BLOCKS 64
#define MAX_WORKERS 256 /* pkv_engine_params.parallel_workers */

pkv_status pkv_engine_params_init(pkv_engine_params *params)
{
    if (params == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "params is NULL");
    memset(params, 0, sizeof *params);
    params->struct_size = sizeof *params;
    params->block_size = 0; /* follow the device */
    params->kv_dtype = PKV_KV_DTYPE_F16;
    params->key_quant = PKV_QUANT_GROUP_DEFAULT;
    params->value_quant = PKV_QUANT_GROUP_DEFAULT;
    params->cache_bytes = DEFAULT_CACHE_BYTES;
    params->max_model_len = 4096;
    params->max_num_seqs = 256;
    params->max_batch_tokens = 2048;
    params->policy = PKV_SCHED_POLICY_FCFS;
    params->preempt_mode = PKV_PREEMPT_MODE_RECOMPUTE;
    params->watermark = 0.01f;
    params->backend = PKV_BACKEND_KIND_AUTO;
    params->log_level = PKV_LOG_LEVEL_INFO;
    return PKV_OK;
}

static int is_power_of_two(uint32_t x)
{
    return x != 0 && (x & (x - 1)) == 0;
}

uint64_t pkv__block_bytes(const pkv_engine_params *p)
{
    uint64_t head = PKV_LAYOUT_HEAD_BYTES(
        (uint64_t)p->kv_dtype, (uint64_t)p->key_quant,
        (uint64_t)p->value_quant, (uint64_t)p->u4_group,
        (uint64_t)p->block_size, (uint64_t)p->head_dim);
    /* Geometry is bounded by validation, so this cannot overflow. */
    return head * p->num_kv_heads * pkv__groups_slots(p);
}

/* What the cache keeps (pkv.h: kv_memory, and 0.2.0's hybrid_memory),
 * for params of `size` bytes from the caller. */
static pkv_status resolve_memory(uint32_t size, pkv_engine_params *p)
{
    if (p->hybrid_memory > 1)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->hybrid_memory is %u; must be 0 or 1",
                         (unsigned)p->hybrid_memory);
    if (p->kv_memory != PKV_KV_MEMORY_HYBRID &&
        p->kv_memory != PKV_KV_MEMORY_EVERY_TOKEN)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->kv_memory is %d; not a pkv_kv_memory",
                         (int)p->kv_memory);
    /* A caller built against 0.2.0 keeps 0.2.0's default: every token,
     * unless its hybrid_memory asks for groups. */
    if (size < PKV__END_OF(pkv_engine_params, kv_memory) && !p->hybrid_memory)
        p->kv_memory = PKV_KV_MEMORY_EVERY_TOKEN;
    if (p->hybrid_memory && p->kv_memory == PKV_KV_MEMORY_EVERY_TOKEN)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->hybrid_memory is 1 (hybrid memory, "
                         "0.2.0's switch) with kv_memory "
                         "PKV_KV_MEMORY_EVERY_TOKEN; set one of them");
    uint32_t groups = p->num_layers / pkv__groups_slots(p);
    if (groups > PKV__MAX_GROUPS && p->hybrid_memory)
        return pkv__fail(PKV_ERR_UNSUPPORTED,
                         "params->hybrid_memory groups the layers by window "
                         "into %u groups of %u layers (the greatest common "
                         "divisor of each window's layer count); at most %u",
                         (unsigned)groups,
                         (unsigned)pkv__groups_slots(p),
                         (unsigned)PKV__MAX_GROUPS);
    if (groups > PKV__MAX_GROUPS) /* the default's: every token (pkv.h) */
        p->kv_memory = PKV_KV_MEMORY_EVERY_TOKEN;
    return PKV_OK;
}

pkv_status pkv__params_resolve(const pkv_engine_params *in,
                               pkv_engine_params *p)
{
    char why[128];
    pkv_engine_params_init(p);
    if (pkv__struct_read(p, in, in->struct_size, PKV__ENGINE_PARAMS_MIN_SIZE,
                         sizeof *p, "params", "pkv_engine_params_init", why,
                         sizeof why))
        return pkv__fail(PKV_ERR_STRUCT_SIZE, "%s", why);
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
    if (p->kv_dtype < PKV_KV_DTYPE_F32 || p->kv_dtype > PKV_KV_DTYPE_U8K_U4V)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->kv_dtype is %d; not a pkv_kv_dtype",
                         (int)p->kv_dtype);
    if (p->key_quant < PKV_QUANT_GROUP_DEFAULT ||
        p->key_quant > PKV_QUANT_GROUP_PER_TOKEN ||
        p->value_quant < PKV_QUANT_GROUP_DEFAULT ||
        p->value_quant > PKV_QUANT_GROUP_PER_TOKEN)
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
    if (p->policy != PKV_SCHED_POLICY_FCFS &&
        p->policy != PKV_SCHED_POLICY_PRIORITY)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->policy is %d; not a pkv_sched_policy",
                         (int)p->policy);
    if (p->preempt_mode != PKV_PREEMPT_MODE_RECOMPUTE &&
        p->preempt_mode != PKV_PREEMPT_MODE_SWAP)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->preempt_mode is %d; not a pkv_preempt_mode",
                         (int)p->preempt_mode);
    if (!(p->watermark >= 0.0f && p->watermark < 1.0f))
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->watermark is %g; must be in [0, 1)",
                         (double)p->watermark);
    if (p->backend < PKV_BACKEND_KIND_AUTO ||
        p->backend > PKV_BACKEND_KIND_OPENCL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->backend is %d; not a pkv_backend_kind",
                         (int)p->backend);
    if (p->u8_rollback_blocks > MAX_ROLLBACK_BLOCKS)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->u8_rollback_blocks is %u; at most %u",
                         (unsigned)p->u8_rollback_blocks,
                         (unsigned)MAX_ROLLBACK_BLOCKS);
    if (!PKV_LAYOUT_QUANTIZED(p->kv_dtype))
        p->u8_rollback_blocks = 0; /* documented: ignored */
    if (p->u4_group == 0)
        p->u4_group = p->head_dim % 32 == 0 ? 32 : p->head_dim;
    int u4 =
        p->kv_dtype == PKV_KV_DTYPE_U4 || p->kv_dtype == PKV_KV_DTYPE_U8K_U4V;
    if (u4 && !pkv__u4_group_ok(p->u4_group, p->head_dim))
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->u4_group is %u; must be a multiple of 8 "
                         "dividing head_dim %u, or head_dim",
                         (unsigned)p->u4_group, (unsigned)p->head_dim);
    if (p->store != NULL) {
        pkv_status st = pkv__store_check(p->store);
        if (st != PKV_OK)
            return st;
    }
    pkv_status key_st = pkv__seal_check_key(p->seal_key, &p->seal_key_size);
    if (key_st != PKV_OK)
        return key_st;
    if (p->parallel != NULL &&
        (p->parallel_workers == 0 || p->parallel_workers > MAX_WORKERS))
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->parallel_workers is %u with parallel "
                         "set; must be 1 to %u",
                         (unsigned)p->parallel_workers,
                         (unsigned)MAX_WORKERS);
    if (p->parallel == NULL)
        p->parallel_workers = 1; /* documented: ignored */
    if (p->layer_windows != NULL && p->sliding_window != 0)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->sliding_window is %u with layer_windows "
                         "set; give the windows one way",
                         (unsigned)p->sliding_window);
    pkv_status st = resolve_memory(in->struct_size, p);
    if (st != PKV_OK)
        return st;
    if (p->key_quant == PKV_QUANT_GROUP_DEFAULT)
        p->key_quant = PKV_QUANT_GROUP_PER_CHANNEL;
    if (p->value_quant == PKV_QUANT_GROUP_DEFAULT)
        p->value_quant = PKV_QUANT_GROUP_PER_TOKEN;
    return PKV_OK;
}

pkv_status pkv__params_size_pool(pkv_engine_params *p)
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
    } else {
        /* Blocks over every layer: with hybrid memory, as many of the
         * pool's, which hold one group's layers each, as hold the same
         * bytes (0.2.0's hybrid_memory counted the pool's). */
        uint32_t groups = p->num_layers / pkv__groups_slots(p);
        uint64_t n = p->hybrid_memory ? p->num_blocks
                                      : (uint64_t)p->num_blocks * groups;
        if (n >= UINT32_MAX)
            return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                             "params->num_blocks is %u: %llu blocks of the "
                             "pool (%u groups of layers); at most %u (32-bit "
                             "block ids, 0xffffffff is no block)",
                             (unsigned)p->num_blocks, (unsigned long long)n,
                             (unsigned)groups, (unsigned)(UINT32_MAX - 1));
        p->num_blocks = (uint32_t)n;
    }
    p->cache_bytes = block_bytes * p->num_blocks;
    return PKV_OK;
}
