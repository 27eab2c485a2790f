/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the GGUF host's SentencePiece tokenizer
 * (examples/gguf/spm.c) on any bytes, valid UTF-8 or not, without the
 * model: the vocabulary is a small synthetic one built here, with every kind of
 * piece the tokenizer treats apart (normal pieces that merge, U+2581 and
 * U+FFFD pieces, byte tokens <0x00>..<0xFF>, user-defined pieces, control
 * and unknown pieces, one that plain text can merge into, "</s>", an
 * empty piece, tied scores), in three variants: FULL; BARE, with no piece
 * holding a space, U+2581 or U+FFFD, so a space or an invalid byte falls
 * back to three byte tokens; HOLES, with byte tokens missing (one byte
 * stands as itself, some have no token at all, an error).
 *
 * The first input byte picks the flags (BOS, parse special), the
 * variant, and whether the rest is the text itself or indexes into a
 * table of fragments (control texts, user-defined pieces, invalid and
 * truncated UTF-8) that random bytes rarely spell.
 *
 * Checked: the count is at most gg_spm_bound; the count-only call,
 * the full call and a call with room for half the ids agree; no write
 * outside the buffers given (ASan); every id is in the vocabulary, BOS
 * first when asked; without parse special and without a control piece
 * in the ids (merges can reach one, as llama.cpp's do), the ids decode
 * back to the text as SentencePiece normalizes it: a space as a space (as
 * U+2581's three bytes in BARE), a literal U+2581 as a space in FULL, a
 * byte that starts no valid character as U+FFFD. An error (-1) only where
 * HOLES has no token for a byte.
 */
#include "fuzz_spm.h"
#include "fuzz_check.h"
#include "fuzz_text.h"

#include "spm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t pkv_fuzz_ops;

enum { NORMAL = 1, UNKNOWN = 2, CONTROL = 3, USER_DEFINED = 4, BYTE = 6 };
enum { FULL, BARE, HOLES, NUM_VARIANTS };
enum { MAX_PIECES = 512, PIECE_CAP = 24 };

#define SPACE_MARK "\xe2\x96\x81"
#define REPLACEMENT "\xef\xbf\xbd"

/* ------------------------------------------------------- the vocabularies */

typedef struct piece_spec {
    const char *text;
    int32_t type;
} piece_spec;

/* In score order (first is best), apart from the byte tokens. "ab" and
 * "bc" tie, so which merges first goes by position. */
static const piece_spec common[] = {
    {"<pad>", CONTROL},
    {"<eos>", CONTROL},
    {"<bos>", CONTROL},
    {"<unk>", UNKNOWN},
    {"<mask>", CONTROL},
    {"<start_of_turn>", CONTROL},
    {"<start_of_turn>user", CONTROL}, /* overlaps the one before */
    {"<end_of_turn>", CONTROL},
    {"</s>", USER_DEFINED},
    {"<b>", USER_DEFINED},
    {"</b>", USER_DEFINED},
    {"\n\n", USER_DEFINED},
    {"\t\t", USER_DEFINED},
    {"[multimodal]", USER_DEFINED},
    {"", NORMAL},
    {"abc", NORMAL},
    {"ab", NORMAL},
    {"bc", NORMAL},
    {"ca", NORMAL},
    {"<bo", NORMAL},
    {"s>", NORMAL}, /* "<bo" + "s>" merge into the control "<bos>" */
    {"</", NORMAL}, /* "</" + "s>" merge into "</s>" */
    {"<b", NORMAL},
    {"é", NORMAL},
    {"日", NORMAL},
    {"日本", NORMAL},
    {"😀", NORMAL},
    {"a", NORMAL},
    {"b", NORMAL},
    {"c", NORMAL},
    {"d", NORMAL},
    {"o", NORMAL},
    {"s", NORMAL},
    {"<", NORMAL},
    {">", NORMAL},
    {"/", NORMAL},
    {".", NORMAL},
    {"\n", NORMAL},
    {"\t", NORMAL},
};

/* Pieces with a space, U+2581 or U+FFFD: FULL and HOLES only. */
static const piece_spec spaced[] = {
    {"  ", USER_DEFINED},
    {"   ", USER_DEFINED},
    {SPACE_MARK "a", NORMAL},
    {SPACE_MARK SPACE_MARK, NORMAL},
    {"a" SPACE_MARK, NORMAL},
    {SPACE_MARK "<", NORMAL},
    {SPACE_MARK REPLACEMENT, NORMAL},
    {REPLACEMENT REPLACEMENT, NORMAL},
    {SPACE_MARK, NORMAL},
    {REPLACEMENT, NORMAL},
};

typedef struct vocab {
    gg_piece pieces[MAX_PIECES];
    char text[MAX_PIECES][PIECE_CAP];
    uint32_t n;
    int32_t bos;
    gg_spm tok;
} vocab;

static vocab vocabs[NUM_VARIANTS];
static int built;

static void add(vocab *v, const char *text, size_t len, int32_t type)
{
    CHECK(v->n < MAX_PIECES && len < PIECE_CAP);
    memcpy(v->text[v->n], text, len);
    v->pieces[v->n] = (gg_piece){v->text[v->n], (uint32_t)len,
                                 -(float)v->n, type};
    v->n++;
}

static void add_specs(vocab *v, const piece_spec *s, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        if (strcmp(s[i].text, "<bos>") == 0)
            v->bos = (int32_t)v->n;
        add(v, s[i].text, strlen(s[i].text), s[i].type);
    }
}

static void build(int variant)
{
    vocab *v = &vocabs[variant];
    add_specs(v, common, sizeof common / sizeof *common);
    /* The tie: "bc" scores as "ab". */
    for (uint32_t i = 0; i < v->n; i++)
        if (v->pieces[i].len == 2 && memcmp(v->pieces[i].text, "bc", 2) == 0)
            v->pieces[i].score = v->pieces[i - 1].score;
    if (variant != BARE)
        add_specs(v, spaced, sizeof spaced / sizeof *spaced);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", (unsigned)b);
        if (variant != HOLES || b >= 0x20)
            add(v, b == 'A' && variant == HOLES ? "A" : name,
                b == 'A' && variant == HOLES ? 1 : 6,
                b == 'A' && variant == HOLES ? NORMAL : BYTE);
    }
    gg_file_config c;
    memset(&c, 0, sizeof c);
    c.bos = v->bos;
    char err[128];
    if (gg_spm_init(&v->tok, v->pieces, v->n, &c, err, sizeof err) !=
        0) {
        fprintf(stderr, "fuzz_spm: %s\n", err);
        abort();
    }
    CHECK(v->tok.ids_per_byte == (variant == BARE ? 3u : 1u));
}

