/* SPDX-License-Identifier: MIT */
/*
 * pkv_seq_export and pkv_seq_import: a sequence's tokens and cached KV as
 * bytes another engine can resume from (docs/design.md, "Export and
 * import" has the format).
 *
 * An imported sequence joins the swapped list with its KV as host bytes
 * in the swap layout of the importing engine: the scheduler brings it in
 * exactly as it brings back a swapped-out sequence, so import itself
 * touches no device and needs no free block.
 *
 * The KV travels as the KV-cache manager swaps it out (kv.h's swap
 * layout: each group's blocks from the first its next row sees, then a
 * quantized cache's staging tail), which only an engine with the same
 * blocks and groups takes; any other computes the KV again. One
 * exception keeps older exports' meaning: f32 and f16 KV from an engine
 * whose layers are in the plain layout go as rows, K and V of every
 * (layer, kv head), so that the two engines' block sizes may differ.
 */
#include "check.h"
#include "engine.h"
#include "format.h"
#include "kv_layout.h"
#include "seqs.h"
#include "struct_sizes.h"
#include "wire.h"

#include <stdio.h>
#include <string.h>

static const uint8_t MAGIC[8] = {'P', 'K', 'V', 'S', 'E', 'Q', '\r', '\n'};

/* Header fields after the common ones (wire.h): little-endian u32 at
 * these byte offsets, then u64s. */
enum {
    AT_NUM_TOKENS = PKV__AT_FORMAT_FIELDS,
    AT_PROMPT_LEN = 48,
    AT_NUM_COMPUTED = 52,
    AT_NUM_GENERATED = 56,
    AT_MAX_NEW_TOKENS = 60,
    AT_KV_BYTES = 64, /* u64 */
    AT_CHECKSUM = 72  /* u64 */
};

/* Version 3 (versions 1 and 2 with an XXH3 checksum; older ones are
 * refused as made by an older pkv), and 4 with a layer table of a group,
 * an arena and a window per layer. */
static const pkv__format FORMAT = {MAGIC, "a pkv sequence export", 3, 80,
                                   12, AT_CHECKSUM};

/* Bytes of one stored element (f32 and f16 rows). */
static size_t elem_bytes(const pkv__backend_config *c)
{
    return c->kv_dtype == PKV_KV_DTYPE_F16 ? 2 : 4;
}

/* Whether an export from a cache of config c and layers grouped as g
 * carries its KV as rows. */
static int as_rows(const pkv__backend_config *c, const pkv__groups *g)
{
    return pkv__groups_plain(g) && !pkv__backend_quantized(c);
}

/* The KV part of an export in the plain layout of `computed` tokens from
 * config c: rows, or a quantized cache's blocks and tail. */
static uint64_t plain_kv_bytes(const pkv__backend_config *c,
                               uint32_t computed)
{
    if (computed == 0)
        return 0;
    if (pkv__backend_quantized(c))
        return (uint64_t)pkv__blocks_for(computed, c->block_size) *
                   pkv__backend_swap_block_bytes(c) +
               pkv__backend_stage_bytes(c);
    return (uint64_t)c->num_layers * c->num_kv_heads * 2 * computed *
           c->head_dim * elem_bytes(c);
}

/* The KV part of this engine's export of `computed` tokens. */
static uint64_t kv_bytes(const pkv__kv *kv, const pkv__backend_config *c,
                         uint32_t computed)
{
    if (computed == 0 || as_rows(c, &kv->groups))
        return plain_kv_bytes(c, computed);
    return pkv__kv_swap_bytes(kv, computed);
}

/* The K (kv 0) or V (kv 1) row of token t, layer l, kv head h in host
 * bytes of swap layout (blocks one after the other, every layer each). */
static size_t swap_row(const pkv__backend_config *c, uint32_t l, uint32_t h,
                       int kv, uint32_t t)
{
    size_t part = pkv__backend_part_bytes(c, 0);
    size_t block = t / c->block_size, in_block = t % c->block_size;
    return block * pkv__backend_swap_block_bytes(c) +
           l * pkv__backend_layer_block_bytes(c) + h * 2 * part +
           (size_t)kv * part + in_block * c->head_dim * elem_bytes(c);
}

