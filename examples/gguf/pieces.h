/* SPDX-License-Identifier: MIT */
/*
 * What the GGUF host's two tokenizers (spm.h, bpe.h) share about a
 * vocabulary: the id of a piece's text, the special pieces that are cut
 * whole out of a text before any merge (llama.cpp's
 * tokenizer_st_partition), and where the ids go.
 */
#ifndef PKV_EXAMPLE_GGUF_PIECES_H
#define PKV_EXAMPLE_GGUF_PIECES_H

#include "weights.h"

#include <stddef.h>
#include <stdint.h>

/* Piece types, as in gg_piece.type (SentencePiece's, which llama.cpp
 * writes for every vocabulary). */
enum {
    GG_PIECE_NORMAL = 1,
    GG_PIECE_UNKNOWN = 2,
    GG_PIECE_CONTROL = 3,
    GG_PIECE_USER_DEFINED = 4,
    GG_PIECE_BYTE = 6
};

typedef struct gg_pieces {
    const gg_piece *vocab; /* borrowed: the weight file's, n entries */
    uint32_t n;
    /* Open addressing from piece text to id: id + 1, 0 for empty. */
    uint32_t *slots;
    uint32_t mask; /* number of slots - 1, a power of two - 1 */
    /* The pieces that can be cut whole out of the text (user-defined,
     * control and unknown ones), longest first. */
    int32_t *special;
    uint32_t num_special;
    /* A user-defined piece read as a control one (Gemma's "</s>"), or -1:
     * left to the merges in plain text. */
    int32_t not_plain;
} gg_pieces;

/* The lookups over vocab (n pieces, at most 2^30, kept borrowed). 0, or
 * -1 with a message in err (out of memory, or two pieces with one text,
 * which llama.cpp refuses too). */
int gg_pieces_init(gg_pieces *p, const gg_piece *vocab, uint32_t n,
                   char *err, size_t err_size);
void gg_pieces_free(gg_pieces *p);

/* The id of the piece whose text is s[0, n), or -1 (text_to_token). */
int32_t gg_pieces_find(const gg_pieces *p, const char *s, size_t n);

/* Where the ids go: written while they fit, counted always. */
typedef struct gg_sink {
    int32_t *out;
    uint32_t max;
    size_t count;
} gg_sink;

void gg_emit(gg_sink *s, int32_t id);

/* A tokenizer's merges over one run of plain text, n > 0 bytes. 0, or -1
 * (a byte with no token, out of memory). */
typedef int (*gg_run_fn)(void *user, const char *text, size_t n,
                         gg_sink *s);

/*
 * The ids of text[0, len): the special pieces cut out first (the
 * user-defined ones but not_plain, and with parse_special the control and
 * unknown ones too), each run of text between them given to run. at is
 * scratch of len entries. 0, or the first -1 of run.
 */
int gg_pieces_encode(const gg_pieces *p, const char *text, size_t len,
                     int parse_special, int32_t *at, gg_run_fn run,
                     void *user, gg_sink *s);

/* Copy s[0, n) to buf[at, size), cut at size; returns the end. */
size_t gg_copy_out(char *buf, size_t size, size_t at, const char *s,
                   size_t n);

/* Format a message into err (size bytes) and return -1. The tokenizers'
 * own rather than weights.c's gg_fail, so that they build alone, without
 * the model file's reader: the fuzz targets link nothing else. */
int gg_pieces_fail(char *err, size_t size, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#endif
