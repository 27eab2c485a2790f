/* SPDX-License-Identifier: MIT */
/*
 * A vocabulary's lookups and its special pieces (pieces.h), as llama.cpp
 * builds them in src/llama-vocab.cpp at commit 0c1e570 (the one vendored
 * by llama-cpp-python 0.3.36): token_to_id, cache_special_tokens and
 * tokenizer_st_partition. Names in comments are that file's.
 */
#include "pieces.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gg_pieces_fail(char *err, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
    return -1;
}

/* FNV-1a: short keys, no need for better. */
static uint32_t hash(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

int32_t gg_pieces_find(const gg_pieces *p, const char *s, size_t n)
{
    for (uint32_t i = hash(s, n) & p->mask;; i = (i + 1) & p->mask) {
        uint32_t slot = p->slots[i];
        if (slot == 0)
            return -1;
        const gg_piece *v = &p->vocab[slot - 1];
        if (v->len == n && memcmp(v->text, s, n) == 0)
            return (int32_t)(slot - 1);
    }
}

static int build_table(gg_pieces *p, char *err, size_t err_size)
{
    uint32_t size = 1;
    while (size < 2 * p->n) /* at most half full: short probes */
        size *= 2;
    p->slots = calloc(size, sizeof *p->slots);
    if (p->slots == NULL)
        return gg_pieces_fail(err, err_size, "out of memory");
    p->mask = size - 1;
    for (uint32_t id = 0; id < p->n; id++) {
        const gg_piece *v = &p->vocab[id];
        /* llama.cpp renames an empty piece "[EMPTY_<id>]"; none here, and
         * one that no text can match is simply left out. */
        if (v->len == 0)
            continue;
        if (gg_pieces_find(p, v->text, v->len) >= 0)
            /* llama.cpp asserts the texts are distinct too. */
            return gg_pieces_fail(err, err_size,
                                  "piece %u repeats an earlier one", id);
        uint32_t i = hash(v->text, v->len) & p->mask;
        while (p->slots[i] != 0)
            i = (i + 1) & p->mask;
        p->slots[i] = id + 1;
    }
    return 0;
}

typedef struct special_key {
    uint32_t len;
    int32_t id;
} special_key;

/* Longest first, as cache_special_tokens; llama.cpp's std::sort leaves
 * pieces of equal length in no set order, ours go by id. That order would
 * only matter for two such pieces that can overlap in a text, and no two
 * of Gemma's or SmolLM2's can (tags are delimited by "<" and ">" or "["
 * and "]", the rest are runs of one character). */
static int longer_first(const void *a, const void *b)
{
    const special_key *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* The pieces cut whole out of the text before the merges
 * (cache_special_tokens): user-defined, control and unknown ones. */
static int find_specials(gg_pieces *p, char *err, size_t err_size)
{
    special_key *keys = malloc(((size_t)p->n + 1) * sizeof *keys);
    if (keys == NULL)
        return gg_pieces_fail(err, err_size, "out of memory");
    uint32_t k = 0;
    for (uint32_t id = 0; id < p->n; id++) {
        const gg_piece *v = &p->vocab[id];
        if ((v->type == GG_PIECE_USER_DEFINED ||
             v->type == GG_PIECE_CONTROL || v->type == GG_PIECE_UNKNOWN) &&
            v->len > 0)
            keys[k++] = (special_key){v->len, (int32_t)id};
    }
    qsort(keys, k, sizeof *keys, longer_first);
    p->special = malloc(((size_t)k + 1) * sizeof *p->special);
    if (p->special == NULL) {
        free(keys);
        return gg_pieces_fail(err, err_size, "out of memory");
    }
    for (uint32_t i = 0; i < k; i++)
        p->special[i] = keys[i].id;
    p->num_special = k;
    free(keys);
    return 0;
}

int gg_pieces_init(gg_pieces *p, const gg_piece *vocab, uint32_t n,
                   char *err, size_t err_size)
{
    memset(p, 0, sizeof *p);
    if (n == 0 || n > (1u << 30))
        return gg_pieces_fail(err, err_size, "vocabulary of %u pieces", n);
    p->vocab = vocab;
    p->n = n;
    p->not_plain = -1;
    if (build_table(p, err, err_size) != 0 ||
        find_specials(p, err, err_size) != 0) {
        gg_pieces_free(p);
        return -1;
    }
    return 0;
}

void gg_pieces_free(gg_pieces *p)
{
    free(p->slots);
    free(p->special);
    memset(p, 0, sizeof *p);
}

void gg_emit(gg_sink *s, int32_t id)
{
    if (s->count < s->max)
        s->out[s->count] = id;
    s->count++;
}

enum { RAW = -1, INSIDE = -2 };

/* No byte of [from, from + n) already taken by a special piece. */
static int all_raw(const int32_t *at, size_t from, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (at[from + i] != RAW)
            return 0;
    return 1;
}

/* Whether the piece is cut whole out of plain text (tokenizer_st_partition
 * with parse_special false): the user-defined ones but not_plain. */
static int cut_from_plain_text(const gg_pieces *p, int32_t id)
{
    return p->vocab[id].type == GG_PIECE_USER_DEFINED && id != p->not_plain;
}

/* Mark where the special pieces are cut out of the text: at[i] is the id
 * of the piece starting at byte i, INSIDE for its other bytes, RAW for
 * bytes left to the merges. tokenizer_st_partition takes the pieces one
 * after the other, longest first, and splits every remaining run of text
 * at each leftmost non-overlapping occurrence; an occurrence is in one
 * remaining run exactly when none of its bytes is taken yet, which is
 * what is checked here instead of keeping a list of runs. (No piece of
 * Gemma's or SmolLM2's has llama.cpp's LSTRIP or RSTRIP attribute: no
 * spaces are eaten around them.) */
static void mark_specials(const gg_pieces *p, const char *text, size_t len,
                          int parse_special, int32_t *at)
{
    for (size_t i = 0; i < len; i++)
        at[i] = RAW;
    for (uint32_t k = 0; k < p->num_special; k++) {
        int32_t id = p->special[k];
        if (!parse_special && !cut_from_plain_text(p, id))
            continue;
        const gg_piece *v = &p->vocab[id];
        size_t i = 0;
        while (v->len <= len - i) {
            const char *hit =
                memchr(text + i, v->text[0], len - i - v->len + 1);
            if (hit == NULL)
                break;
            size_t h = (size_t)(hit - text);
            if (!all_raw(at, h, v->len) ||
                memcmp(hit, v->text, v->len) != 0) {
                i = h + 1;
                continue;
            }
            at[h] = id;
            for (size_t j = 1; j < v->len; j++)
                at[h + j] = INSIDE;
            i = h + v->len;
        }
    }
}

int gg_pieces_encode(const gg_pieces *p, const char *text, size_t len,
                     int parse_special, int32_t *at, gg_run_fn run,
                     void *user, gg_sink *s)
{
    mark_specials(p, text, len, parse_special, at);
    size_t i = 0;
    while (i < len) {
        if (at[i] >= 0) {
            gg_emit(s, at[i]);
            i += p->vocab[at[i]].len;
            continue;
        }
        size_t end = i;
        while (end < len && at[end] == RAW)
            end++;
        if (run(user, text + i, end - i, s) != 0)
            return -1;
        i = end;
    }
    return 0;
}

size_t gg_copy_out(char *buf, size_t size, size_t at, const char *s,
                   size_t n)
{
    if (at >= size)
        return at;
    if (n > size - at)
        n = size - at;
    memcpy(buf + at, s, n);
    return at + n;
}
