/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the GGUF host's byte-level BPE tokenizer
 * (examples/gguf/bpe.c, through tokenizer.c's interface as the host uses
 * it) on any bytes, valid UTF-8 or not, without a model: the vocabulary
 * is a small synthetic one built here (every byte's stand-in, merges
 * across spaces, letters, digits, multi-byte characters and U+FFFD's
 * bytes, tied-looking ranks, a merge repeated, control pieces that
 * overlap, a user-defined piece), in three variants: SMOLLM (digits
 * apart, then GPT-2's expression), GPT2, and HOLES (SMOLLM with some
 * bytes' stand-ins missing, such bytes left out of the text).
 *
 * The first input byte picks the flags (BOS, parse special), the
 * variant, and whether the rest is the text itself or indexes into a
 * table of fragments (control texts, contractions, runs of spaces,
 * digits, letters of several scripts, invalid and truncated UTF-8).
 *
 * Checked: the count is at most the bound; the count-only call, the full
 * call and a call with room for half the ids agree; no write outside the
 * buffers given (ASan); every id is in the vocabulary, BOS first when
 * asked; without parse special the ids decode back to the text with each
 * byte that starts no valid UTF-8 character read as U+FFFD (the oracle's
 * own UTF-8 check, written from RFC 3629's table), and with it to that
 * text less its control pieces' texts, which decode to nothing; in HOLES
 * less the bytes it lacks. Never an error.
 */
#include "fuzz_bpe.h"
#include "fuzz_check.h"
#include "fuzz_text.h"

#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t pkv_fuzz_ops;

enum { SMOLLM, GPT2, HOLES, NUM_VARIANTS };
enum { MAX_PIECES = 512, PIECE_CAP = 32, MAX_MERGES = 64 };

/* ------------------------------------------------------- the vocabularies */

/* A merge of two texts, given as the bytes they stand for. */
typedef struct merge_spec {
    const char *left, *right;
} merge_spec;

/* In rank order. "a" "b" and "b" "c" are neighbours in rank, so which
 * applies first in "abc" goes by rank, then by position. */
static const merge_spec merge_specs[] = {
    {" ", "t"},     {"h", "e"},   {" t", "he"}, {"a", "b"},
    {"b", "c"},     {"ab", "c"},  {" ", " "},   {"  ", " "},
    {"1", "2"},     {"12", "3"},  {"\xc3", "\xa9"}, {"\xef", "\xbf"},
    {"\xef\xbf", "\xbd"}, {" ", "\xef\xbf\xbd"}, {"'", "s"},
    {" ", "a"},     {"a", "a"},   {"aa", "aa"}, {"\n", "\n"},
    {"a", "b"}, /* repeated: keeps its first rank */
    {"<", "|"},     {"i", "m"},   {"<|", "im"},
};

typedef struct vocab {
    gg_piece pieces[MAX_PIECES];
    char text[MAX_PIECES][PIECE_CAP];
    uint32_t n;
    gg_merge merges[MAX_MERGES];
    char merge_text[MAX_MERGES][2][PIECE_CAP];
    uint32_t num_merges;
    gg_file file;
    gg_tokenizer tok;
} vocab;

static vocab vocabs[NUM_VARIANTS];
static int built;

/* GPT-2's bytes_to_unicode, written from its definition: the printable
 * Latin-1 bytes stand for themselves, the others take 256, 257, ... */
static uint32_t stand_in(uint8_t b)
{
    uint32_t next = 256;
    for (uint32_t c = 0; c < 256; c++) {
        int printable = (c >= 0x21 && c <= 0x7e) ||
                        (c >= 0xa1 && c <= 0xac) || c >= 0xae;
        if (c == b)
            return printable ? c : next;
        next += !printable;
    }
    return 0;
}

/* The stand-in text of bytes s[0, n) into out; its length. */
static size_t standin_text(const char *s, size_t n, char *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = stand_in((uint8_t)s[i]);
        if (cp < 0x80) {
            out[k++] = (char)cp;
        } else {
            out[k++] = (char)(0xc0 | cp >> 6);
            out[k++] = (char)(0x80 | (cp & 0x3f));
        }
    }
    return k;
}

static int32_t add(vocab *v, const char *text, size_t len, int32_t type)
{
    for (uint32_t i = 0; i < v->n; i++)
        if (v->pieces[i].len == len && memcmp(v->text[i], text, len) == 0)
            return (int32_t)i;
    CHECK(v->n < MAX_PIECES && len < PIECE_CAP);
    memcpy(v->text[v->n], text, len);
    v->pieces[v->n] = (gg_piece){v->text[v->n], (uint32_t)len, 0, type};
    return (int32_t)v->n++;
}

static void build(int variant)
{
    vocab *v = &vocabs[variant];
    static const char *const control[] = {"<|endoftext|>", "<|im_start|>",
                                          "<|im_end|>", "<|im_start|>x"};
    for (size_t i = 0; i < sizeof control / sizeof *control; i++)
        add(v, control[i], strlen(control[i]), GG_PIECE_CONTROL);
    add(v, "<tag>", 5, GG_PIECE_USER_DEFINED);
    for (int b = 0; b < 256; b++) {
        /* HOLES lacks a few bytes' stand-ins: two control bytes, and one
         * that starts no character (never needed: it reads as U+FFFD). */
        if (variant == HOLES && (b == 0x01 || b == 0x1b || b == 0xf8))
            continue;
        char c = (char)b, s[4];
        add(v, s, standin_text(&c, 1, s), GG_PIECE_NORMAL);
    }
    for (size_t i = 0; i < sizeof merge_specs / sizeof *merge_specs; i++) {
        const merge_spec *m = &merge_specs[i];
        char *l = v->merge_text[v->num_merges][0];
        char *r = v->merge_text[v->num_merges][1];
        size_t ln = standin_text(m->left, strlen(m->left), l);
        size_t rn = standin_text(m->right, strlen(m->right), r);
        char joined[2 * PIECE_CAP];
        memcpy(joined, l, ln);
        memcpy(joined + ln, r, rn);
        add(v, joined, ln + rn, GG_PIECE_NORMAL);
        v->merges[v->num_merges++] = (gg_merge){l, r, (uint32_t)ln,
                                                (uint32_t)rn};
    }
    gg_file_config *c = &v->file.config;
    c->vocab_kind = GG_VOCAB_BPE;
    c->vocab_size = v->n;
    c->num_merges = v->num_merges;
    c->bos = 1;
    c->eos = 2;
    c->pre = variant == GPT2 ? "gpt2" : "smollm";
    v->file.vocab = v->pieces;
    v->file.merges = v->merges;
    char err[128];
    if (gg_tokenizer_init(&v->tok, &v->file, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_bpe: %s\n", err);
        abort();
    }
}

/* --------------------------------------------------------------- oracle */

/* The text as the ids must decode back to it: each byte that starts no
 * valid character as U+FFFD; with parse special, control texts (longest
 * first where they start at one byte) as nothing; with holes, without the
 * bytes HOLES lacks. */
static void normalized(const uint8_t *text, size_t len, int parse_special,
                       int holes, fuzz_buf *out)
{
    static const char *const control[] = {"<|im_start|>x", "<|endoftext|>",
                                          "<|im_start|>", "<|im_end|>"};
    for (size_t i = 0; i < len;) {
        size_t skip = 0;
        for (size_t k = 0; parse_special && !skip && k < 4; k++) {
            size_t n = strlen(control[k]);
            if (n <= len - i && memcmp(text + i, control[k], n) == 0)
                skip = n;
        }
        if (skip) {
            i += skip;
            continue;
        }
        size_t n = fuzz_valid_char(text + i, len - i);
        if (n == 0)
            fuzz_put(out, "\xef\xbf\xbd", 3);
        else if (!(holes && (text[i] == 0x01 || text[i] == 0x1b)))
            fuzz_put(out, text + i, n);
        i += n ? n : 1;
    }
}

/* ------------------------------------------------------------- the text */

static const char *const fragments[] = {
    " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "a", "b", "c", "abc",
    "aaaa", "the", " the", "he", "t", "'s", "'t", "'re", "'ll", "'", "1",
    "12", "123", "9", "\xd9\xa3" /* Arabic-Indic 3 */, "é", "\xc3",
    "\xa9", "日本", "😀", "Ω", "\xef\xbf\xbd", "\xef\xbf", "\xbd",
    "\xe2\x96", "\x80", "\xff", "\xf8", "\xc0\x80", "\xed\xa0\x80",
    "\xf4\x90\x80\x80", "\x01", "\x1b", "<", "|", ">", "<|", "<|im_start|>",
    "<|im_end|>", "<|endoftext|>", "<|im_start|>x", "<tag>", "<ta", "!",
    "?!", "\xc2\xa0" /* no-break space */, "\xe3\x80\x80", "-", "_"};

enum { NUM_FRAGMENTS = sizeof fragments / sizeof *fragments };

/* ------------------------------------------------------------- the checks */

static size_t detokenize(const void *t, int32_t id, char *buf,
                         size_t size)
{
    return gg_detokenize(t, id, buf, size);
}

static void check_decodes_back(const vocab *v, const int32_t *ids, int n,
                               const uint8_t *text, size_t len,
                               int parse_special, int holes)
{
    fuzz_buf want = {0};
    normalized(text, len, parse_special, holes, &want);
    fuzz_check_decodes(detokenize, &v->tok, ids, n, &want);
}

static int tokenize(const void *t, const char *s, size_t len,
                    unsigned flags, int32_t *out, uint32_t max)
{
    return gg_tokenize(t, s, len, flags, out, max);
}

static void check_text(int variant, unsigned flags, const uint8_t *text,
                       size_t len)
{
    const vocab *v = &vocabs[variant];
    const char *s = (const char *)text;
    int count;
    int32_t *ids = fuzz_tokenize_checked(
        tokenize, &v->tok, s, len, flags,
        gg_tokenize_bound(&v->tok, len, flags), v->n, 1, &count);
    CHECK(ids != NULL);
    int bos = (flags & GG_ADD_BOS) != 0;
    check_decodes_back(v, ids + bos, count - bos, text, len,
                       (flags & GG_PARSE_SPECIAL) != 0, variant == HOLES);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!built) {
        for (int i = 0; i < NUM_VARIANTS; i++)
            build(i);
        built = 1;
    }
    pkv_fuzz_ops += size > 0;
    fuzz_run_input(data, size, NUM_VARIANTS, fragments, NUM_FRAGMENTS,
                   check_text);
    return 0;
}
