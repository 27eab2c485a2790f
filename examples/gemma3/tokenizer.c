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
 * of the text, and so a bound on the ids per byte (g3_tokenize_bound).
 */
#include "tokenizer.h"

#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* SentencePiece piece types, as in g3_piece.type. */
enum { NORMAL = 1, UNKNOWN = 2, CONTROL = 3, USER_DEFINED = 4, BYTE = 6 };

/* U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's space. */
#define SPACE_MARK "\xe2\x96\x81"
#define SPACE_MARK_LEN 3
/* U+FFFD REPLACEMENT CHARACTER, what a byte of invalid UTF-8 reads as. */
#define REPLACEMENT "\xef\xbf\xbd"
#define REPLACEMENT_LEN 3

/* ------------------------------------------------------------ the lookups */

/* A message in err, and -1. The tokenizer's own rather than weights.c's
 * g3_fail, so that it builds alone, without the model file's reader: the
 * fuzz target (tests/fuzz/fuzz_tokenizer.c) links nothing else. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int fail(char *err, size_t size, const char *fmt, ...)
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

/* The id of the piece whose text is s[0, n), or -1 (text_to_token). */
static int32_t lookup(const g3_tokenizer *t, const char *s, size_t n)
{
    for (uint32_t i = hash(s, n) & t->mask;; i = (i + 1) & t->mask) {
        uint32_t slot = t->slots[i];
        if (slot == 0)
            return -1;
        const g3_piece *p = &t->vocab[slot - 1];
        if (p->len == n && memcmp(p->text, s, n) == 0)
            return (int32_t)(slot - 1);
    }
}

static int build_table(g3_tokenizer *t, char *err, size_t err_size)
{
    uint32_t size = 1;
    while (size < 2 * t->n) /* at most half full: short probes */
        size *= 2;
    t->slots = calloc(size, sizeof *t->slots);
    if (t->slots == NULL)
        return fail(err, err_size, "out of memory");
    t->mask = size - 1;
    for (uint32_t id = 0; id < t->n; id++) {
        const g3_piece *p = &t->vocab[id];
        /* llama.cpp renames an empty piece "[EMPTY_<id>]"; none here, and
         * one that no text can match is simply left out. */
        if (p->len == 0)
            continue;
        if (lookup(t, p->text, p->len) >= 0)
            /* llama.cpp asserts the texts are distinct too. */
            return fail(err, err_size, "piece %u repeats an earlier one",
                        id);
        uint32_t i = hash(p->text, p->len) & t->mask;
        while (t->slots[i] != 0)
            i = (i + 1) & t->mask;
        t->slots[i] = id + 1;
    }
    return 0;
}

/* The token of each byte for the byte fallback: "<0xXX>", else the byte
 * itself as a piece (byte_to_token); -1 where neither exists, an error
 * only if such a byte needs it. */
static void find_byte_tokens(g3_tokenizer *t)
{
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", (unsigned)b);
        int32_t id = lookup(t, name, 6);
        if (id < 0) {
            char c = (char)b;
            id = lookup(t, &c, 1);
        }
        t->byte_token[b] = id;
    }
}

typedef struct special_key {
    uint32_t len;
    int32_t id;
} special_key;

/* Longest first, as cache_special_tokens; llama.cpp's std::sort leaves
 * pieces of equal length in no set order, ours go by id. That order would
 * only matter for two such pieces that can overlap in a text, and no two
 * of Gemma's can (tags are delimited by "<" and ">" or "[" and "]", the
 * rest are runs of one character). */
