/* SPDX-License-Identifier: MIT */
/*
 * What the GGUF host's tokenizers share: how a text is read (the flags),
 * the longest text they take, and what counts as a valid UTF-8
 * character. A byte that starts no valid character reads as U+FFFD in
 * both, as SentencePiece reads it and as Python's tokenizers reads a
 * text decoded with one replacement character a byte.
 */
#ifndef PKV_EXAMPLE_GGUF_TEXT_H
#define PKV_EXAMPLE_GGUF_TEXT_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

/* What a tokenizer reads besides plain text. */
enum {
    GG_ADD_BOS = 1, /* BOS first */
    /* The texts of control pieces ("<start_of_turn>", "<|im_end|>") read
     * as their ids, as llama.cpp's parse_special does; without it they
     * are plain text. */
    GG_PARSE_SPECIAL = 2
};

/* The longest text a tokenizer reads, in bytes: its ids must fit its int
 * result (at most 3 ids a byte, and BOS). */
#define GG_MAX_TEXT ((size_t)INT_MAX / 4)

/* U+FFFD REPLACEMENT CHARACTER, what a byte of invalid UTF-8 reads as. */
#define GG_REPLACEMENT "\xef\xbf\xbd"
#define GG_REPLACEMENT_LEN 3

/* Bytes of the valid UTF-8 character at s[0, n), n > 0, or 0 where s
 * starts none (no overlong form, surrogate or code point past U+10FFFF):
 * as SentencePiece's DecodeUTF8. */
uint32_t gg_utf8_len(const char *s, size_t n);

#endif
