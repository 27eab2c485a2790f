/* SPDX-License-Identifier: MIT */
/* What the tokenizer fuzz targets' oracles share (fuzz_spm.c,
 * fuzz_bpe.c): their own UTF-8 check and a growing byte buffer. */
#ifndef PKV_FUZZ_TEXT_H
#define PKV_FUZZ_TEXT_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of the valid UTF-8 character at s[0, n), 0 if none: written from
 * RFC 3629's table of well-formed sequences, apart from the host's
 * examples/gguf/text.c. */
size_t fuzz_valid_char(const uint8_t *s, size_t n);

typedef struct fuzz_buf {
    char *data;
    size_t len, cap;
} fuzz_buf;

/* Append s[0, n); aborts when out of memory. */
void fuzz_put(fuzz_buf *b, const void *s, size_t n);

/* A tokenizer's call: the ids of s[0, len) as flags say, at most max
 * written, the count returned (-1 on error). */
typedef int (*fuzz_tokenize_fn)(const void *t, const char *s, size_t len,
                                unsigned flags, int32_t *out, uint32_t max);

/* The checks both targets make of a call: the count at most bound; the
 * count-only call, the full call and one with room for half the ids
 * agree (the full one into exactly the bound's room, so that ASan sees a
 * write past it); every id below vocab; bos first when flags ask for it
 * (flag 1). The ids (the caller frees them) and their count, or NULL
 * where the tokenizer refused the text (count -1). */
int32_t *fuzz_tokenize_checked(fuzz_tokenize_fn fn, const void *t,
                               const char *s, size_t len, unsigned flags,
                               uint32_t bound, uint32_t vocab, int32_t bos,
                               int *count);

/* A tokenizer's decoding of one id into buf, cut at size; its length. */
typedef size_t (*fuzz_detokenize_fn)(const void *t, int32_t id, char *buf,
                                     size_t size);

/* The n ids decode back to want, which is freed. */
void fuzz_check_decodes(fuzz_detokenize_fn fn, const void *t,
                        const int32_t *ids, int n, fuzz_buf *want);

/* A check of one text: its variant of the vocabulary, its flags. */
typedef void (*fuzz_check_fn)(int variant, unsigned flags,
                              const uint8_t *text, size_t len);

/* What an input means to both targets: its first byte the flags (its
 * bits 0-1), the variant (bits 2-4, modulo variants) and whether the rest
 * is the text itself or (bit 5) indexes into the fragments, whose texts,
 * put together, are the text given to check. */
void fuzz_run_input(const uint8_t *data, size_t size, int variants,
                    const char *const *fragments, size_t num_fragments,
                    fuzz_check_fn check);

#endif