static int longer_first(const void *a, const void *b)
{
    const special_key *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Whether the piece is cut whole out of plain text (tokenizer_st_partition
 * with parse_special false): the user-defined ones. llama.cpp's loader
 * makes "</s>" a control token ("control-looking token ... will be
 * overridden", an end-of-generation text) although Gemma's vocabulary has
 * it user-defined, so it is left to the merges too. */
static int cut_from_plain_text(const g3_tokenizer *t, int32_t id)
{
    return t->vocab[id].type == USER_DEFINED && id != t->end_marker;
}

/* The pieces cut whole out of the text before the merges
 * (cache_special_tokens): the user-defined ones always, the control and
 * unknown ones with G3_PARSE_SPECIAL. */
static int find_specials(g3_tokenizer *t, char *err, size_t err_size)
{
    t->end_marker = lookup(t, "</s>", 4);
    special_key *keys = malloc((t->n + 1) * sizeof *keys);
    if (keys == NULL)
        return fail(err, err_size, "out of memory");
    uint32_t k = 0;
    for (uint32_t id = 0; id < t->n; id++) {
        const g3_piece *p = &t->vocab[id];
        if ((p->type == USER_DEFINED || p->type == CONTROL ||
             p->type == UNKNOWN) &&
            p->len > 0)
            keys[k++] = (special_key){p->len, (int32_t)id};
    }
    qsort(keys, k, sizeof *keys, longer_first);
    t->special = malloc((k + 1) * sizeof *t->special);
    if (t->special == NULL) {
        free(keys);
        return fail(err, err_size, "out of memory");
    }
    for (uint32_t i = 0; i < k; i++)
        t->special[i] = keys[i].id;
    t->num_special = k;
    free(keys);
    return 0;
}

int g3_tokenizer_init(g3_tokenizer *t, const g3_piece *vocab, uint32_t n,
                      const g3_file_config *c, char *err, size_t err_size)
{
    memset(t, 0, sizeof *t);
    if (n == 0 || n > (1u << 30))
        return fail(err, err_size, "vocabulary of %u pieces", n);
    if (c->add_space_prefix)
        /* Gemma's is off; the space before the first piece of text that
         * llama.cpp would add is not implemented. */
        return fail(err, err_size, "add_space_prefix is not supported");
    if (c->bos < 0 || (uint32_t)c->bos >= n)
        return fail(err, err_size, "BOS id %d out of range", c->bos);
    t->vocab = vocab;
    t->n = n;
    t->bos = c->bos;
    if (build_table(t, err, err_size) != 0 ||
        find_specials(t, err, err_size) != 0) {
        g3_tokenizer_free(t);
        return -1;
    }
    find_byte_tokens(t);
    t->ids_per_byte = lookup(t, SPACE_MARK, SPACE_MARK_LEN) >= 0 &&
                              lookup(t, REPLACEMENT, REPLACEMENT_LEN) >= 0
                          ? 1
                          : 3;
    return 0;
}

void g3_tokenizer_free(g3_tokenizer *t)
{
    free(t->slots);
    free(t->special);
    memset(t, 0, sizeof *t);
}

/* ---------------------------------------------------------------- encode */

/* Where the ids go: written while they fit, counted always. */
typedef struct sink {
    int32_t *out;
    uint32_t max;
    size_t count;
} sink;

static void emit(sink *s, int32_t id)
{
    if (s->count < s->max)
        s->out[s->count] = id;
    s->count++;
}

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

/* Scratch memory of one g3_tokenize call, sized for the whole text: a
 * piece of text of n bytes never needs more than 3n escaped bytes, n
 * symbols (split makes one per character, space or invalid byte) and 3n
 * bigrams (n - 1 at first, two more per merge). */
typedef struct work {
    int32_t *at; /* per byte of the text, see mark_specials */
    char *esc;
    symbol *sym;
    bigram *heap;
    size_t heap_len;
} work;

/* Which merge first: the higher score, then the leftmost (as llama.cpp's
 * comparator). Queued merges tied on both share their left symbol, and
 * then all but one are stale, so the merges done come out in the same
 * order whatever heap holds them. */
static int before(const bigram *a, const bigram *b)
{
    return a->score > b->score ||
           (a->score == b->score && a->left < b->left);
}

static void heap_push(work *w, bigram b)
{
    size_t i = w->heap_len++;
    while (i > 0 && before(&b, &w->heap[(i - 1) / 2])) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = b;
}

static bigram heap_pop(work *w)
{
    bigram top = w->heap[0];
    bigram last = w->heap[--w->heap_len];
    size_t i = 0, n = w->heap_len;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && before(&w->heap[c + 1], &w->heap[c]))
            c++;
        if (!before(&w->heap[c], &last))
            break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n > 0)
        w->heap[i] = last;
    return top;
}