/* --------------------------------------------------------------- oracle */

/* The text as the ids must decode back to it. */
static void normalized(const uint8_t *text, size_t len, int variant,
                       fuzz_buf *out)
{
    for (size_t i = 0; i < len;) {
        size_t n = fuzz_valid_char(text + i, len - i);
        int space = text[i] == ' ' ||
                    (n == 3 && memcmp(text + i, SPACE_MARK, 3) == 0);
        if (space && variant != BARE)
            fuzz_put(out, " ", 1);
        else if (text[i] == ' ')
            fuzz_put(out, SPACE_MARK, 3);
        else if (n == 0)
            fuzz_put(out, REPLACEMENT, 3);
        else
            fuzz_put(out, text + i, n);
        i += n ? n : 1;
    }
}

/* ------------------------------------------------------------- the text */

static const char *const fragments[] = {
    " ", "  ", "   ", "a", "b", "c", "abc", "<", ">", "/", "s", "o",
    "<bos>", "<eos>", "<unk>", "<start_of_turn>", "<start_of_turn>user",
    "<end_of_turn>", "</s>", "<b>", "</b>", "[multimodal]", "<0x41>", "A",
    "\n", "\n\n", "\t", "\t\t", "\r", "é", "日本", "😀", SPACE_MARK,
    REPLACEMENT, "\xc3", "\xdf", "\xe9", "\xe2", "\xe2\x96", "\x96", "\x81",
    "\x80", "\xbf", "\xff", "\xfe", "\xf5", "\xc0\x80", "\xc1\xbf",
    "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xf0\x9f\x98",
    "\x01", "\x1f"};

enum { NUM_FRAGMENTS = sizeof fragments / sizeof *fragments };

/* ------------------------------------------------------------- the checks */

static int has_control(const vocab *v, const int32_t *ids, int n)
{
    for (int i = 0; i < n; i++) {
        int32_t type = v->pieces[ids[i]].type;
        if (type == CONTROL || type == UNKNOWN ||
            ids[i] == v->tok.end_marker)
            return 1;
    }
    return 0;
}

static size_t detokenize(const void *t, int32_t id, char *buf,
                         size_t size)
{
    return gg_spm_detokenize(t, id, buf, size);
}

static void check_decodes_back(const vocab *v, const int32_t *ids, int n,
                               const uint8_t *text, size_t len, int variant)
{
    fuzz_buf want = {0};
    normalized(text, len, variant, &want);
    fuzz_check_decodes(detokenize, &v->tok, ids, n, &want);
}

static int tokenize(const void *t, const char *s, size_t len,
                    unsigned flags, int32_t *out, uint32_t max)
{
    return gg_spm_tokenize(t, s, len, flags, out, max);
}

static void check_text(int variant, unsigned flags, const uint8_t *text,
                       size_t len)
{
    const vocab *v = &vocabs[variant];
    const char *s = (const char *)text;
    int count;
    int32_t *ids = fuzz_tokenize_checked(
        tokenize, &v->tok, s, len, flags, gg_spm_bound(&v->tok, len, flags),
        v->n, v->bos, &count);
    if (ids == NULL) {
        CHECK(variant == HOLES);
        return;
    }
    int bos = (flags & GG_ADD_BOS) != 0;
    if (!(flags & GG_PARSE_SPECIAL) &&
        !has_control(v, ids + bos, count - bos))
        check_decodes_back(v, ids + bos, count - bos, text, len, variant);
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
