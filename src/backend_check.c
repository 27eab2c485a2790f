/* SPDX-License-Identifier: MIT */
/* The checks every backend makes of its config and of each step's, a
 * layer's and a copy's arguments (backend.h), so that all of them refuse
 * the same inputs with the same status and message; and what a backend
 * remembers of the block tables it checked. The sizes and lookups of the
 * hot path are backend_layout.c's. */
#include "backend.h"

#include "error.h"
#include "kv_layout.h"
#include "quant.h"

#include <string.h>

pkv_status pkv__backend_config_check(const pkv__backend_config *c)
{
    if (c->num_layers == 0 || c->num_q_heads == 0 || c->num_kv_heads == 0 ||
        c->num_blocks < 2)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "backend: layers %u, q heads %u, kv heads %u, "
                         "blocks %u: each must be set (blocks >= 2)",
                         (unsigned)c->num_layers, (unsigned)c->num_q_heads,
                         (unsigned)c->num_kv_heads, (unsigned)c->num_blocks);
    if (c->num_q_heads % c->num_kv_heads != 0)
        return pkv__fail(PKV_ERR_UNSUPPORTED,
                         "backend: num_q_heads %u is not a multiple of "
                         "num_kv_heads %u",
                         (unsigned)c->num_q_heads, (unsigned)c->num_kv_heads);
    if (c->head_dim == 0 || c->head_dim % 4 != 0 ||
        c->head_dim > PKV_LAYOUT_MAX_HEAD_DIM)
        return pkv__fail(PKV_ERR_UNSUPPORTED,
                         "backend: head_dim %u is not a multiple of 4 up to "
                         "%u",
                         (unsigned)c->head_dim,
                         (unsigned)PKV_LAYOUT_MAX_HEAD_DIM);
    if (c->block_size == 0 || (c->block_size & (c->block_size - 1)) != 0 ||
        c->block_size > PKV_LAYOUT_MAX_BLOCK_SIZE)
        return pkv__fail(PKV_ERR_UNSUPPORTED,
                         "backend: block_size %u is not a power of two up "
                         "to %u",
                         (unsigned)c->block_size,
                         (unsigned)PKV_LAYOUT_MAX_BLOCK_SIZE);
    if (c->kv_dtype < PKV_KV_DTYPE_F32 || c->kv_dtype > PKV_KV_DTYPE_U8K_U4V)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "backend: kv_dtype %d is not a pkv_kv_dtype",
                         (int)c->kv_dtype);
    if (pkv__backend_quantized(c)) {
        int u4 = c->kv_dtype != PKV_KV_DTYPE_U8;
        if (u4 && !pkv__u4_group_ok(c->u4_group, c->head_dim))
            return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                             "backend: u4_group %u is not a multiple of 8 "
                             "dividing head_dim %u, nor head_dim",
                             (unsigned)c->u4_group, (unsigned)c->head_dim);
        int ok = (c->key_quant == PKV_QUANT_GROUP_PER_CHANNEL ||
                  c->key_quant == PKV_QUANT_GROUP_PER_TOKEN) &&
                 (c->value_quant == PKV_QUANT_GROUP_PER_CHANNEL ||
                  c->value_quant == PKV_QUANT_GROUP_PER_TOKEN);
        if (!ok)
            return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                             "backend: key_quant %d / value_quant %d must "
                             "be PKV_QUANT_GROUP_PER_CHANNEL or _PER_TOKEN",
                             (int)c->key_quant, (int)c->value_quant);
    } else if (c->num_stages != 0) {
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "backend: num_stages %u; staging tails exist for "
                         "quantized caches only",
                         (unsigned)c->num_stages);
    }
    if ((c->layer_arena == NULL) != (c->layer_group == NULL) ||
        (c->layer_group != NULL &&
         (c->group_windows == NULL || c->num_groups == 0 ||
          c->num_arenas == 0 || c->num_arenas > c->num_layers ||
          c->num_groups > c->num_layers)))
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "backend: groups %u, arenas %u: the layer maps and "
                         "group windows must be given together, with 1 to "
                         "num_layers groups and arenas",
                         (unsigned)c->num_groups, (unsigned)c->num_arenas);
    for (uint32_t l = 0; c->layer_group != NULL && l < c->num_layers; l++)
        if (c->layer_arena[l] >= c->num_arenas ||
            c->layer_group[l] >= c->num_groups)
            return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                             "backend: layer %u has arena %u and group %u",
                             (unsigned)l, (unsigned)c->layer_arena[l],
                             (unsigned)c->layer_group[l]);
    return PKV_OK;
}

