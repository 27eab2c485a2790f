/* SPDX-License-Identifier: MIT */
/*
 * GPT-2's byte-level BPE, as Hugging Face's tokenizers runs it for a
 * vocabulary and merges and as llama.cpp does for a GGUF whose tokenizer
 * model is "gpt2" (llm_tokenizer_bpe in src/llama-vocab.cpp): special
 * pieces cut out of the text whole (user-defined ones always, control
 * ones with GG_PARSE_SPECIAL), each remaining run of text split by the
 * pre-tokenizer's regular expressions (through PCRE2, with Unicode's
 * classes: \p{L}, \p{N}, \s), each byte of a piece written as its
 * printable stand-in (bytes_to_unicode), and the pieces' bytes merged by
 * the rank of the file's merges, lowest first, leftmost first among
 * equals. A byte whose stand-in is not in the vocabulary is left out, as
 * tokenizers leaves it out.
 *
 * Pre-tokenizers: "gpt2" (and "default") GPT-2's expression; "smollm"
 * every digit apart first (\p{N}), then GPT-2's, as SmolLM2's
 * tokenizer.json says (Digits with individual_digits, then ByteLevel).
 * Invalid UTF-8 reads as U+FFFD a byte (text.h).
 */
#ifndef PKV_EXAMPLE_GGUF_BPE_H
#define PKV_EXAMPLE_GGUF_BPE_H

#include "pieces.h"
#include "text.h"
#include "weights.h"

#include <stddef.h>
#include <stdint.h>

typedef struct bpe_rank bpe_rank;

typedef struct gg_bpe {
    const gg_piece *vocab; /* borrowed: the weight file's */
    gg_pieces pieces;
    int32_t bos;
    /* The merges by their two ids: open addressing, rank + 1, 0 empty. */
    bpe_rank *ranks;
    uint32_t rank_mask;
    /* The piece of each byte's stand-in character, -1 if the vocabulary
     * lacks it (such a byte is left out of the text). */
    int32_t byte_token[256];
    /* The byte of each stand-in character (code points 0..323), -1 for
     * the others. */
    int16_t byte_of[324];
    /* The pre-tokenizer's expressions (pcre2_code), NULL when unused. */
    void *digits, *words;
} gg_bpe;

/* Build the lookups over vocab (n pieces) and merges (m), kept borrowed:
 * they must outlive the tokenizer. c->pre names the pre-tokenizer. 0, or
 * -1 with a message in err (an unknown pre-tokenizer, a merge of pieces
 * not in the vocabulary, out of memory). */
int gg_bpe_init(gg_bpe *t, const gg_piece *vocab, uint32_t n,
                const gg_merge *merges, uint32_t m, const gg_file_config *c,
                char *err, size_t err_size);

void gg_bpe_free(gg_bpe *t);

/* As gg_spm_tokenize (spm.h): the ids of text[0, len) read as flags say;
 * at most max_out written, the count returned, -1 on error (len past
 * GG_MAX_TEXT, out of memory). Never more than gg_bpe_bound.
 * Thread-safe: the tokenizer is only read. */
int gg_bpe_tokenize(const gg_bpe *t, const char *text, size_t len,
                    unsigned flags, int32_t *out, uint32_t max_out);

/* The most ids gg_bpe_tokenize returns for len bytes (at most
 * GG_MAX_TEXT): 3 a byte (a byte of invalid UTF-8 reads as U+FFFD's
 * three, and each byte of a piece is one id at most), plus one with
 * GG_ADD_BOS. */
uint32_t gg_bpe_bound(size_t len, unsigned flags);

/* The bytes of token id: each stand-in character as its byte in a normal
 * piece, a user-defined piece as it is, control ones as nothing (as
 * llama.cpp's token_to_piece without special tokens). Writes them to buf,
 * cut at size bytes, and returns how many it wrote. */
size_t gg_bpe_detokenize(const gg_bpe *t, int32_t id, char *buf,
                         size_t size);

#endif