/* Copy rows between export order (layer, kv head, K then V, token) and
 * swap layout: into dst in swap layout when dst_is_swap, else out of it. */
static void copy_rows(const pkv__backend_config *c, uint32_t computed,
                      uint8_t *dst, const uint8_t *src, int dst_is_swap)
{
    size_t row = (size_t)c->head_dim * elem_bytes(c), at = 0;
    for (uint32_t l = 0; l < c->num_layers; l++)
        for (uint32_t h = 0; h < c->num_kv_heads; h++)
            for (int kv = 0; kv < 2; kv++)
                for (uint32_t t = 0; t < computed; t++, at += row) {
                    size_t in_swap = swap_row(c, l, h, kv, t);
                    if (dst_is_swap)
                        memcpy(dst + in_swap, src + at, row);
                    else
                        memcpy(dst + at, src + in_swap, row);
                }
}

/* Zeros over a staging tail's rows from `used` on. */
static void zero_tail_rows(const pkv__backend_config *c, uint32_t used,
                           uint8_t *stage)
{
    uint32_t bs = c->block_size;
    size_t row = (size_t)c->head_dim * sizeof(float);
    size_t parts = (size_t)c->num_layers * c->num_kv_heads * 2;
    for (size_t part = 0; part < parts; part++)
        memset(stage + (part * bs + used) * row, 0, (bs - used) * row);
}

/* An export in swap layout holds what the sequence holds and nothing
 * else. A group's last block, when partly filled, holds zeros past its
 * tokens (all of it in a quantized cache, whose unfrozen block is never
 * read: its rows are in the staging tail), and so does the tail past the
 * last stored token (all of it when the last block is frozen): those
 * bytes can hold KV of tokens the sequence no longer has (rejected
 * drafts, truncated tokens, a rolled-back freeze), and two sequences with
 * the same tokens and stored KV export the same bytes. kv: the export's
 * KV part of `computed` tokens. */
static void canonical(const pkv__kv *kv, const pkv__backend_config *c,
                      uint32_t computed, uint8_t *bytes)
{
    uint32_t bs = c->block_size, used = computed % bs;
    size_t block = pkv__backend_swap_block_bytes(c);
    int quantized = pkv__backend_quantized(c);
    if (quantized)
        zero_tail_rows(c, used,
                       bytes + (size_t)pkv__kv_blocks_from(kv, computed,
                                                           computed) *
                                   block);
    if (used == 0)
        return;
    size_t layer_block = pkv__backend_layer_block_bytes(c);
    size_t part = pkv__backend_part_bytes(c, 0);
    size_t row = (size_t)c->head_dim * elem_bytes(c);
    uint32_t last = 0, all = pkv__blocks_for(computed, bs);
    for (uint32_t g = 0; g < pkv__kv_num_groups(kv); g++) {
        last += all - pkv__kv_first_seen(kv, g, computed);
        uint8_t *b = bytes + (size_t)(last - 1) * block;
        if (quantized) {
            memset(b, 0, block);
            continue;
        }
        for (uint32_t a = 0; a < pkv__backend_num_arenas(c); a++)
            for (uint32_t h = 0; h < c->num_kv_heads; h++)
                for (int k = 0; k < 2; k++)
                    memset(b + a * layer_block + h * 2 * part +
                               (size_t)k * part + used * row,
                           0, (bs - used) * row);
    }
}

/* The KV part of s's export at out (kv_bytes of them): its swap bytes
 * when it is swapped out, else read from the device. */
