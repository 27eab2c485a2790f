/* SPDX-License-Identifier: MIT */
/*
 * Gemma 3's SentencePiece tokenizer (tokenizer.h). It does what llama.cpp
 * does for this vocabulary, read in src/llama-vocab.cpp at commit 0c1e570
 * (the one vendored by llama-cpp-python 0.3.36): llama_vocab::impl::
 * tokenize's LLAMA_VOCAB_TYPE_SPM case, which runs tokenizer_st_partition
 * and then llm_tokenizer_spm_session on each piece of plain text. Names in
 * comments are that file's.
 *
 * One difference: invalid UTF-8. llama.cpp cuts the text into characters
 * by their first byte alone, so a truncated character swallows the bytes
 * after it, even the first byte of an escaped space ("\xc3 " becomes the
 * symbols "\xc3\xe2", "\x96", "\x81": four byte tokens where the text had
 * two bytes), and its ids depend on what follows. SentencePiece, whose ids
 * the model was trained on, reads each byte that starts no valid character
 * as U+FFFD; so does this tokenizer, which keeps one symbol per character
 * of the text, and so a bound on the ids per byte (gg_spm_bound).
 */
#include "spm.h"
#include "heap.h"

#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's space. */
#define SPACE_MARK "\xe2\x96\x81"
#define SPACE_MARK_LEN 3

/* ------------------------------------------------------------ the lookups */

/* The token of each byte for the byte fallback: "<0xXX>", else the byte
 * itself as a piece (byte_to_token); -1 where neither exists, an error
 * only if such a byte needs it. */
static void find_byte_tokens(gg_spm *t)
{
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", (unsigned)b);
        int32_t id = gg_pieces_find(&t->pieces, name, 6);
        if (id < 0) {
            char c = (char)b;
            id = gg_pieces_find(&t->pieces, &c, 1);
        }
        t->byte_token[b] = id;
    }
}

int gg_spm_init(gg_spm *t, const gg_piece *vocab, uint32_t n,
                const gg_file_config *c, char *err, size_t err_size)
{
    memset(t, 0, sizeof *t);
    if (c->add_space_prefix)
        /* Gemma's is off; the space before the first piece of text that
         * llama.cpp would add is not implemented. */
        return gg_pieces_fail(err, err_size,
                              "add_space_prefix is not supported");
    if (c->bos < 0 || (uint32_t)c->bos >= n)
        return gg_pieces_fail(err, err_size, "BOS id %d out of range",
                              c->bos);
    t->vocab = vocab;
    t->bos = c->bos;
    if (gg_pieces_init(&t->pieces, vocab, n, err, err_size) != 0)
        return -1;
    /* llama.cpp's loader makes "</s>" a control token ("control-looking
     * token ... will be overridden", an end-of-generation text) although
     * Gemma's vocabulary has it user-defined, so it is left to the merges
     * in plain text too. */
    t->end_marker = t->pieces.not_plain = gg_pieces_find(&t->pieces, "</s>",
                                                         4);
    find_byte_tokens(t);
    int space = gg_pieces_find(&t->pieces, SPACE_MARK, SPACE_MARK_LEN) >= 0;
    int replacement = gg_pieces_find(&t->pieces, GG_REPLACEMENT,
                                     GG_REPLACEMENT_LEN) >= 0;
    t->ids_per_byte = space && replacement ? 1 : 3;
    return 0;
}

void gg_spm_free(gg_spm *t)
{
    gg_pieces_free(&t->pieces);
    memset(t, 0, sizeof *t);
}

/* ---------------------------------------------------------------- encode */

/* A run of text in the merges (llm_symbol): bytes [start, start + len) of
 * the escaped text; len 0 once merged into its left neighbour. */
typedef struct symbol {
    uint32_t start, len;
    int32_t prev, next; /* -1 at the ends */
} symbol;

/* A possible merge of two neighbours into a piece (llm_bigram_spm). */
typedef struct bigram {
    int32_t left, right;
    float score;
    uint32_t len; /* of the merged text: stale once a side has changed */
} bigram;

