/* SPDX-License-Identifier: MIT */
/*
 * GPT-2's byte-level BPE (bpe.h). It does what Hugging Face's tokenizers
 * does with a ByteLevel pre-tokenizer and a BPE model built from the same
 * vocabulary and merges (tests/smollm2/check_tokenizer.py compares them),
 * and what llama.cpp does for such a GGUF, read in src/llama-vocab.cpp at
 * commit 0c1e570 (the one vendored by llama-cpp-python 0.3.36):
 * llm_tokenizer_bpe_session::tokenize after tokenizer_st_partition. Names
 * in comments are that file's.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "bpe.h"
#include "heap.h"

#include <pcre2.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* GPT-2's pre-tokenizer expression, as Hugging Face's ByteLevel writes
 * it: contractions, letters, numbers and other runs each with one space
 * before them, and runs of white space (the last of a run's spaces left
 * to the next word). llama.cpp's copy lacks the final "\s+", which no
 * text needs: every character is matched before it. */
static const char words_re[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+"
    "|\\s+(?!\\S)|\\s+";
/* SmolLM2's first split: every digit a piece of its own. */
static const char digits_re[] = "\\p{N}";

struct bpe_rank {
    int32_t left, right; /* the pieces merged, -1 in an empty slot */
    int32_t merged;
    uint32_t rank; /* the merge's index in the file: lower goes first */
};

/* ------------------------------------------------------------ the lookups */

/* bytes_to_unicode: each byte's printable stand-in, a code point below
 * 324 (the printable Latin-1 bytes stand for themselves, the others
 * take 256, 257, ... in order). */
static uint32_t stand_in(uint32_t b)
{
    uint32_t shifted = 0;
    for (uint32_t c = 0; c < b; c++)
        shifted += !((c >= '!' && c <= '~') || (c >= 0xa1 && c <= 0xac) ||
                     (c >= 0xae && c <= 0xff));
    if ((b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) ||
        (b >= 0xae && b <= 0xff))
        return b;
    return 256 + shifted;
}

/* The UTF-8 of code point cp below 0x800; its length. */
static uint32_t utf8_of(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xc0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

static uint64_t pair_hash(int32_t left, int32_t right)
{
    uint64_t k = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
}

/* The slot of the merge of left and right: its own, or the empty one
 * where it would go. */
static bpe_rank *rank_slot(const gg_bpe *t, int32_t left, int32_t right)
{
    for (uint32_t i = (uint32_t)pair_hash(left, right) & t->rank_mask;;
         i = (i + 1) & t->rank_mask) {
        bpe_rank *r = &t->ranks[i];
        if (r->left < 0 || (r->left == left && r->right == right))
            return r;
    }
}

static int build_ranks(gg_bpe *t, const gg_merge *merges, uint32_t m,
                       char *err, size_t err_size)
{
    uint32_t size = 1;
    while (size < 2 * m + 2) /* at most half full: short probes */
        size *= 2;
    t->ranks = malloc(size * sizeof *t->ranks);
    char *joined = malloc(2 * (size_t)65536 + 1);
    if (t->ranks == NULL || joined == NULL) {
        free(joined);
        return gg_pieces_fail(err, err_size, "out of memory");
    }
    for (uint32_t i = 0; i < size; i++)
        t->ranks[i] = (bpe_rank){-1, -1, -1, 0};
    t->rank_mask = size - 1;
    for (uint32_t i = 0; i < m; i++) {
        const gg_merge *g = &merges[i];
        memcpy(joined, g->left, g->left_len);
        memcpy(joined + g->left_len, g->right, g->right_len);
        int32_t left = gg_pieces_find(&t->pieces, g->left, g->left_len);
        int32_t right = gg_pieces_find(&t->pieces, g->right, g->right_len);
        int32_t merged = gg_pieces_find(&t->pieces, joined,
                                        g->left_len + g->right_len);
        if (left < 0 || right < 0 || merged < 0) {
            free(joined);
            /* Hugging Face's tokenizers refuses such a file too. */
            return gg_pieces_fail(err, err_size, "merge %u: \"%.*s %.*s\" "
                                  "is not of pieces of the vocabulary", i,
                                  (int)(g->left_len > 40 ? 40 : g->left_len),
                                  g->left,
                                  (int)(g->right_len > 40 ? 40
                                                          : g->right_len),
                                  g->right);
        }
        bpe_rank *r = rank_slot(t, left, right);
        if (r->left < 0) /* a repeated merge keeps its first rank */
            *r = (bpe_rank){left, right, merged, i};
    }
    free(joined);
    return 0;
}

static void *compile(const char *pattern)
{
    int code;
    PCRE2_SIZE at;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP, &code, &at, NULL);
    /* JIT where PCRE2 has it: the interpreter matches the same. */
    if (re != NULL)
        pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    return re;
}

int gg_bpe_init(gg_bpe *t, const gg_piece *vocab, uint32_t n,
                const gg_merge *merges, uint32_t m, const gg_file_config *c,
                char *err, size_t err_size)
{
    memset(t, 0, sizeof *t);
    int smollm = strcmp(c->pre, "smollm") == 0;
    if (!smollm && strcmp(c->pre, "gpt2") != 0)
        return gg_pieces_fail(err, err_size, "pre-tokenizer \"%.40s\" is "
                              "not one this host runs (gpt2, smollm)",
                              c->pre);
    if (c->bos < 0 || (uint32_t)c->bos >= n)
        return gg_pieces_fail(err, err_size, "BOS id %d out of range",
                              c->bos);
    t->vocab = vocab;
    t->bos = c->bos;
    if (gg_pieces_init(&t->pieces, vocab, n, err, err_size) != 0)
        return -1;
    if (build_ranks(t, merges, m, err, err_size) != 0) {
        gg_bpe_free(t);
        return -1;
    }
    for (uint32_t cp = 0; cp < 324; cp++)
        t->byte_of[cp] = -1;
    for (uint32_t b = 0; b < 256; b++) {
        char s[2];
        uint32_t cp = stand_in(b);
        t->byte_of[cp] = (int16_t)b;
        t->byte_token[b] = gg_pieces_find(&t->pieces, s, utf8_of(cp, s));
    }
    t->words = compile(words_re);
    t->digits = smollm ? compile(digits_re) : NULL;
    if (t->words == NULL || (smollm && t->digits == NULL)) {
        gg_bpe_free(t);
        return gg_pieces_fail(err, err_size, "out of memory");
    }
    return 0;
}

void gg_bpe_free(gg_bpe *t)
{
    pcre2_code_free(t->words);
    pcre2_code_free(t->digits);
    free(t->ranks);
    gg_pieces_free(&t->pieces);
    memset(t, 0, sizeof *t);
}

/* ---------------------------------------------------------------- encode */

/* A piece of the text in the merges (llm_symbol): its id, -1 once merged
 * into its left neighbour. */
typedef struct symbol {
    int32_t id;
    int32_t prev, next; /* -1 at the ends */
} symbol;

/* A possible merge of two neighbours (llm_bigram_bpe): stale once either
 * side's id has changed. */
typedef struct bigram {
    uint32_t rank;
    int32_t left, right;
    int32_t left_id, right_id, merged;
} bigram;

/* Scratch memory of one gg_bpe_tokenize call, sized for the whole text:
 * a run of n bytes reads as at most 3n bytes (U+FFFD for each invalid
 * one), each of them a symbol at first, with 3 bigrams per symbol at
 * most (one per neighbour at first, two more per merge). */
typedef struct work {
    const gg_bpe *t;
    int32_t *at; /* per byte of the text, gg_pieces_encode's scratch */
    char *norm;
    symbol *sym;
    gg_heap heap; /* of bigrams */
    pcre2_match_data *digits, *words;
} work;

/* Lower rank first, then the leftmost (as llama.cpp's comparator and
 * Hugging Face's queue). */
static int before(const void *x, const void *y)
{
    const bigram *a = x, *b = y;
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}


/* Queue the merge of symbols left and right if the file has it. */
static void try_merge(work *w, int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return;
    int32_t l = w->sym[left].id, r = w->sym[right].id;
    const bpe_rank *k = rank_slot(w->t, l, r);
    if (k->left >= 0) {
        bigram b = {k->rank, left, right, l, r, k->merged};
        gg_heap_push(&w->heap, &b);
    }
}

/* One piece of the pre-tokenizer, n > 0 bytes: its bytes' stand-ins
 * merged by rank. A byte whose stand-in the vocabulary lacks (SmolLM2's
 * has none for 21 bytes, 0x04 and 0xf5 among them) is left out, and its
 * neighbours merge as if it had not been there, as Hugging Face's BPE
 * does without an unknown token. */
static int encode_piece(work *w, const char *s, size_t n, gg_sink *out)
{
    symbol *sym = w->sym;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = w->t->byte_token[(uint8_t)s[i]];
        if (id >= 0) {
            sym[k] = (symbol){id, (int32_t)k - 1, (int32_t)k + 1};
            k++;
        }
    }
    if (k == 0)
        return 0;
    sym[k - 1].next = -1;
    n = k;
    w->heap.len = 0;
    for (size_t i = 1; i < n; i++)
        try_merge(w, (int32_t)i - 1, (int32_t)i);
    while (w->heap.len > 0) {
        bigram b;
        gg_heap_pop(&w->heap, &b);
        symbol *l = &sym[b.left], *r = &sym[b.right];
        if (l->id != b.left_id || r->id != b.right_id || l->next != b.right)
            continue; /* stale: a side was merged meanwhile */
        l->id = b.merged;
        r->id = -1;
        l->next = r->next;
        if (r->next >= 0)
            sym[r->next].prev = b.left;
        try_merge(w, l->prev, b.left);
        try_merge(w, b.left, l->next);
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next)
        gg_emit(out, sym[i].id);
    return 0;
}