static pkv_status write_kv(const pkv__kv *kv, const pkv__backend_config *c,
                           const pkv__allocator *alloc, const pkv__seq *s,
                           uint8_t *out)
{
    uint32_t computed = s->num_computed;
    if (computed == 0)
        return PKV_OK;
    const uint8_t *swap = pkv__kv_swapped(&s->kv);
    size_t size = pkv__kv_swap_bytes(kv, computed);
    int rows = as_rows(c, &kv->groups);
    uint8_t *host = NULL;
    if (swap == NULL) {
        /* Read straight into the export unless rows reorder it. */
        host = rows ? pkv__calloc(alloc, size, 1) : out;
        if (host == NULL)
            return PKV_ERR_OUT_OF_MEMORY;
        pkv_status st = pkv__kv_read(kv, &s->kv, computed, host);
        if (st != PKV_OK) {
            if (host != out)
                pkv__free(alloc, host, size, 1);
            return st;
        }
        swap = host;
    }
    if (rows)
        copy_rows(c, computed, out, swap, 0);
    else {
        if (swap != out)
            memcpy(out, swap, size);
        canonical(kv, c, computed, out);
    }
    if (host != NULL && host != out)
        pkv__free(alloc, host, size, 1);
    return PKV_OK;
}

pkv_status pkv_seq_export(pkv_engine *e, pkv_seq_id id, void *buffer,
                          size_t capacity, size_t *size)
{
    pkv_status checked =
        pkv__engine_check_size_out(e != NULL ? e->message : NULL, size);
    if (checked != PKV_OK)
        return checked;
    pkv__seq *s;
    pkv_status st = pkv__engine_find_between_steps(e, id, "export", &s);
    if (st != PKV_OK)
        return st;
    const pkv__backend_config *c = &e->backend_config;
    uint64_t kv = kv_bytes(&e->kv, c, s->num_computed);
    uint32_t head = pkv__format_header_bytes(&FORMAT, &e->kv.groups);
    size_t seal_at = pkv__format_seal_bytes(e->seal);
    uint64_t content = head + (uint64_t)s->num_tokens * 4 + kv;
    uint64_t total = seal_at + content;
    if (total > SIZE_MAX)
        return pkv__engine_fail(e->message, PKV_ERR_UNSUPPORTED,
                                "export of %llu bytes",
                                (unsigned long long)total);
    *size = (size_t)total;
    if (buffer == NULL && capacity == 0)
        return PKV_OK;
    if (buffer == NULL || capacity < total)
        return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                "export of sequence %llu takes %llu bytes; "
                                "the buffer has %zu",
                                (unsigned long long)id,
                                (unsigned long long)total,
                                buffer == NULL ? (size_t)0 : capacity);
    uint8_t *out = (uint8_t *)buffer + seal_at;
    st = write_kv(&e->kv, c, &e->alloc, s,
                  out + head + (size_t)s->num_tokens * 4);
    if (st != PKV_OK)
        return pkv__engine_fail(e->message, st, "export: %llu bytes of KV: %s",
                                (unsigned long long)kv,
                                st == PKV_ERR_OUT_OF_MEMORY
                                    ? "out of memory"
                                    : pkv_last_error());
    pkv__format_begin(&FORMAT, out, c, &e->kv.groups);
    pkv__put_u32(out + AT_NUM_TOKENS, s->num_tokens);
    pkv__put_u32(out + AT_PROMPT_LEN, s->prompt_len);
    pkv__put_u32(out + AT_NUM_COMPUTED, s->num_computed);
    pkv__put_u32(out + AT_NUM_GENERATED, s->num_generated);
    pkv__put_u32(out + AT_MAX_NEW_TOKENS, s->max_new_tokens);
    pkv__put_u64(out + AT_KV_BYTES, kv);
    for (uint32_t i = 0; i < s->num_tokens; i++)
        pkv__put_u32(out + head + (size_t)i * 4, (uint32_t)s->tokens[i]);
    st = pkv__format_finish(&FORMAT, e->seal, buffer, (size_t)content);
    if (st != PKV_OK)
        return pkv__engine_fail(e->message, st,
                                "export: sealing %llu bytes failed",
                                (unsigned long long)content);
    return PKV_OK;
}

