/* SPDX-License-Identifier: MIT */
/*
 * The GGUF host's tokenizer: the one its file's vocabulary asks for,
 * SentencePiece's (spm.h: Gemma) or byte-level BPE (bpe.h: SmolLM2,
 * GPT-2-style vocabularies), behind one interface.
 */
#ifndef PKV_EXAMPLE_GGUF_TOKENIZER_H
#define PKV_EXAMPLE_GGUF_TOKENIZER_H

#include "bpe.h"
#include "spm.h"
#include "text.h"
#include "weights.h"

typedef struct gg_tokenizer {
    int32_t kind; /* GG_VOCAB_* */
    uint32_t n;   /* vocabulary entries */
    int32_t bos;
    unsigned add_bos; /* GG_ADD_BOS where the file asks for BOS, else 0 */
    gg_spm spm;
    gg_bpe bpe;
} gg_tokenizer;

/* The tokenizer of the file's vocabulary (borrowed: f must outlive it).
 * 0, or -1 with a message in err. */
int gg_tokenizer_init(gg_tokenizer *t, const gg_file *f, char *err,
                      size_t err_size);
void gg_tokenizer_free(gg_tokenizer *t);

/* The ids of text[0, len) read as flags say (GG_ADD_BOS,
 * GG_PARSE_SPECIAL): at most max_out written to out, the count returned
 * (max_out 0 asks for the count), -1 on error (len past GG_MAX_TEXT, out
 * of memory, a byte with no token). Never more than gg_tokenize_bound.
 * Thread-safe: the tokenizer is only read. */
int gg_tokenize(const gg_tokenizer *t, const char *text, size_t len,
                unsigned flags, int32_t *out, uint32_t max_out);

/* The most ids gg_tokenize returns for len bytes. */
uint32_t gg_tokenize_bound(const gg_tokenizer *t, size_t len,
                           unsigned flags);

/* The bytes of token id, control pieces as nothing, cut at size bytes (64
 * hold any piece of Gemma's or SmolLM2's); how many were written. A
 * piece may end inside a UTF-8 character, which the caller joins with
 * the next ones. */
size_t gg_detokenize(const gg_tokenizer *t, int32_t id, char *buf,
                     size_t size);

/* The id of the piece whose text is s (a control piece's, say), or -1. */
int32_t gg_token_id(const gg_tokenizer *t, const char *s);

#endif