/* Scratch memory of one gg_spm_tokenize call, sized for the whole text: a
 * piece of text of n bytes never needs more than 3n escaped bytes, n
 * symbols (split makes one per character, space or invalid byte) and 3n
 * bigrams (n - 1 at first, two more per merge). */
typedef struct work {
    int32_t *at; /* per byte of the text, gg_pieces_encode's scratch */
    char *esc;
    symbol *sym;
    gg_heap heap; /* of bigrams */
} work;

/* Which merge first: the higher score, then the leftmost (as llama.cpp's
 * comparator). Queued merges tied on both share their left symbol, and
 * then all but one are stale, so the merges done come out in the same
 * order whatever heap holds them. */
static int before(const void *x, const void *y)
{
    const bigram *a = x, *b = y;
    return a->score > b->score ||
           (a->score == b->score && a->left < b->left);
}


/* Queue the merge of symbols left and right if their text is a piece,
 * whatever its type, as llama.cpp does (try_add_bigram): so plain text
 * can merge into a control piece such as "<bos>", which SentencePiece
 * itself would not do. */
static void try_merge(const gg_spm *t, work *w, int32_t left,
                      int32_t right)
{
    if (left < 0 || right < 0)
        return;
    const symbol *l = &w->sym[left], *r = &w->sym[right];
    int32_t id = gg_pieces_find(&t->pieces, w->esc + l->start, l->len + r->len);
    if (id < 0)
        return;
    bigram b = {left, right, t->vocab[id].score, l->len + r->len};
    gg_heap_push(&w->heap, &b);
}

/* Cut text[0, n), n > 0, into one symbol per character, writing each into
 * w->esc as SentencePiece's normalizer does: a space as U+2581, a byte
 * that starts no valid character as U+FFFD, the rest as it is. So each
 * byte of the text makes at most one symbol and three escaped bytes. The
 * number of symbols. */
static int32_t split(work *w, const char *text, size_t n)
{
    uint32_t e = 0;
    int32_t count = 0;
    for (size_t i = 0; i < n; count++) {
        const char *c = text + i;
        uint32_t len = gg_utf8_len(c, n - i), used = len;
        if (*c == ' ') {
            c = SPACE_MARK;
            len = SPACE_MARK_LEN;
        } else if (len == 0) {
            c = GG_REPLACEMENT;
            len = GG_REPLACEMENT_LEN;
            used = 1;
        }
        memcpy(w->esc + e, c, len);
        w->sym[count] = (symbol){e, len, count - 1, count + 1};
        e += len;
        i += used;
    }
    w->sym[count - 1].next = -1;
    return count;
}

/* Merge the best-scoring pair of neighbours while one makes a piece
 * (llm_tokenizer_spm_session::tokenize). */
static void merge(const gg_spm *t, work *w, int32_t count)
{
    w->heap.len = 0;
    for (int32_t i = 1; i < count; i++)
        try_merge(t, w, i - 1, i);
    while (w->heap.len > 0) {
        bigram b;
        gg_heap_pop(&w->heap, &b);
        symbol *l = &w->sym[b.left], *r = &w->sym[b.right];
        /* Stale: a side was merged into something else meanwhile. */
        if (l->len == 0 || r->len == 0 || l->len + r->len != b.len)
            continue;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            w->sym[r->next].prev = b.left;
        try_merge(t, w, l->prev, b.left);
        try_merge(t, w, b.left, l->next);
    }
}

/* Encode one piece of plain text, n > 0 bytes: merges, then each symbol
 * as its piece or, if it is none, as byte tokens (resegment: its rev_merge
 * branch never applies, since a merge only ever makes a piece and so only
 * single characters can be left without one). */
static int encode_text(const gg_spm *t, work *w, const char *text,
                       size_t n, gg_sink *s)
{
    int32_t count = split(w, text, n);
    merge(t, w, count);
    for (int32_t i = 0; i >= 0; i = w->sym[i].next) {
        const symbol *y = &w->sym[i];
        int32_t id = gg_pieces_find(&t->pieces, w->esc + y->start, y->len);
        if (id >= 0) {
            gg_emit(s, id);
            continue;
        }
        for (uint32_t j = 0; j < y->len; j++) {
            int32_t b = t->byte_token[(uint8_t)w->esc[y->start + j]];
            if (b < 0)
                return -1;
            gg_emit(s, b);
        }
    }
    return 0;
}