/* The bytes an export says it has (pkv__format_open's length). */
static uint64_t export_length(const uint8_t *d, uint32_t header_bytes)
{
    uint64_t kv = pkv__get_u64(d + AT_KV_BYTES);
    if (kv > UINT64_MAX / 2)
        return UINT64_MAX;
    return header_bytes + (uint64_t)pkv__get_u32(d + AT_NUM_TOKENS) * 4 + kv;
}

/* An export as an import reads it. */
typedef struct imported {
    uint32_t tokens, prompt_len, computed, generated, max_new_tokens;
    uint64_t kv_bytes;
    uint32_t source_block_size; /* the exporter's */
    int keep_kv; /* its KV moves into this engine's blocks */
    const uint8_t *token_bytes, *kv;
} imported;

/* Read the opened export v into x, checking it as an engine of manager
 * kv, config c and params p takes it. PKV_OK, or the failure with why[]
 * saying it. */
static pkv_status read_export(const pkv__format_view *v, const pkv__kv *kv,
                              const pkv__backend_config *c,
                              const pkv_engine_params *p, imported *x,
                              char *why, size_t why_size)
{
    const uint8_t *d = v->d;
    x->tokens = pkv__get_u32(d + AT_NUM_TOKENS);
    x->prompt_len = pkv__get_u32(d + AT_PROMPT_LEN);
    x->computed = pkv__get_u32(d + AT_NUM_COMPUTED);
    x->generated = pkv__get_u32(d + AT_NUM_GENERATED);
    x->max_new_tokens = pkv__get_u32(d + AT_MAX_NEW_TOKENS);
    x->kv_bytes = pkv__get_u64(d + AT_KV_BYTES);
    x->token_bytes = d + v->header_bytes;
    x->kv = x->token_bytes + (size_t)x->tokens * 4;
    /* The geometry must match this engine's; the block size (and U8's
     * groups) may differ. */
    if (!pkv__format_same_geometry(v, c, 0, why, why_size))
        return PKV_ERR_UNSUPPORTED;
    /* The exporter's layout, which the KV bytes follow. */
    pkv__backend_config source = *c, *src = &source;
    src->block_size = pkv__get_u32(d + PKV__AT_BLOCK_SIZE);
    x->source_block_size = src->block_size;
    uint32_t kq = pkv__get_u32(d + PKV__AT_KEY_QUANT);
    uint32_t vq = pkv__get_u32(d + PKV__AT_VALUE_QUANT);
    int quant_ok = pkv__backend_quantized(c)
                       ? pkv__wire_get_quant(src, kq, vq)
                       : kq == 0 && vq == 0;
    if (src->block_size == 0 ||
        src->block_size > PKV_LAYOUT_MAX_BLOCK_SIZE ||
        (src->block_size & (src->block_size - 1)) != 0 || !quant_ok) {
        snprintf(why, why_size,
                 "block_size %u, quant %#x/%#x are not a pkv layout",
                 (unsigned)src->block_size, (unsigned)kq, (unsigned)vq);
        return PKV_ERR_INVALID_ARGUMENT;
    }
    /* Its KV moves when this engine lays it out alike: the same
     * quantization groups, the same groups of layers and, unless it
     * travels as rows, the same block size. */
    uint32_t layer;
    x->keep_kv = kq == pkv__wire_quant(c, 0) && vq == pkv__wire_quant(c, 1) &&
                 pkv__format_same_layout(&FORMAT, v, &kv->groups, &layer) &&
                 (as_rows(c, &kv->groups) ||
                  src->block_size == c->block_size);
    /* The KV's bytes: a layered export's are checked when they move. */
    uint64_t kv_want = !v->layered   ? plain_kv_bytes(src, x->computed)
                       : x->keep_kv ? kv_bytes(kv, c, x->computed)
                                    : x->kv_bytes;
    if (x->tokens == 0 || x->tokens > p->max_model_len ||
        x->prompt_len == 0 || x->prompt_len > x->tokens ||
        x->computed >= x->tokens || x->generated > x->tokens ||
        x->kv_bytes != kv_want) {
        snprintf(why, why_size,
                 "%u tokens (prompt %u, %u sampled, %u with KV, %llu bytes "
                 "of it); max_model_len is %u",
                 (unsigned)x->tokens, (unsigned)x->prompt_len,
                 (unsigned)x->generated, (unsigned)x->computed,
                 (unsigned long long)x->kv_bytes,
                 (unsigned)p->max_model_len);
        return PKV_ERR_INVALID_ARGUMENT;
    }
    for (uint32_t i = 0; i < x->tokens; i++) {
        uint32_t t = pkv__get_u32(x->token_bytes + (size_t)i * 4);
        if (t > INT32_MAX || (p->vocab_size != 0 && t >= p->vocab_size)) {
            snprintf(why, why_size,
                     "token %u is %u; this engine's ids are 0..%u",
                     (unsigned)i, (unsigned)t,
                     (unsigned)(p->vocab_size ? p->vocab_size - 1
                                              : INT32_MAX));
            return PKV_ERR_INVALID_ARGUMENT;
        }
    }
    /* Blocks to hold the KV and the next row: a sequence that can never
     * fit is refused now, not failed at its first step. */
    uint32_t kept = x->keep_kv ? x->computed : 0;
    uint32_t need = pkv__kv_blocks_from(kv, kept, kept + 1);
    if (need > pkv__kv_num_blocks(kv) - 1) {
        snprintf(why, why_size, "%u blocks needed; the pool has %u",
                 (unsigned)need, (unsigned)(pkv__kv_num_blocks(kv) - 1));
        return PKV_ERR_NO_BLOCKS;
    }
    return PKV_OK;
}

