/* SPDX-License-Identifier: MIT */
/*
 * Gemma 3's SentencePiece tokenizer, as llama.cpp runs it for a GGUF whose
 * tokenizer model is "llama" (llm_tokenizer_spm in src/llama-vocab.cpp):
 * user-defined pieces cut out of the text whole, then, in each remaining
 * piece of text, spaces written as U+2581, the characters merged pairwise
 * by piece score, and what is not a piece written as byte tokens <0xXX>.
 */
#ifndef PKV_EXAMPLE_GEMMA3_TOKENIZER_H
#define PKV_EXAMPLE_GEMMA3_TOKENIZER_H

#include "weights.h"

#include <stddef.h>
#include <stdint.h>

typedef struct g3_tokenizer {
    const g3_piece *vocab; /* borrowed: the weight file's, n entries */
    uint32_t n;
    int32_t bos;
    /* Open addressing from piece text to id: id + 1, 0 for empty. */
    uint32_t *slots;
    uint32_t mask; /* number of slots - 1, a power of two - 1 */
    /* The user-defined pieces found whole in the text, longest first. */
    int32_t *special;
    uint32_t num_special;
    int32_t byte_token[256]; /* <0xXX> for each byte, -1 if missing */
    int32_t end_marker; /* "</s>", user-defined but read as control */
} g3_tokenizer;

/* Build the lookups over vocab (n pieces, kept borrowed: it must outlive
 * the tokenizer). 0, or -1 with a message in err. */
int g3_tokenizer_init(g3_tokenizer *t, const g3_piece *vocab, uint32_t n,
                      const g3_file_config *c, char *err, size_t err_size);

void g3_tokenizer_free(g3_tokenizer *t);

/* The ids of text[0, len), after BOS if add_bos. Writes at most max_out of
 * them to out and returns how many there are (max_out 0 asks for the
 * count), or -1 on error (out of memory, a byte with no token). Never more
 * than len + 1. Thread-safe: the tokenizer is only read. */
int g3_tokenize(const g3_tokenizer *t, const char *text, size_t len,
                int add_bos, int32_t *out, uint32_t max_out);

/* The bytes of token id (U+2581 as a space, a byte token as its byte,
 * control and unknown tokens as nothing), like llama.cpp's token_to_piece
 * without special tokens. Writes them to buf, cut at size bytes (64 hold
 * any Gemma piece: the longest has 48), and returns how many it wrote. A
 * byte token may be one byte of a UTF-8 character, which the caller
 * joins with the next ones. */
size_t g3_detokenize(const g3_tokenizer *t, int32_t id, char *buf,
                     size_t size);

#endif
