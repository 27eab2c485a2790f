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
 * The KV travels as the engine stores it. f32 and f16 go as rows, K and V
 * of every (layer, kv head), so the two engines' block sizes may differ.
 * U8 goes as whole blocks (codes with their group parameters) plus the
 * staging tail: a block's groups depend on its size, which must match.
 */
#include "check.h"
#include "engine.h"
#include "kv_layout.h"
#include "seqs.h"
#include "seal.h"
#include "struct_sizes.h"
#include "wire.h"

#include <string.h>

#define HEADER_BYTES 80u
/* Versions 3 and 4: versions 1 and 2 with an XXH3 checksum (wire.h);
 * older ones are refused as made by an older pkv. */
#define FORMAT_VERSION 3u
/* Version 4: from an engine with hybrid memory's groups. The header goes
 * on with a u32 group, arena and window per layer; the KV is the
 * engine's swap layout (each group's blocks from the first its next row
 * sees, group after group), which only an engine grouped the same way,
 * with the same block size, takes: any other computes the KV again. */
#define FORMAT_VERSION_GROUPS 4u
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

static int grouped(const pkv_engine *e)
{
    return e->kv.groups.num_groups > 1;
}

static uint32_t header_bytes_of(const pkv_engine *e)
{
    return grouped(e) ? HEADER_BYTES + 12 * e->kv.groups.num_layers
                      : HEADER_BYTES;
}

/* Version 4's layer table: each layer's group, arena and window. */
static void put_layout(const pkv_engine *e, uint8_t *at)
{
    const pkv__groups *g = &e->kv.groups;
    for (uint32_t l = 0; l < g->num_layers; l++) {
        pkv__put_u32(at + 12 * l, g->layer_group[l]);
        pkv__put_u32(at + 12 * l + 4, g->layer_arena[l]);
        pkv__put_u32(at + 12 * l + 8,
                     pkv__groups_window(g, g->layer_group[l]));
    }
}

/* Blocks of a grouped export of `computed` tokens: every group's from
 * the first its next row sees. */
static uint32_t grouped_blocks(const pkv_engine *e, uint32_t computed)
{
    return pkv__kv_blocks_from(&e->kv, computed,
                                   computed);
}

/* Bytes of one stored element (f32 and f16 rows). */
static size_t elem_bytes(const pkv__backend_config *c)
{
    return c->kv_dtype == PKV_KV_DTYPE_F16 ? 2 : 4;
}

/* Bytes of the KV part of an export of `computed` tokens from config c. */
static uint64_t kv_bytes(const pkv__backend_config *c, uint32_t computed)
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