/* A new sequence of x's tokens with its KV (when it keeps it) as swap
 * bytes; NULL when memory runs out. */
static pkv__seq *new_seq(const pkv__kv *kv, const pkv__backend_config *c,
                         const pkv__allocator *alloc, const imported *x,
                         uint64_t salt)
{
    uint32_t computed = x->keep_kv ? x->computed : 0;
    size_t swap_size = computed > 0 ? pkv__kv_swap_bytes(kv, computed) : 0;
    int32_t *tokens = pkv__calloc(alloc, x->tokens, sizeof *tokens);
    pkv__seq *seq = NULL;
    if (tokens != NULL) {
        for (uint32_t i = 0; i < x->tokens; i++)
            tokens[i] = (int32_t)pkv__get_u32(x->token_bytes + (size_t)i * 4);
        /* Computed again, its prompt's blocks may hit: their hashes. */
        seq = pkv__seq_new(alloc, kv, tokens, x->tokens, salt,
                           computed == 0 ? x->prompt_len : 0);
    }
    pkv__free(alloc, tokens, x->tokens, sizeof *tokens);
    if (seq == NULL || swap_size == 0)
        return seq;
    uint8_t *swap = pkv__calloc(alloc, swap_size, 1);
    if (swap == NULL) {
        pkv__seq_free(seq, alloc);
        return NULL;
    }
    if (as_rows(c, &kv->groups))
        copy_rows(c, computed, swap, x->kv, 1);
    else
        memcpy(swap, x->kv, swap_size);
    pkv__kv_swap_import(&seq->kv, swap, swap_size);
    seq->num_computed = computed;
    return seq;
}

/* The line an import that computes its KV again logs, into line[]. */
static void why_again(const pkv__format_view *v, const pkv__kv *kv,
                      const pkv__backend_config *c, const imported *x,
                      char *line, size_t size)
{
    const uint8_t *d = v->d;
    if (v->layered || !pkv__groups_plain(&kv->groups))
        snprintf(line, size,
                 "exported %s hybrid memory's groups of layers (or with "
                 "other groups, windows or block size)",
                 v->layered ? "with" : "without");
    else
        snprintf(line, size,
                 "quantized blocks of %u tokens (groups %#x/%#x) cannot "
                 "move into blocks of %u (groups %#x/%#x) without "
                 "re-quantising",
                 (unsigned)x->source_block_size,
                 (unsigned)pkv__get_u32(d + PKV__AT_KEY_QUANT),
                 (unsigned)pkv__get_u32(d + PKV__AT_VALUE_QUANT),
                 (unsigned)c->block_size, (unsigned)pkv__wire_quant(c, 0),
                 (unsigned)pkv__wire_quant(c, 1));
}