pkv_status pkv__tables_seen_init(pkv__tables_seen *seen,
                                 const pkv__allocator *alloc, uint32_t rows)
{
    seen->rows = NULL;
    seen->capacity = 0;
    if (rows == 0)
        return PKV_OK;
    seen->rows = pkv__calloc(alloc, rows, sizeof *seen->rows);
    if (seen->rows == NULL)
        return pkv__fail(PKV_ERR_OUT_OF_MEMORY,
                         "no memory for %u block-table rows",
                         (unsigned)rows);
    seen->capacity = rows;
    return PKV_OK;
}

void pkv__tables_seen_release(pkv__tables_seen *seen,
                              const pkv__allocator *alloc)
{
    pkv__free(alloc, seen->rows, seen->capacity, sizeof *seen->rows);
    seen->rows = NULL;
    seen->capacity = 0;
}

int pkv__tables_seen_knows(const pkv__tables_seen *seen, const pkv__step *s,
                           uint32_t row, uint32_t blocks)
{
    if (seen == NULL || row >= seen->capacity || s->table_versions == NULL)
        return 0;
    uint64_t v = s->table_versions[row];
    return v != 0 && seen->rows[row].version == v &&
           seen->rows[row].blocks >= blocks;
}

void pkv__tables_seen_note(pkv__tables_seen *seen, const pkv__step *s,
                           uint32_t row, uint32_t blocks)
{
    if (seen == NULL || row >= seen->capacity)
        return;
    seen->rows[row].version =
        s->table_versions != NULL ? s->table_versions[row] : 0;
    seen->rows[row].blocks = blocks;
}

void pkv__tables_seen_forget(pkv__tables_seen *seen)
{
    if (seen->capacity > 0)
        memset(seen->rows, 0, seen->capacity * sizeof *seen->rows);
}

/* Sequence i's block table and slots in group g. Ids are 1..num_blocks-1,
 * except, in a windowed group, the null block for blocks wholly behind
 * the window of the sequence's first row (which no row reads). */
static pkv_status table_check(const pkv__backend_config *c,
                              const pkv__step *s, pkv__tables_seen *checked,
                              uint32_t g, uint32_t i)
{
    uint64_t bs = c->block_size;
    uint32_t q0 = s->query_start[i], q1 = s->query_start[i + 1];
    uint32_t ctx = s->context_lens[i];
    uint32_t row = g * s->num_seqs + i;
    const uint32_t *table = s->block_tables[row];
    uint32_t nb = (uint32_t)((ctx + bs - 1) / bs);
    if (nb > 0 && table == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "step: sequence %u has no block table in group %u",
                         (unsigned)i, (unsigned)g);
    uint32_t window = c->group_windows != NULL ? c->group_windows[g] : 0;
    uint64_t first = ctx - (q1 - q0); /* the first row's token */
    uint64_t seen_from =
        window > 0 && first + 1 > window ? first + 1 - window : 0;
    uint64_t holes = seen_from / bs; /* blocks no row reads */
    int known = pkv__tables_seen_knows(checked, s, row, nb);
    for (uint32_t j = 0; !known && j < nb; j++)
        if ((table[j] == 0 && j >= holes) || table[j] >= c->num_blocks)
            return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                             "step: sequence %u block %u is id %u in group "
                             "%u; must be 1..%u",
                             (unsigned)i, (unsigned)j, (unsigned)table[j],
                             (unsigned)g, (unsigned)(c->num_blocks - 1));
    if (!known)
        pkv__tables_seen_note(checked, s, row, nb);
    /* A slot must be where the block table puts the row's token: the
     * causal mask and the u8 tail both rely on it. */
    const uint64_t *slots = s->slots + (size_t)g * s->num_tokens;
    for (uint32_t t = q0; t < q1; t++) {
        uint64_t tok = first + (t - q0);
        uint64_t want = (uint64_t)table[tok / bs] * bs + tok % bs;
        if (slots[t] != want || table[tok / bs] == 0)
            return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                             "step: row %u has slot %llu in group %u; its "
                             "block table puts token %llu at slot %llu",
                             (unsigned)t, (unsigned long long)slots[t],
                             (unsigned)g, (unsigned long long)tok,
                             (unsigned long long)want);
    }
    return PKV_OK;
}