/* The KV part of an export by e of `computed` tokens. */
static uint64_t export_kv_bytes(const pkv_engine *e, uint32_t computed)
{
    const pkv__backend_config *c = &e->backend_config;
    if (!grouped(e) || computed == 0)
        return kv_bytes(c, computed);
    return (uint64_t)grouped_blocks(e, computed) *
               pkv__backend_swap_block_bytes(c) +
           (pkv__backend_quantized(c) ? pkv__backend_stage_bytes(c) : 0);
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

/* A quantized export holds what the sequence holds and nothing else. The arena
 * bytes of an unsealed last block are never read (its rows are in the
 * staging tail), nor are the tail's rows past the last stored token (all
 * of them when the last block is sealed); they can hold KV of tokens the
 * sequence no longer has (rejected drafts, truncated tokens, a rolled
 * back seal), so they are exported as zeros: two sequences with the same
 * tokens and stored KV export the same bytes. kv: the export's KV part
 * (swap layout, then the tail [layer][kv head][K, V][token][ch]). */
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

static void quantized_canonical(const pkv__backend_config *c,
                                uint32_t computed, uint8_t *kv)
{
    uint32_t bs = c->block_size, used = computed % bs;
    uint32_t n = pkv__blocks_for(computed, bs);
    size_t block = pkv__backend_swap_block_bytes(c);
    if (used != 0)
        memset(kv + (size_t)(n - 1) * block, 0, block);
    zero_tail_rows(c, used, kv + (size_t)n * block);
}

/* A grouped export's KV (swap layout, then the tail), canonical as a
 * quantized one is: each group's last block, when partly filled, holds
 * zeros past its tokens (all of it when quantized: its rows are in the
 * tail), and so does the tail. */
static void grouped_canonical(const pkv_engine *e, uint32_t computed,
                              uint8_t *kv)
{
    const pkv__backend_config *c = &e->backend_config;
    uint32_t bs = c->block_size, used = computed % bs;
    size_t block = pkv__backend_swap_block_bytes(c);
    if (pkv__backend_quantized(c))
        zero_tail_rows(c, used,
                       kv + (size_t)grouped_blocks(e, computed) * block);
    if (used == 0)
        return;
    size_t layer_block = pkv__backend_layer_block_bytes(c);
    size_t part = pkv__backend_part_bytes(c, 0);
    size_t row = (size_t)c->head_dim * elem_bytes(c);
    uint32_t last = 0, all = pkv__blocks_for(computed, bs);
    for (uint32_t g = 0; g < e->kv.groups.num_groups; g++) {
        last += all - pkv__groups_first_seen(&e->kv.groups, g, bs, computed);
        uint8_t *b = kv + (size_t)(last - 1) * block;
        if (pkv__backend_quantized(c)) {
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

/* The sequence's KV in swap layout: its swap copy, or read from the
 * device into *owned (freed by the caller, of *owned_size bytes). */
static pkv_status seq_kv(pkv_engine *e, const pkv__seq *s,
                         const uint8_t **kv, uint8_t **owned,
                         size_t *owned_size)
{
    *kv = NULL;
    *owned = NULL;
    *owned_size = 0;
    if (s->num_computed == 0)
        return PKV_OK;
    *kv = pkv__kv_swapped(&s->kv);
    if (*kv != NULL)
        return PKV_OK;
    size_t size = pkv__kv_swap_bytes(&e->kv, s->num_computed);
    uint8_t *host = pkv__calloc(&e->alloc, size, 1);
    if (host == NULL)
        return pkv__engine_fail(e->message, PKV_ERR_OUT_OF_MEMORY,
                                "export: %zu bytes of KV", size);
    pkv_status st = pkv__kv_read(&e->kv, &s->kv, s->num_computed, host);
    if (st != PKV_OK) {
        pkv__free(&e->alloc, host, size, 1);
        return pkv__engine_fail(e->message, st, "export: reading the KV: %s",
                                pkv_last_error());
    }
    *kv = host;
    *owned = host;
    *owned_size = size;
    return PKV_OK;
}

pkv_status pkv_seq_export(pkv_engine *e, pkv_seq_id id, void *buffer,
                          size_t capacity, size_t *size)
{
    pkv_status checked = pkv__engine_check_size_out(e != NULL ? e->message : NULL, size);
    if (checked != PKV_OK)
        return checked;
    pkv__seq *s;
    pkv_status st = pkv__engine_find_between_steps(e, id, "export", &s);
    if (st != PKV_OK)
        return st;
    const pkv__backend_config *c = &e->backend_config;
    uint64_t kv = export_kv_bytes(e, s->num_computed);
    uint32_t head = header_bytes_of(e);
    /* With a seal, the export goes after the seal's header. */
    size_t seal_at = e->seal != NULL ? PKV__SEAL_HEADER_BYTES : 0;
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
    const uint8_t *swap;
    uint8_t *owned;
    size_t owned_size;
    st = seq_kv(e, s, &swap, &owned, &owned_size);
    if (st != PKV_OK)
        return st;

    uint8_t *out = (uint8_t *)buffer + seal_at;
    pkv__wire_put_header(out, head, MAGIC,
                         grouped(e) ? FORMAT_VERSION_GROUPS : FORMAT_VERSION,
                         c);
    if (grouped(e))
        put_layout(e, out + HEADER_BYTES);
    int quantized = pkv__backend_quantized(c);
    pkv__put_u32(out + AT_NUM_TOKENS, s->num_tokens);
    pkv__put_u32(out + AT_PROMPT_LEN, s->prompt_len);
    pkv__put_u32(out + AT_NUM_COMPUTED, s->num_computed);
    pkv__put_u32(out + AT_NUM_GENERATED, s->num_generated);
    pkv__put_u32(out + AT_MAX_NEW_TOKENS, s->max_new_tokens);
    pkv__put_u64(out + AT_KV_BYTES, kv);
    uint8_t *p = out + head;
    for (uint32_t i = 0; i < s->num_tokens; i++, p += 4)
        pkv__put_u32(p, (uint32_t)s->tokens[i]);
    if (kv > 0 && grouped(e)) {
        memcpy(p, swap, (size_t)kv);
        grouped_canonical(e, s->num_computed, p);
    } else if (kv > 0 && quantized) {
        memcpy(p, swap, (size_t)kv);
        quantized_canonical(c, s->num_computed, p);
    } else if (kv > 0)
        copy_rows(c, s->num_computed, p, swap, 0);
    pkv__put_u64(out + AT_CHECKSUM,
                 pkv__checksum(out, (size_t)content, AT_CHECKSUM));
    pkv__free(&e->alloc, owned, owned_size, 1);
    if (e->seal != NULL) {
        st = pkv__seal_close(e->seal, buffer, (size_t)content, NULL, 0);
        if (st != PKV_OK)
            return pkv__engine_fail(e->message, st, "export: sealing %llu bytes "
                                           "failed",
                                    (unsigned long long)content);
    }
    return PKV_OK;
}

/* The header's checks, cheapest first; PKV_OK when data may be imported
 * by e. *keep_kv: whether its KV can move into e's blocks (U8 blocks of
 * another size or groups cannot: that would re-quantise them). */
static pkv_status check_header(pkv_engine *e, const uint8_t *d, size_t size,
                               int *keep_kv, uint32_t *head)
{
    char why[128];
    /* Version 3, or 4 with its layer table (of as many layers as this
     * engine has: another count fails the geometry check below). */
    uint32_t version = size >= HEADER_BYTES && memcmp(d, MAGIC, 8) == 0
                           ? pkv__get_u32(d + PKV__AT_VERSION)
                           : FORMAT_VERSION;
    if (version != FORMAT_VERSION_GROUPS)
        version = FORMAT_VERSION;
    *head = version == FORMAT_VERSION_GROUPS
                ? HEADER_BYTES + 12 * e->backend_config.num_layers
                : HEADER_BYTES;
    pkv_status st =
        pkv__wire_check_opening(d, size, MAGIC, version, *head,
                                "a pkv sequence export", why, sizeof why);
    if (st != PKV_OK)
        return pkv__engine_fail(e->message, st, "import: %s", why);
    uint32_t tokens = pkv__get_u32(d + AT_NUM_TOKENS);
    uint64_t kv = pkv__get_u64(d + AT_KV_BYTES);
    uint64_t total = *head + (uint64_t)tokens * 4 + kv;
    if (kv > UINT64_MAX / 2 || total != size)
        return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                "import: the export says %llu bytes; %zu "
                                "given (truncated?)",
                                (unsigned long long)total, size);
    if (pkv__checksum(d, size, AT_CHECKSUM) != pkv__get_u64(d + AT_CHECKSUM))
        return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                "import: checksum mismatch: the export was "
                                "changed or damaged");
    const pkv__backend_config *c = &e->backend_config;
    uint32_t dtype = pkv__get_u32(d + PKV__AT_KV_DTYPE);
    int quantized = pkv__backend_quantized(c);
    /* The geometry must match this engine's; the block size (and U8's
     * groups) may differ. */
    uint8_t mine[HEADER_BYTES];
    pkv__wire_put_header(mine, HEADER_BYTES, MAGIC, FORMAT_VERSION, c);
    if (memcmp(d + PKV__AT_KV_DTYPE, mine + PKV__AT_KV_DTYPE, 4) != 0 ||
        memcmp(d + PKV__AT_NUM_LAYERS, mine + PKV__AT_NUM_LAYERS,
               PKV__AT_BLOCK_SIZE - PKV__AT_NUM_LAYERS) != 0)
        return pkv__engine_fail(
            e->message, PKV_ERR_UNSUPPORTED,
            "import: exported with kv_dtype %u, %u layers, %u kv heads, "
            "head_dim %u; this engine has %d, %u, %u, %u",
            (unsigned)dtype, (unsigned)pkv__get_u32(d + PKV__AT_NUM_LAYERS),
            (unsigned)pkv__get_u32(d + PKV__AT_NUM_KV_HEADS),
            (unsigned)pkv__get_u32(d + PKV__AT_HEAD_DIM), (int)c->kv_dtype,
            (unsigned)c->num_layers, (unsigned)c->num_kv_heads,
            (unsigned)c->head_dim);
    /* The exporter's layout, which the KV bytes follow. */
    pkv__backend_config src = *c;
    src.block_size = pkv__get_u32(d + PKV__AT_BLOCK_SIZE);
    uint32_t kq = pkv__get_u32(d + PKV__AT_KEY_QUANT);
    uint32_t vq = pkv__get_u32(d + PKV__AT_VALUE_QUANT);
    int groups_ok = quantized ? pkv__wire_get_quant(&src, kq, vq)
                       : kq == 0 && vq == 0;
    if (src.block_size == 0 || src.block_size > PKV_LAYOUT_MAX_BLOCK_SIZE ||
        (src.block_size & (src.block_size - 1)) != 0 || !groups_ok)
        return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                "import: block_size %u, quant %#x/%#x are "
                                "not a pkv layout",
                                (unsigned)src.block_size, (unsigned)kq,
                                (unsigned)vq);
    *keep_kv = memcmp(d + PKV__AT_KEY_QUANT, mine + PKV__AT_KEY_QUANT, 8) ==
                   0 &&
               (!quantized || src.block_size == c->block_size);
    /* A grouped export moves into an engine with the same groups, windows
     * and blocks only; one grouped otherwise, or not, computes it again,
     * and so does a grouped engine given an export without groups. */
    if (version == FORMAT_VERSION_GROUPS || grouped(e)) {
        int same = version == FORMAT_VERSION_GROUPS && grouped(e) &&
                   src.block_size == c->block_size;
        const pkv__groups *g = &e->kv.groups;
        for (uint32_t l = 0; same && l < c->num_layers; l++) {
            const uint8_t *at = d + HEADER_BYTES + 12 * (size_t)l;
            same = pkv__get_u32(at) == g->layer_group[l] &&
                   pkv__get_u32(at + 4) == g->layer_arena[l] &&
                   pkv__get_u32(at + 8) ==
                       pkv__groups_window(g, g->layer_group[l]);
        }
        *keep_kv = *keep_kv && same;
    }
    uint32_t prompt = pkv__get_u32(d + AT_PROMPT_LEN);
    uint32_t computed = pkv__get_u32(d + AT_NUM_COMPUTED);
    uint32_t generated = pkv__get_u32(d + AT_NUM_GENERATED);
    /* The KV's bytes: a grouped export's are checked when they move. */
    uint64_t kv_want = version == FORMAT_VERSION_GROUPS
                           ? (*keep_kv ? export_kv_bytes(e, computed) : kv)
                           : kv_bytes(&src, computed);
    if (tokens == 0 || tokens > e->params.max_model_len || prompt == 0 ||
        prompt > tokens || computed >= tokens || generated > tokens ||
        kv != kv_want)
        return pkv__engine_fail(
            e->message, PKV_ERR_INVALID_ARGUMENT,
            "import: %u tokens (prompt %u, %u sampled, %u with KV, %llu "
            "bytes of it); max_model_len is %u",
            (unsigned)tokens, (unsigned)prompt, (unsigned)generated,
            (unsigned)computed, (unsigned long long)kv,
            (unsigned)e->params.max_model_len);
    uint32_t vocab = e->params.vocab_size;
    for (uint32_t i = 0; i < tokens; i++) {
        uint32_t t = pkv__get_u32(d + *head + (size_t)i * 4);
        if (t > INT32_MAX || (vocab != 0 && t >= vocab))
            return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                    "import: token %u is %u; this engine's "
                                    "ids are 0..%u",
                                    (unsigned)i, (unsigned)t,
                                    (unsigned)(vocab ? vocab - 1 : INT32_MAX));
    }
    /* Blocks to hold the KV and the next row: a sequence that can never
     * fit is refused now, not failed at its first step. */
    uint32_t kept = *keep_kv ? computed : 0;
    uint32_t need = pkv__kv_blocks_from(&e->kv, kept, kept + 1);
    if (need > c->num_blocks - 1)
        return pkv__engine_fail(e->message, PKV_ERR_NO_BLOCKS,
                                "import: %u blocks needed; the pool has %u",
                                (unsigned)need, (unsigned)(c->num_blocks - 1));
    return PKV_OK;
}