/* gg_run_fn over a work. */
typedef struct run_arg {
    const gg_spm *t;
    work *w;
} run_arg;

static int run_text(void *user, const char *text, size_t n, gg_sink *s)
{
    run_arg *a = user;
    return encode_text(a->t, a->w, text, n, s);
}

uint32_t gg_spm_bound(const gg_spm *t, size_t len, unsigned flags)
{
    if (len > GG_MAX_TEXT) /* gg_spm_tokenize refuses longer texts */
        len = GG_MAX_TEXT;
    return t->ids_per_byte * (uint32_t)len + (flags & GG_ADD_BOS ? 1 : 0);
}

int gg_spm_tokenize(const gg_spm *t, const char *text, size_t len,
                    unsigned flags, int32_t *out, uint32_t max_out)
{
    /* Escaped offsets are 32-bit, the count must fit the int result
     * (gg_spm_bound) and the scratch sizes size_t. */
    if (len > GG_MAX_TEXT || len > SIZE_MAX / (3 * sizeof(bigram)))
        return -1;
    gg_sink s = {out, max_out, 0};
    if (flags & GG_ADD_BOS)
        gg_emit(&s, t->bos);
    if (len == 0)
        return (int)s.count;
    work w = {0};
    w.at = malloc(len * sizeof *w.at);
    w.esc = malloc(len * SPACE_MARK_LEN);
    w.sym = malloc(len * sizeof *w.sym);
    w.heap = (gg_heap){malloc(3 * len * sizeof(bigram)), sizeof(bigram), 0,
                        before};
    run_arg a = {t, &w};
    int rc = -1;
    if (w.at != NULL && w.esc != NULL && w.sym != NULL && w.heap.data != NULL &&
        gg_pieces_encode(&t->pieces, text, len,
                         (flags & GG_PARSE_SPECIAL) != 0, w.at, run_text, &a,
                         &s) == 0)
        rc = (int)s.count;
    free(w.at);
    free(w.esc);
    free(w.sym);
    free(w.heap.data);
    return rc;
}

/* ---------------------------------------------------------------- decode */

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* token_to_piece with special false: SentencePiece's space mark back to a
 * space in a normal piece, user-defined pieces as they are (their spaces
 * are already spaces in the GGUF), byte tokens as their byte, control,
 * unknown and unused ones as nothing. */
size_t gg_spm_detokenize(const gg_spm *t, int32_t id, char *buf,
                         size_t size)
{
    if (id < 0 || (uint32_t)id >= t->pieces.n || id == t->end_marker)
        return 0;
    const gg_piece *p = &t->vocab[id];
    if (p->type == GG_PIECE_USER_DEFINED)
        return gg_copy_out(buf, size, 0, p->text, p->len);
    if (p->type == GG_PIECE_BYTE) {
        int hi = p->len == 6 ? hex_digit(p->text[3]) : -1;
        int lo = p->len == 6 ? hex_digit(p->text[4]) : -1;
        if (hi < 0 || lo < 0) /* not "<0xXX>": the byte itself */
            return gg_copy_out(buf, size, 0, p->text, p->len);
        char c = (char)(hi * 16 + lo);
        return gg_copy_out(buf, size, 0, &c, 1);
    }
    if (p->type != GG_PIECE_NORMAL)
        return 0;
    size_t at = 0;
    for (uint32_t i = 0; i < p->len;) {
        if (p->len - i >= SPACE_MARK_LEN &&
            memcmp(p->text + i, SPACE_MARK, SPACE_MARK_LEN) == 0) {
            at = gg_copy_out(buf, size, at, " ", 1);
            i += SPACE_MARK_LEN;
        } else {
            at = gg_copy_out(buf, size, at, p->text + i, 1);
            i++;
        }
    }
    return at;
}