pkv_status pkv__backend_step_check(const pkv__backend_config *c,
                                   const pkv__step *s,
                                   pkv__tables_seen *checked)
{
    if (s->num_seqs > 0 &&
        (s->query_start == NULL || s->context_lens == NULL ||
         s->block_tables == NULL))
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "step: query_start, context_lens or block_tables "
                         "is NULL");
    if (s->num_tokens > 0 && s->slots == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "step: slots is NULL");
    int quantized = pkv__backend_quantized(c);
    if (quantized && s->num_seqs > 0 && s->stages == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "step: stages is NULL with a u8 cache");
    if (s->num_seqs > 0 && (s->query_start[0] != 0 ||
                            s->query_start[s->num_seqs] != s->num_tokens))
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "step: query_start must run from 0 to num_tokens "
                         "%u",
                         (unsigned)s->num_tokens);
    if (s->num_seqs == 0 && s->num_tokens != 0)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "step: %u rows but no sequence",
                         (unsigned)s->num_tokens);
    uint64_t bs = c->block_size;
    uint64_t cap = (uint64_t)s->max_blocks_per_seq * bs;
    uint32_t groups = pkv__backend_num_groups(c);
    for (uint32_t i = 0; i < s->num_seqs; i++) {
        uint32_t q0 = s->query_start[i], q1 = s->query_start[i + 1];
        uint32_t ctx = s->context_lens[i];
        if (q1 < q0 || q1 - q0 > ctx || ctx > cap)
            return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                             "step: sequence %u has rows %u..%u and context "
                             "%u; rows must be ordered and fit the context, "
                             "and the context max_blocks_per_seq %u",
                             (unsigned)i, (unsigned)q0, (unsigned)q1,
                             (unsigned)ctx, (unsigned)s->max_blocks_per_seq);
        for (uint32_t g = 0; g < groups; g++) {
            pkv_status st = table_check(c, s, checked, g, i);
            if (st != PKV_OK)
                return st;
        }
        if (quantized && s->stages[i] >= c->num_stages)
            return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                             "step: sequence %u has staging tail %u of %u",
                             (unsigned)i, (unsigned)s->stages[i],
                             (unsigned)c->num_stages);
        /* A window must not be the tail the block freezes from. */
        for (uint32_t t = q0; quantized && s->windows != NULL && t < q1;
             t++) {
            uint32_t w = s->windows[t];
            uint64_t tok = ctx - (q1 - q0) + (t - q0);
            if (tok % bs != bs - 1 || w == PKV__NO_STAGE)
                continue;
            if (w >= c->num_stages || w == s->stages[i])
                return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                                 "step: row %u has window tail %u; must be "
                                 "below %u and not its staging tail %u",
                                 (unsigned)t, (unsigned)w,
                                 (unsigned)c->num_stages,
                                 (unsigned)s->stages[i]);
        }
    }
    return PKV_OK;
}

pkv_status pkv__backend_layer_check(const pkv__backend_config *c,
                                    const pkv__step *step, uint32_t layer,
                                    const void *in, const void *out)
{
    if (step == NULL)
        return pkv__fail(PKV_ERR_BAD_STATE, "no step: call begin_step first");
    if (layer >= c->num_layers)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "layer %u of %u",
                         (unsigned)layer, (unsigned)c->num_layers);
    if (step->num_tokens > 0 && (in == NULL || out == NULL))
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "a tensor is NULL");
    return PKV_OK;
}

pkv_status pkv__backend_pairs_check(const pkv__backend_config *c,
                                    const pkv__block_copy *pairs, uint32_t n,
                                    int blocks)
{
    uint32_t limit = blocks ? c->num_blocks : c->num_stages;
    for (uint32_t i = 0; i < n; i++)
        if (pairs[i].src >= limit || pairs[i].dst >= limit ||
            (blocks && pairs[i].dst == 0))
            return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                             "copy %u: %s %u -> %u; ids must be below %u%s",
                             (unsigned)i, blocks ? "block" : "staging tail",
                             (unsigned)pairs[i].src, (unsigned)pairs[i].dst,
                             (unsigned)limit,
                             blocks ? " and the null block is never written"
                                    : "");
    return PKV_OK;
}

pkv_status pkv__backend_ids_check(const pkv__backend_config *c,
                                  const uint32_t *blocks, uint32_t n,
                                  int writable)
{
    for (uint32_t i = 0; i < n; i++)
        if (blocks[i] >= c->num_blocks || (writable && blocks[i] == 0))
            return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                             "swap %u: block %u; ids must be below %u%s",
                             (unsigned)i, (unsigned)blocks[i],
                             (unsigned)c->num_blocks,
                             writable ? " and not the null block" : "");
    return PKV_OK;
}
