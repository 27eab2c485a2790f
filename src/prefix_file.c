/* SPDX-License-Identifier: MIT */
/*
 * pkv_engine_save_prefix_cache and pkv_engine_load_prefix_cache: the
 * prefix cache as portable bytes, so that a restarted server answers its
 * first shared prompt with a hit (docs/design.md, "A prefix cache that
 * survives restarts", has the format).
 *
 * Saved: every cached block a lookup can still reach, parents first, each
 * with its token ids, salt, group, the index of its parent and its KV as
 * stored (the KV-cache manager's pkv__kv_reachable). Loaded: the file's
 * blocks go back to the manager (pkv__kv_load_saved), which takes free
 * blocks only and computes the hashes again. And
 * pkv_engine_reset_prefix_cache: the prefix cache emptied.
 */
#include "check.h"
#include "engine.h"
#include "format.h"
#include "wire.h"

#include <stdio.h>
#include <string.h>

static const uint8_t MAGIC[8] = {'P', 'K', 'V', 'P', 'F', 'X', '\r', '\n'};

/* Header fields after the common ones (wire.h). */
enum {
    AT_NUM_ENTRIES = PKV__AT_FORMAT_FIELDS, /* u32 */
    AT_BLOCK_BYTES = 48,                    /* u64 */
    AT_CHECKSUM = 56                        /* u64 */
};

/* Version 3 (versions 1 and 2 with an XXH3 checksum; older ones are
 * refused as made by an older pkv), and 4 with a layer table of a group
 * and an arena per layer. */
static const pkv__format FORMAT = {MAGIC, "a saved pkv prefix cache", 3, 64,
                                   8, AT_CHECKSUM};

#define ROOT UINT32_MAX /* parent index of a prompt's first block */

/* An entry: u32 parent index (ROOT: none), u32 group (0 in the plain
 * layout), u64 salt, the block's token ids as u32 (pkv__kv_saved). */
static size_t entry_bytes(uint32_t block_size)
{
    return 16 + (size_t)4 * block_size;
}

/* The n saved blocks' entries, after the header of head bytes. */
static void write_entries(uint8_t *out, uint32_t head, uint32_t bs,
                          const pkv__kv_saved *saved, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        uint8_t *p = out + head + i * entry_bytes(bs);
        pkv__put_u32(p, saved[i].parent == PKV__KV_ROOT ? ROOT
                                                        : saved[i].parent);
        pkv__put_u32(p + 4, saved[i].group);
        pkv__put_u64(p + 8, saved[i].salt);
        for (uint32_t t = 0; t < bs; t++)
            pkv__put_u32(p + 16 + 4 * t, (uint32_t)saved[i].tokens[t]);
    }
}

pkv_status pkv_engine_save_prefix_cache(pkv_engine *e, void *buffer,
                                        size_t capacity, size_t *size)
{
    pkv_status checked =
        pkv__engine_check_size_out(e != NULL ? e->message : NULL, size);
    if (checked != PKV_OK)
        return checked;
    if (e->step.in_step)
        return pkv__engine_fail(e->message, PKV_ERR_BAD_STATE,
                                "save the prefix cache during a step: call "
                                "it after step_end");
    const pkv__backend_config *c = &e->backend_config;
    const pkv__kv *kv = &e->kv;
    uint32_t nb = pkv__kv_num_blocks(kv), bs = pkv__kv_block_size(kv), n = 0;
    uint32_t *blocks = pkv__calloc(&e->alloc, nb, sizeof *blocks);
    pkv__kv_saved *saved = pkv__calloc(&e->alloc, nb, sizeof *saved);
    pkv_status st = blocks != NULL && saved != NULL
                        ? pkv__kv_reachable(kv, &e->alloc, blocks, saved, &n)
                        : PKV_ERR_OUT_OF_MEMORY;
    if (st != PKV_OK) {
        st = pkv__engine_fail(e->message, st,
                              "save the prefix cache: index of %u blocks",
                              (unsigned)nb);
        goto done;
    }
    size_t block_bytes = pkv__backend_swap_block_bytes(c);
    uint32_t head = pkv__format_header_bytes(&FORMAT, &kv->groups);
    size_t kv_at = head + n * entry_bytes(bs);
    size_t content = kv_at + n * block_bytes;
    *size = pkv__format_seal_bytes(e->seal) + content;
    if (buffer == NULL && capacity == 0)
        goto done;
    if (buffer == NULL || capacity < *size) {
        st = pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                              "the prefix cache takes %zu bytes; the buffer "
                              "has %zu",
                              *size, buffer == NULL ? (size_t)0 : capacity);
        goto done;
    }
    uint8_t *out = (uint8_t *)buffer + pkv__format_seal_bytes(e->seal);
    st = pkv__kv_read_blocks(kv, blocks, n, out + kv_at);
    if (st != PKV_OK) {
        st = pkv__engine_fail(e->message, st,
                              "save the prefix cache: reading the KV: %s",
                              pkv_last_error());
        goto done;
    }
    pkv__format_begin(&FORMAT, out, c, &kv->groups);
    pkv__put_u64(out + AT_BLOCK_BYTES, block_bytes);
    pkv__put_u32(out + AT_NUM_ENTRIES, n);
    write_entries(out, head, bs, saved, n);
    st = pkv__format_finish(&FORMAT, e->seal, buffer, content);
    if (st != PKV_OK)
        st = pkv__engine_fail(e->message, st,
                              "save the prefix cache: sealing %zu bytes "
                              "failed",
                              content);