/* pkv_seq_import of size bytes of an export at d (opened when sealed). */
static pkv_status import_export(pkv_engine *e, const pkv_seq_params *params,
                                const uint8_t *d, size_t size,
                                pkv_seq_id *out_id)
{
    const pkv_seq_params p = *params;
    int keep_kv = 0;
    uint32_t head = HEADER_BYTES;
    pkv_status st = check_header(e, d, size, &keep_kv, &head);
    if (st != PKV_OK)
        return st;

    /* Everything that can fail comes first. */
    const pkv__backend_config *c = &e->backend_config;
    uint32_t tokens = pkv__get_u32(d + AT_NUM_TOKENS);
    uint32_t computed = keep_kv ? pkv__get_u32(d + AT_NUM_COMPUTED) : 0;
    uint32_t prompt_len = pkv__get_u32(d + AT_PROMPT_LEN);
    uint32_t bs = c->block_size;
    uint32_t swap_blocks = grouped(e) ? grouped_blocks(e, computed)
                                      : pkv__blocks_for(computed, bs);
    size_t swap_size =
        computed > 0 ? pkv__backend_swap_bytes(c, swap_blocks) : 0;
    st = pkv__seqs_reserve(&e->seqs, pkv__inbox_live_count(&e->inbox) + 17);
    int32_t *token_ids = pkv__calloc(&e->alloc, tokens, sizeof *token_ids);
    pkv__seq *seq = NULL;
    if (st == PKV_OK && token_ids != NULL) {
        for (uint32_t i = 0; i < tokens; i++)
            token_ids[i] = (int32_t)pkv__get_u32(d + head + (size_t)i * 4);
        /* Computed again, its prompt's blocks may hit: their hashes. */
        seq = pkv__seq_new(&e->alloc, &e->kv, token_ids, tokens,
                           p.cache_salt, computed == 0 ? prompt_len : 0);
    }
    pkv__free(&e->alloc, token_ids, tokens, sizeof *token_ids);
    uint8_t *swap =
        seq != NULL && swap_size > 0 ? pkv__calloc(&e->alloc, swap_size, 1)
                                     : NULL;
    if (st != PKV_OK || seq == NULL || (swap_size > 0 && swap == NULL)) {
        pkv__free(&e->alloc, swap, swap_size, 1);
        pkv__seq_free(seq, &e->alloc);
        return pkv__engine_fail(e->message, PKV_ERR_OUT_OF_MEMORY,
                                "import of %u tokens", (unsigned)tokens);
    }

    const uint8_t *kv = d + head + (size_t)tokens * 4;
    if (swap_size > 0 && (grouped(e) || pkv__backend_quantized(c)))
        memcpy(swap, kv, swap_size);
    else if (swap_size > 0)
        copy_rows(c, computed, swap, kv, 1);
    seq->prompt_len = prompt_len;
    seq->num_generated = pkv__get_u32(d + AT_NUM_GENERATED);
    seq->max_new_tokens = p.max_new_tokens != 0
                              ? p.max_new_tokens
                              : pkv__get_u32(d + AT_MAX_NEW_TOKENS);
    seq->num_computed = computed;
    seq->priority = p.priority;
    seq->tenant = p.tenant;
    seq->user_data = p.user_data;
    pkv__inbox_issue(&e->inbox, seq);
    pkv__map_put(&e->seqs.by_id, seq->id, (uint64_t)(uintptr_t)seq);
    if (tokens > e->seqs.longest_tokens) /* sizes the next step's arrays */
        e->seqs.longest_tokens = tokens;
    if (computed > 0) {
        pkv__kv_swap_import(&seq->kv, swap, swap_size);
        seq->state = PKV__SEQ_SWAPPED;
        pkv__seqs_enqueue(&e->seqs, &e->seqs.swapped, seq);
    } else {
        seq->state = PKV__SEQ_WAITING;
        pkv__seqs_enqueue(&e->seqs, &e->seqs.waiting, seq);
    }
    int groups_differ = grouped(e) || head != HEADER_BYTES;
    if (!keep_kv && pkv__get_u32(d + AT_NUM_COMPUTED) > 0 && groups_differ)
        pkv__engine_log(e->message, PKV_LOG_LEVEL_INFO,
                        "import: exported %s hybrid memory's groups of "
                        "layers (or with other groups, windows or block "
                        "size); sequence %llu computes its %u tokens of KV "
                        "again",
                        head != HEADER_BYTES ? "with" : "without",
                        (unsigned long long)seq->id,
                        (unsigned)pkv__get_u32(d + AT_NUM_COMPUTED));
    else if (!keep_kv && pkv__get_u32(d + AT_NUM_COMPUTED) > 0)
        pkv__engine_log(e->message, PKV_LOG_LEVEL_INFO,
                        "import: quantized blocks of %u tokens (groups "
                        "%#x/%#x) cannot move into blocks of %u (groups "
                        "%#x/%#x) "
                        "without re-quantising; sequence %llu computes its "
                        "%u tokens of KV again",
                        (unsigned)pkv__get_u32(d + PKV__AT_BLOCK_SIZE),
                        (unsigned)pkv__get_u32(d + PKV__AT_KEY_QUANT),
                        (unsigned)pkv__get_u32(d + PKV__AT_VALUE_QUANT),
                        (unsigned)bs, (unsigned)pkv__wire_quant(c, 0),
                        (unsigned)pkv__wire_quant(c, 1),
                        (unsigned long long)seq->id,
                        (unsigned)pkv__get_u32(d + AT_NUM_COMPUTED));
    *out_id = seq->id;
    PKV__ENGINE_CHECK(e);
    return PKV_OK;
}