/* Queue the merge of symbols left and right if their text is a piece,
 * whatever its type, as llama.cpp does (try_add_bigram): so plain text
 * can merge into a control piece such as "<bos>", which SentencePiece
 * itself would not do. */
static void try_merge(const g3_tokenizer *t, work *w, int32_t left,
                      int32_t right)
{
    if (left < 0 || right < 0)
        return;
    const symbol *l = &w->sym[left], *r = &w->sym[right];
    int32_t id = lookup(t, w->esc + l->start, l->len + r->len);
    if (id < 0)
        return;
    bigram b = {left, right, t->vocab[id].score, l->len + r->len};
    heap_push(w, b);
}

/* As SentencePiece's DecodeUTF8. */
uint32_t g3_utf8_len(const char *s, size_t n)
{
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    const uint8_t *u = (const uint8_t *)s;
    if (u[0] < 0x80)
        return 1;
    uint32_t len = u[0] >= 0xf0 ? 4 : u[0] >= 0xe0 ? 3 : u[0] >= 0xc0 ? 2 : 0;
    if (len == 0 || u[0] > 0xf4 || len > n)
        return 0;
    uint32_t cp = u[0] & (0x7fu >> len);
    for (uint32_t i = 1; i < len; i++) {
        if ((u[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (u[i] & 0x3fu);
    }
    if (cp < least[len] || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
        return 0;
    return len;
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
        uint32_t len = g3_utf8_len(c, n - i), used = len;
        if (*c == ' ') {
            c = SPACE_MARK;
            len = SPACE_MARK_LEN;
        } else if (len == 0) {
            c = REPLACEMENT;
            len = REPLACEMENT_LEN;
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
static void merge(const g3_tokenizer *t, work *w, int32_t count)
{
    w->heap_len = 0;
    for (int32_t i = 1; i < count; i++)
        try_merge(t, w, i - 1, i);
    while (w->heap_len > 0) {
        bigram b = heap_pop(w);
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
static int encode_text(const g3_tokenizer *t, work *w, const char *text,
                       size_t n, sink *s)
{
    int32_t count = split(w, text, n);
    merge(t, w, count);
    for (int32_t i = 0; i >= 0; i = w->sym[i].next) {
        const symbol *y = &w->sym[i];
        int32_t id = lookup(t, w->esc + y->start, y->len);
        if (id >= 0) {
            emit(s, id);
            continue;
        }
        for (uint32_t j = 0; j < y->len; j++) {
            int32_t b = t->byte_token[(uint8_t)w->esc[y->start + j]];
            if (b < 0)
                return -1;
            emit(s, b);
        }
    }
    return 0;
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

/* Mark where the special pieces are cut out of the text (the user-defined
 * ones, and with parse_special the control and unknown ones too): at[i] is
 * the id of the piece starting at byte i, INSIDE for its other bytes, RAW
 * for bytes left to the merges. tokenizer_st_partition takes the pieces
 * one after the other, longest first, and splits every remaining run of
 * text at each leftmost non-overlapping occurrence; an occurrence is in
 * one remaining run exactly when none of its bytes is taken yet, which
 * is what is checked here instead of keeping a list of runs. (No Gemma
 * piece has llama.cpp's LSTRIP or RSTRIP attribute: no spaces are eaten
 * around them.) */
static void mark_specials(const g3_tokenizer *t, const char *text,
                          size_t len, int parse_special, int32_t *at)
{
    for (size_t i = 0; i < len; i++)
        at[i] = RAW;
    for (uint32_t k = 0; k < t->num_special; k++) {
        int32_t id = t->special[k];
        if (!parse_special && !cut_from_plain_text(t, id))
            continue;
        const g3_piece *p = &t->vocab[id];
        size_t i = 0;
        while (p->len <= len - i) {
            const char *hit =
                memchr(text + i, p->text[0], len - i - p->len + 1);
            if (hit == NULL)
                break;
            size_t h = (size_t)(hit - text);
            if (!all_raw(at, h, p->len) ||
                memcmp(hit, p->text, p->len) != 0) {
                i = h + 1;
                continue;
            }
            at[h] = id;
            for (size_t j = 1; j < p->len; j++)
                at[h + j] = INSIDE;
            i = h + p->len;
        }
    }
}

static int encode_all(const g3_tokenizer *t, work *w, const char *text,
                      size_t len, int parse_special, sink *s)
{
    mark_specials(t, text, len, parse_special, w->at);
    size_t i = 0;
    while (i < len) {
        if (w->at[i] >= 0) {
            emit(s, w->at[i]);
            i += t->vocab[w->at[i]].len;
            continue;
        }
        size_t end = i;
        while (end < len && w->at[end] == RAW)
            end++;
        if (encode_text(t, w, text + i, end - i, s) != 0)
            return -1;
        i = end;
    }
    return 0;
}

uint32_t g3_tokenize_bound(const g3_tokenizer *t, size_t len,
                           unsigned flags)
{
    if (len > G3_MAX_TEXT) /* g3_tokenize refuses longer texts */
        len = G3_MAX_TEXT;
    return t->ids_per_byte * (uint32_t)len + (flags & G3_ADD_BOS ? 1 : 0);
}

int g3_tokenize(const g3_tokenizer *t, const char *text, size_t len,
                unsigned flags, int32_t *out, uint32_t max_out)
{
    /* Escaped offsets are 32-bit, the count must fit the int result
     * (g3_tokenize_bound) and the scratch sizes size_t. */
    if (len > G3_MAX_TEXT || len > SIZE_MAX / (3 * sizeof(bigram)))
        return -1;
    sink s = {out, max_out, 0};
    if (flags & G3_ADD_BOS)
        emit(&s, t->bos);
    if (len == 0)
        return (int)s.count;
    work w = {0};
    w.at = malloc(len * sizeof *w.at);
    w.esc = malloc(len * SPACE_MARK_LEN);
    w.sym = malloc(len * sizeof *w.sym);
    w.heap = malloc(3 * len * sizeof *w.heap);
    int rc = -1;
    if (w.at != NULL && w.esc != NULL && w.sym != NULL && w.heap != NULL &&
        encode_all(t, &w, text, len, (flags & G3_PARSE_SPECIAL) != 0,
                   &s) == 0)
        rc = (int)s.count;
    free(w.at);
    free(w.esc);
    free(w.sym);
    free(w.heap);
    return rc;
}

/* ---------------------------------------------------------------- decode */

static size_t copy_out(char *buf, size_t size, size_t at, const char *s,
                       size_t n)
{
    if (at >= size)
        return at;
    if (n > size - at)
        n = size - at;
    memcpy(buf + at, s, n);
    return at + n;
}

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
size_t g3_detokenize(const g3_tokenizer *t, int32_t id, char *buf,
                     size_t size)
{
    if (id < 0 || (uint32_t)id >= t->n || id == t->end_marker)
        return 0;
    const g3_piece *p = &t->vocab[id];
    if (p->type == USER_DEFINED)
        return copy_out(buf, size, 0, p->text, p->len);
    if (p->type == BYTE) {
        int hi = p->len == 6 ? hex_digit(p->text[3]) : -1;
        int lo = p->len == 6 ? hex_digit(p->text[4]) : -1;
        if (hi < 0 || lo < 0) /* not "<0xXX>": the byte itself */
            return copy_out(buf, size, 0, p->text, p->len);
        char c = (char)(hi * 16 + lo);
        return copy_out(buf, size, 0, &c, 1);
    }
    if (p->type != NORMAL)
        return 0;
    size_t at = 0;
    for (uint32_t i = 0; i < p->len;) {
        if (p->len - i >= SPACE_MARK_LEN &&
            memcmp(p->text + i, SPACE_MARK, SPACE_MARK_LEN) == 0) {
            at = copy_out(buf, size, at, " ", 1);
            i += SPACE_MARK_LEN;
        } else {
            at = copy_out(buf, size, at, p->text + i, 1);
            i++;
        }
    }
    return at;
}