done:
    pkv__free(&e->alloc, blocks, nb, sizeof *blocks);
    pkv__free(&e->alloc, saved, nb, sizeof *saved);
    if (st != PKV_OK)
        *size = st == PKV_ERR_INVALID_ARGUMENT ? *size : 0;
    return st;
}

/* The bytes a saved prefix cache says it has (pkv__format_open's
 * length). */
static uint64_t file_length(const uint8_t *d, uint32_t header_bytes)
{
    uint64_t n = pkv__get_u32(d + AT_NUM_ENTRIES);
    uint64_t bs = pkv__get_u32(d + PKV__AT_BLOCK_SIZE);
    uint64_t block_bytes = pkv__get_u64(d + AT_BLOCK_BYTES);
    if (block_bytes > UINT32_MAX || bs > UINT16_MAX)
        return UINT64_MAX;
    return header_bytes + n * (16 + 4 * bs) + n * block_bytes;
}

/* The opened file's checks beyond its envelope: PKV_OK when an engine of
 * manager kv, config c and params p may load it; else why[] says why
 * not. */
static pkv_status check_file(const pkv__format_view *v, const pkv__kv *kv,
                             const pkv__backend_config *c,
                             const pkv_engine_params *p, char *why,
                             size_t why_size)
{
    const uint8_t *d = v->d;
    const pkv__groups *g = &kv->groups;
    uint32_t l;
    if (!pkv__format_same_layout(&FORMAT, v, g, &l) && l == g->num_layers) {
        snprintf(why, why_size,
                 "saved by an engine %s hybrid memory's groups of layers; "
                 "this one has %s",
                 v->layered ? "with" : "without",
                 pkv__groups_plain(g) ? "none" : "them");
        return PKV_ERR_UNSUPPORTED;
    }
    if (l < g->num_layers) {
        const uint8_t *at = d + FORMAT.header_bytes + (size_t)l * 8;
        snprintf(why, why_size,
                 "saved with layer %u in group %u, arena %u; this engine "
                 "has it in group %u, arena %u",
                 (unsigned)l, (unsigned)pkv__get_u32(at),
                 (unsigned)pkv__get_u32(at + 4), (unsigned)g->layer_group[l],
                 (unsigned)g->layer_arena[l]);
        return PKV_ERR_UNSUPPORTED;
    }
    uint32_t bs = pkv__get_u32(d + PKV__AT_BLOCK_SIZE);
    if (!pkv__format_same_geometry(v, c, 1, why, why_size))
        return PKV_ERR_UNSUPPORTED;
    uint64_t block_bytes = pkv__get_u64(d + AT_BLOCK_BYTES);
    if (block_bytes != pkv__backend_swap_block_bytes(c)) {
        snprintf(why, why_size, "blocks of %llu bytes; this engine's have %zu",
                 (unsigned long long)block_bytes,
                 pkv__backend_swap_block_bytes(c));
        return PKV_ERR_UNSUPPORTED;
    }
    uint32_t n = pkv__get_u32(d + AT_NUM_ENTRIES);
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *at = d + v->header_bytes + i * entry_bytes(bs);
        uint32_t parent = pkv__get_u32(at), group = pkv__get_u32(at + 4);
        /* A group-0 block follows a group-0 block; another group's block
         * names the group-0 block of its tokens. */
        uint32_t parent_group =
            parent == ROOT || parent >= i
                ? 0
                : pkv__get_u32(d + v->header_bytes +
                               parent * entry_bytes(bs) + 4);
        if ((parent != ROOT && parent >= i) ||
            group >= pkv__kv_num_groups(kv) || parent_group != 0 ||
            (group != 0 && parent == ROOT)) {
            snprintf(why, why_size,
                     "block %u of group %u has parent %u; parents come "
                     "first, in group 0",
                     (unsigned)i, (unsigned)group, (unsigned)parent);
            return PKV_ERR_INVALID_ARGUMENT;
        }
        for (uint32_t t = 0; t < bs; t++) {
            uint32_t tok = pkv__get_u32(at + 16 + 4 * t);
            if (tok > INT32_MAX ||
                (p->vocab_size != 0 && tok >= p->vocab_size)) {
                snprintf(why, why_size,
                         "block %u holds token %u; this engine's ids are "
                         "0..%u",
                         (unsigned)i, (unsigned)tok,
                         (unsigned)(p->vocab_size ? p->vocab_size - 1
                                                  : INT32_MAX));
                return PKV_ERR_INVALID_ARGUMENT;
            }
        }
    }
    return PKV_OK;
}