pkv_status pkv_seq_import(pkv_engine *e, const pkv_seq_params *params,
                          const void *data, size_t size, pkv_seq_id *out_id)
{
    if (out_id != NULL)
        *out_id = 0;
    if (e == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "engine is NULL");
    if (data == NULL || out_id == NULL)
        return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT, "%s is NULL",
                                data == NULL ? "data" : "out_id");
    pkv_seq_params p;
    pkv_seq_params_init(&p);
    if (params != NULL) {
        char why[128];
        if (pkv__struct_size_bad(params->struct_size,
                                 PKV__SEQ_PARAMS_MIN_SIZE, sizeof *params,
                                 "params", "pkv_seq_params_init", why,
                                 sizeof why))
            return pkv__engine_fail(e->message, PKV_ERR_STRUCT_SIZE, "%s", why);
        memcpy(&p, params, params->struct_size);
    }
    if (p.prompt != NULL || p.prompt_len != 0 || p.flags != 0)
        return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                "import: params->prompt, prompt_len and "
                                "flags must be NULL and 0 (the tokens come "
                                "from the export)");
    if (e->step.in_step)
        return pkv__engine_fail(e->message, PKV_ERR_BAD_STATE,
                                "import during a step: call it after "
                                "step_end");
    const uint8_t *d;
    size_t n;
    uint8_t *owned;
    char why[160];
    pkv_status st = pkv__seal_unwrap(e->seal, &e->alloc, data, size, MAGIC,
                                     &d, &n, &owned, why, sizeof why);
    if (st != PKV_OK)
        return pkv__engine_fail(e->message, st, "import: %s", why);
    st = import_export(e, &p, d, n, out_id);
    pkv__free(&e->alloc, owned, n, 1);
    return st;
}
