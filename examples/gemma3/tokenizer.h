/* SPDX-License-Identifier: MIT */
/*
 * Gemma 3's SentencePiece tokenizer, as llama.cpp runs it for a GGUF whose
 * tokenizer model is "llama" (llm_tokenizer_spm in src/llama-vocab.cpp):
 * user-defined pieces (and with G3_PARSE_SPECIAL control and unknown ones)
 * cut out of the text whole, then, in each remaining piece of text, spaces
 * written as U+2581, the characters merged pairwise by piece score, and
 * what is not a piece written as byte tokens <0xXX>.
 * Invalid UTF-8 reads as SentencePiece reads it (tokenizer.c says why).
 */
#ifndef PKV_EXAMPLE_GEMMA3_TOKENIZER_H
#define PKV_EXAMPLE_GEMMA3_TOKENIZER_H

#include "weights.h"

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

typedef struct g3_tokenizer {
    const g3_piece *vocab; /* borrowed: the weight file's, n entries */
    uint32_t n;
    int32_t bos;
    /* Open addressing from piece text to id: id + 1, 0 for empty. */
    uint32_t *slots;
    uint32_t mask; /* number of slots - 1, a power of two - 1 */
    /* The pieces that can be cut whole out of the text (user-defined,
     * control and unknown ones), longest first. */
    int32_t *special;
    uint32_t num_special;
    int32_t byte_token[256]; /* <0xXX> for each byte, -1 if missing */
    int32_t end_marker; /* "</s>", user-defined but read as control */
    /* Ids a byte can become at most: 1, or 3 when a space or a byte of
     * invalid UTF-8 falls back to the three byte tokens of U+2581 or
     * U+FFFD, which have no piece of their own. */
    uint32_t ids_per_byte;
} g3_tokenizer;

/* What g3_tokenize reads besides plain text. */
enum {
    G3_ADD_BOS = 1, /* BOS first */
    /* The texts of control and unknown pieces ("<start_of_turn>",
     * "<eos>", "</s>") read as their ids, as llama.cpp's parse_special
     * does; without it they are plain text, as SentencePiece reads them. */
    G3_PARSE_SPECIAL = 2
};

/* The longest text g3_tokenize reads, in bytes: its ids must fit its int
 * result. */
#define G3_MAX_TEXT ((size_t)INT_MAX / 4)

/* Build the lookups over vocab (n pieces, kept borrowed: it must outlive
 * the tokenizer). 0, or -1 with a message in err. */
int g3_tokenizer_init(g3_tokenizer *t, const g3_piece *vocab, uint32_t n,
                      const g3_file_config *c, char *err, size_t err_size);

void g3_tokenizer_free(g3_tokenizer *t);

/* The ids of text[0, len), read as flags say (G3_ADD_BOS,
 * G3_PARSE_SPECIAL). Writes at most max_out of them to out and returns how
 * many there are (max_out 0 asks for the count), or -1 on error (len past
 * G3_MAX_TEXT, out of memory, a byte with no token). Never more than
 * g3_tokenize_bound(t, len, flags). Thread-safe: the tokenizer is only
 * read. */
int g3_tokenize(const g3_tokenizer *t, const char *text, size_t len,
                unsigned flags, int32_t *out, uint32_t max_out);

/* The most ids g3_tokenize returns for any len bytes (len at most
 * G3_MAX_TEXT): ids_per_byte * len, plus one with G3_ADD_BOS. Every
 * character, space or byte of invalid UTF-8 of the text is one symbol of
 * the merges, a symbol is one piece or the byte tokens of its bytes, and
 * only a space (U+2581) and an invalid byte (U+FFFD) are longer as a
 * symbol than in the text. That is len + 1 for Gemma's vocabulary. */
uint32_t g3_tokenize_bound(const g3_tokenizer *t, size_t len,
                           unsigned flags);

/* Bytes of the valid UTF-8 character at s[0, n), n > 0, or 0 where s
 * starts none (no overlong form, surrogate or code point past U+10FFFF):
 * how g3_tokenize tells the bytes it reads as U+FFFD. */
uint32_t g3_utf8_len(const char *s, size_t n);

/* The bytes of token id (U+2581 as a space, a byte token as its byte,
 * control and unknown tokens as nothing), like llama.cpp's token_to_piece
 * without special tokens. Writes them to buf, cut at size bytes (64 hold
 * any Gemma piece: the longest has 48), and returns how many it wrote. A
 * byte token may be one byte of a UTF-8 character, which the caller
 * joins with the next ones. */
size_t g3_detokenize(const g3_tokenizer *t, int32_t id, char *buf,
                     size_t size);

#endif
