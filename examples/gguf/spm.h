/* SPDX-License-Identifier: MIT */
/*
 * Gemma 3's SentencePiece tokenizer, as llama.cpp runs it for a GGUF whose
 * tokenizer model is "llama" (llm_tokenizer_spm in src/llama-vocab.cpp):
 * user-defined pieces (and with GG_PARSE_SPECIAL control and unknown ones)
 * cut out of the text whole, then, in each remaining piece of text, spaces
 * written as U+2581, the characters merged pairwise by piece score, and
 * what is not a piece written as byte tokens <0xXX>.
 * Invalid UTF-8 reads as SentencePiece reads it (spm.c says why).
 */
#ifndef PKV_EXAMPLE_GGUF_SPM_H
#define PKV_EXAMPLE_GGUF_SPM_H

#include "pieces.h"
#include "text.h"
#include "weights.h"

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gg_spm {
    const gg_piece *vocab; /* borrowed: the weight file's */
    gg_pieces pieces;
    int32_t bos;
    int32_t byte_token[256]; /* <0xXX> for each byte, -1 if missing */
    int32_t end_marker; /* "</s>", user-defined but read as control */
    /* Ids a byte can become at most: 1, or 3 when a space or a byte of
     * invalid UTF-8 falls back to the three byte tokens of U+2581 or
     * U+FFFD, which have no piece of their own. */
    uint32_t ids_per_byte;
} gg_spm;

/* Build the lookups over vocab (n pieces, kept borrowed: it must outlive
 * the tokenizer). 0, or -1 with a message in err. */
int gg_spm_init(gg_spm *t, const gg_piece *vocab, uint32_t n,
                const gg_file_config *c, char *err, size_t err_size);

void gg_spm_free(gg_spm *t);

/* The ids of text[0, len), read as flags say (GG_ADD_BOS,
 * GG_PARSE_SPECIAL). Writes at most max_out of them to out and returns how
 * many there are (max_out 0 asks for the count), or -1 on error (len past
 * GG_MAX_TEXT, out of memory, a byte with no token). Never more than
 * gg_spm_bound(t, len, flags). Thread-safe: the tokenizer is only
 * read. */
int gg_spm_tokenize(const gg_spm *t, const char *text, size_t len,
                    unsigned flags, int32_t *out, uint32_t max_out);

/* The most ids gg_spm_tokenize returns for any len bytes (len at most
 * GG_MAX_TEXT): ids_per_byte * len, plus one with GG_ADD_BOS. Every
 * character, space or byte of invalid UTF-8 of the text is one symbol of
 * the merges, a symbol is one piece or the byte tokens of its bytes, and
 * only a space (U+2581) and an invalid byte (U+FFFD) are longer as a
 * symbol than in the text. That is len + 1 for Gemma's vocabulary. */
uint32_t gg_spm_bound(const gg_spm *t, size_t len, unsigned flags);

/* The bytes of token id (U+2581 as a space, a byte token as its byte,
 * control and unknown tokens as nothing), like llama.cpp's token_to_piece
 * without special tokens. Writes them to buf, cut at size bytes (64 hold
 * any Gemma piece: the longest has 48), and returns how many it wrote. A
 * byte token may be one byte of a UTF-8 character, which the caller
 * joins with the next ones. */
size_t gg_spm_detokenize(const gg_spm *t, int32_t id, char *buf,
                         size_t size);

#endif