/* Split s[0, n) at the matches of re: each match and each text between
 * two a piece, given to piece (or, with words NULL, to the words
 * expression). */
static int split(work *w, const pcre2_code *re, pcre2_match_data *md,
                 const char *s, size_t n, int last, gg_sink *out);

static int next_stage(work *w, const char *s, size_t n, int last,
                      gg_sink *out)
{
    return last ? encode_piece(w, s, n, out)
                : split(w, w->t->words, w->words, s, n, 1, out);
}

static int split(work *w, const pcre2_code *re, pcre2_match_data *md,
                 const char *s, size_t n, int last, gg_sink *out)
{
    size_t at = 0;
    while (at < n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, at, PCRE2_NO_UTF_CHECK,
                             md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        /* Neither expression matches an empty text. */
        if (rc < 0 || ov[1] <= ov[0])
            return -1;
        if (ov[0] > at && next_stage(w, s + at, ov[0] - at, last, out) != 0)
            return -1;
        if (next_stage(w, s + ov[0], ov[1] - ov[0], last, out) != 0)
            return -1;
        at = ov[1];
    }
    return at < n ? next_stage(w, s + at, n - at, last, out) : 0;
}

/* gg_run_fn: a run of text between special pieces, invalid UTF-8 read as
 * U+FFFD a byte, pre-tokenized, each piece merged. */