/* The checked file's n entries as saved blocks, their tokens in tokens
 * (n * block_size). */
static void read_entries(const pkv__format_view *v, uint32_t n, uint32_t bs,
                         pkv__kv_saved *saved, int32_t *tokens)
{
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *at = v->d + v->header_bytes + i * entry_bytes(bs);
        int32_t *t = tokens + (size_t)i * bs;
        for (uint32_t j = 0; j < bs; j++)
            t[j] = (int32_t)pkv__get_u32(at + 16 + 4 * j);
        uint32_t parent = pkv__get_u32(at);
        saved[i].parent = parent == ROOT ? PKV__KV_ROOT : parent;
        saved[i].group = pkv__get_u32(at + 4);
        saved[i].salt = pkv__get_u64(at + 8);
        saved[i].tokens = t;
    }
}

pkv_status pkv_engine_load_prefix_cache(pkv_engine *e, const void *data,
                                        size_t size, uint32_t *num_loaded)
{
    if (num_loaded != NULL)
        *num_loaded = 0;
    if (e == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "engine is NULL");
    if (data == NULL)
        return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                "data is NULL");
    if (e->step.in_step)
        return pkv__engine_fail(e->message, PKV_ERR_BAD_STATE,
                                "load the prefix cache during a step: call "
                                "it after step_end");
    const pkv__backend_config *c = &e->backend_config;
    char why[192];
    pkv__format_view v;
    pkv_status st = pkv__format_open(&FORMAT, e->seal, &e->alloc, data, size,
                                     c->num_layers, file_length, &v, why,
                                     sizeof why);
    if (st == PKV_OK)
        st = check_file(&v, &e->kv, c, &e->params, why, sizeof why);
    if (st != PKV_OK) {
        pkv__format_release(&v, &e->alloc);
        return pkv__engine_fail(e->message, st, "load: %s", why);
    }
    uint32_t n = pkv__get_u32(v.d + AT_NUM_ENTRIES), cap = n ? n : 1;
    uint32_t bs = c->block_size, loaded = 0;
    pkv__kv_saved *saved = pkv__calloc(&e->alloc, cap, sizeof *saved);
    int32_t *tokens =
        pkv__calloc(&e->alloc, (size_t)cap * bs, sizeof *tokens);
    st = PKV_ERR_OUT_OF_MEMORY;
    if (saved != NULL && tokens != NULL) {
        read_entries(&v, n, bs, saved, tokens);
        pkv__kv_lock(&e->kv);
        st = pkv__kv_load_saved(&e->kv, &e->alloc, saved, n,
                                v.d + v.header_bytes + n * entry_bytes(bs),
                                &loaded);
        pkv__kv_unlock(&e->kv);
    }
    pkv__free(&e->alloc, saved, cap, sizeof *saved);
    pkv__free(&e->alloc, tokens, (size_t)cap * bs, sizeof *tokens);
    pkv__format_release(&v, &e->alloc);
    if (st != PKV_OK)
        return pkv__engine_fail(e->message, st, "load: %u blocks: %s",
                                (unsigned)n,
                                st == PKV_ERR_OUT_OF_MEMORY
                                    ? "out of memory"
                                    : pkv_last_error());
    if (num_loaded != NULL)
        *num_loaded = loaded;
    PKV__ENGINE_CHECK(e);
    return PKV_OK;
}

pkv_status pkv_engine_reset_prefix_cache(pkv_engine *e)
{
    if (e == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "engine is NULL");
    if (e->step.in_step)
        return pkv__engine_fail(e->message, PKV_ERR_BAD_STATE,
                                "reset the prefix cache during a step: call "
                                "it after step_end");
    if (pkv__kv_in_use(&e->kv))
        return pkv__engine_fail(e->message, PKV_ERR_BAD_STATE,
                                "reset the prefix cache while %u sequences "
                                "run and hold blocks",
                                (unsigned)e->seqs.running.count);
    pkv__kv_lock(&e->kv);
    pkv__kv_clear(&e->kv);
    pkv__kv_unlock(&e->kv);
    pkv__kv_deliver_events(&e->kv);
    PKV__ENGINE_CHECK(e);
    return PKV_OK;
}