pkv_status pkv_seq_import(pkv_engine *e, const pkv_seq_params *params,
                          const void *data, size_t size, pkv_seq_id *out_id)
{
    if (out_id != NULL)
        *out_id = 0;
    if (e == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "engine is NULL");
    if (data == NULL || out_id == NULL)
        return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                "%s is NULL",
                                data == NULL ? "data" : "out_id");
    char why[192];
    pkv_seq_params p;
    pkv_seq_params_init(&p);
    if (params != NULL &&
        pkv__struct_read(&p, params, params->struct_size,
                         PKV__SEQ_PARAMS_MIN_SIZE, sizeof p, "params",
                         "pkv_seq_params_init", why, sizeof why))
        return pkv__engine_fail(e->message, PKV_ERR_STRUCT_SIZE, "%s", why);
    if (p.prompt != NULL || p.prompt_len != 0 || p.flags != 0)
        return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                "import: params->prompt, prompt_len and "
                                "flags must be NULL and 0 (the tokens come "
                                "from the export)");
    if (e->step.in_step)
        return pkv__engine_fail(e->message, PKV_ERR_BAD_STATE,
                                "import during a step: call it after "
                                "step_end");
    const pkv__backend_config *c = &e->backend_config;
    pkv__format_view v;
    pkv_status st = pkv__format_open(&FORMAT, e->seal, &e->alloc, data, size,
                                     c->num_layers, export_length, &v, why,
                                     sizeof why);
    imported x;
    if (st == PKV_OK)
        st = read_export(&v, &e->kv, c, &e->params, &x, why, sizeof why);
    if (st != PKV_OK) {
        pkv__format_release(&v, &e->alloc);
        return pkv__engine_fail(e->message, st, "import: %s", why);
    }
    /* Everything that can fail comes first. */
    st = pkv__seqs_reserve(&e->seqs, pkv__inbox_live_count(&e->inbox) + 17);
    pkv__seq *seq = st == PKV_OK ? new_seq(&e->kv, c, &e->alloc, &x,
                                           p.cache_salt)
                                 : NULL;
    if (seq == NULL) {
        pkv__format_release(&v, &e->alloc);
        return pkv__engine_fail(e->message, PKV_ERR_OUT_OF_MEMORY,
                                "import of %u tokens", (unsigned)x.tokens);
    }
    seq->prompt_len = x.prompt_len;
    seq->num_generated = x.generated;
    seq->max_new_tokens =
        p.max_new_tokens != 0 ? p.max_new_tokens : x.max_new_tokens;
    seq->order.priority = p.priority;
    seq->tenant = p.tenant;
    seq->user_data = p.user_data;
    pkv__inbox_issue(&e->inbox, seq);
    pkv__seqs_join(&e->seqs, seq,
                   seq->num_computed > 0 ? PKV__SEQ_SWAPPED
                                         : PKV__SEQ_WAITING);
    if (!x.keep_kv && x.computed > 0) {
        why_again(&v, &e->kv, c, &x, why, sizeof why);
        pkv__engine_log(e->message, PKV_LOG_LEVEL_INFO,
                        "import: %s; sequence %llu computes its %u tokens "
                        "of KV again",
                        why, (unsigned long long)seq->id,
                        (unsigned)x.computed);
    }
    pkv__format_release(&v, &e->alloc);
    *out_id = seq->id;
    PKV__ENGINE_CHECK(e);
    return PKV_OK;
}