static int encode_run(void *user, const char *text, size_t n, gg_sink *out)
{
    work *w = user;
    size_t len = 0;
    for (size_t i = 0; i < n;) {
        uint32_t k = gg_utf8_len(text + i, n - i);
        if (k == 0) {
            memcpy(w->norm + len, GG_REPLACEMENT, GG_REPLACEMENT_LEN);
            len += GG_REPLACEMENT_LEN;
            i++;
        } else {
            memcpy(w->norm + len, text + i, k);
            len += k;
            i += k;
        }
    }
    if (w->t->digits != NULL)
        return split(w, w->t->digits, w->digits, w->norm, len, 0, out);
    return split(w, w->t->words, w->words, w->norm, len, 1, out);
}

uint32_t gg_bpe_bound(size_t len, unsigned flags)
{
    if (len > GG_MAX_TEXT) /* gg_bpe_tokenize refuses longer texts */
        len = GG_MAX_TEXT;
    return 3 * (uint32_t)len + (flags & GG_ADD_BOS ? 1 : 0);
}

int gg_bpe_tokenize(const gg_bpe *t, const char *text, size_t len,
                    unsigned flags, int32_t *out, uint32_t max_out)
{
    /* The count must fit the int result (gg_bpe_bound) and the scratch
     * sizes size_t. */
    if (len > GG_MAX_TEXT || len > SIZE_MAX / (9 * sizeof(bigram)))
        return -1;
    gg_sink s = {out, max_out, 0};
    if (flags & GG_ADD_BOS)
        gg_emit(&s, t->bos);
    if (len == 0)
        return (int)s.count;
    work w = {t, NULL, NULL, NULL, {NULL, 0, 0, NULL}, NULL, NULL};
    w.at = malloc(len * sizeof *w.at);
    w.norm = malloc(3 * len);
    w.sym = malloc(3 * len * sizeof *w.sym);
    w.heap = (gg_heap){malloc(9 * len * sizeof(bigram)), sizeof(bigram), 0,
                        before};
    w.words = pcre2_match_data_create_from_pattern(t->words, NULL);
    w.digits = t->digits != NULL
                   ? pcre2_match_data_create_from_pattern(t->digits, NULL)
                   : NULL;
    int rc = -1;
    if (w.at != NULL && w.norm != NULL && w.sym != NULL &&
        w.heap.data != NULL && w.words != NULL &&
        (t->digits == NULL || w.digits != NULL) &&
        gg_pieces_encode(&t->pieces, text, len, (flags & GG_PARSE_SPECIAL) != 0,
                         w.at, encode_run, &w, &s) == 0)
        rc = (int)s.count;
    pcre2_match_data_free(w.words);
    pcre2_match_data_free(w.digits);
    free(w.at);
    free(w.norm);
    free(w.sym);
    free(w.heap.data);
    return rc;
}

/* ---------------------------------------------------------------- decode */

size_t gg_bpe_detokenize(const gg_bpe *t, int32_t id, char *buf,
                         size_t size)
{
    if (id < 0 || (uint32_t)id >= t->pieces.n)
        return 0;
    const gg_piece *p = &t->vocab[id];
    if (p->type == GG_PIECE_USER_DEFINED)
        return gg_copy_out(buf, size, 0, p->text, p->len);
    if (p->type != GG_PIECE_NORMAL)
        return 0;
    size_t at = 0;
    for (uint32_t i = 0; i < p->len;) {
        uint32_t k = gg_utf8_len(p->text + i, p->len - i);
        uint32_t cp = k == 1   ? (uint8_t)p->text[i]
                      : k == 2 ? ((uint8_t)p->text[i] & 0x1fu) << 6 |
                                     ((uint8_t)p->text[i + 1] & 0x3fu)
                               : 324;
        if (cp < 324 && t->byte_of[cp] >= 0) {
            char c = (char)t->byte_of[cp];
            at = gg_copy_out(buf, size, at, &c, 1);
        } else { /* not a stand-in: kept as it is */
            k = k ? k : 1;
            at = gg_copy_out(buf, size, at, p->text + i, k);
        }
        i += k ? k : 1;
    }
    return at;
}
