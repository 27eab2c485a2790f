/* SPDX-License-Identifier: MIT */
/*
 * The Gemma 3 host's model file: llama.cpp's GGUF as shipped, read with
 * ggml's gguf reader and mapped read-only, so the tensors stay in their
 * stored types (Q4_K, Q5_0, Q6_K, Q8_0, f32...) for ggml's products. Every
 * key the host reads is checked for its type and range, and every tensor
 * for lying inside the file, before anything uses them.
 */
#ifndef PKV_EXAMPLE_GEMMA3_WEIGHTS_H
#define PKV_EXAMPLE_GEMMA3_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

struct ggml_context;
struct ggml_tensor;
struct gguf_context;

typedef struct g3_file_config {
    uint32_t num_layers;
    uint32_t dim;          /* embedding length */
    uint32_t ffn_dim;      /* feed-forward length */
    uint32_t num_heads;
    uint32_t num_kv_heads;
    uint32_t key_len;      /* per head */
    uint32_t value_len;
    uint32_t sliding_window;
    uint32_t vocab_size;
    int32_t bos, eos, unk, pad;
    int add_bos;
    int add_space_prefix;
    float rope_base; /* of the full-attention layers */
    float rms_eps;
    uint32_t context_length; /* the model's trained context */
} g3_file_config;

/* A vocabulary entry: SentencePiece's piece, score and type (1 normal,
 * 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte). */
typedef struct g3_piece {
    const char *text; /* not NUL-terminated */
    uint32_t len;
    float score;
    int32_t type;
} g3_piece;

typedef struct g3_file {
    g3_file_config config;
    g3_piece *vocab; /* vocab_size entries; text in gguf's strings */
    struct gguf_context *gguf;
    struct ggml_context *tensors; /* the file's tensors, data in map */
    uint64_t tensor_bytes;        /* of all of them */
    void *map;
    size_t map_size;
} g3_file;

/* Read and check the file: a GGUF of architecture gemma3 with a "llama"
 * (SentencePiece) vocabulary, every tensor inside the file. 0, or -1 with
 * a message in err (naming a truncated file as such). */
int g3_file_open(g3_file *f, const char *path, char *err, size_t err_size);

/* The tensor named name with ndim dimensions ne (ggml's order: the
 * innermost, contiguous one first), in a type ggml multiplies on the CPU
 * (f32 only, when f32 is set), or NULL with a message in err naming what
 * differs. */
struct ggml_tensor *g3_file_tensor(const g3_file *f, const char *name,
                                   uint32_t ndim, const int64_t *ne, int f32,
                                   char *err, size_t err_size);

void g3_file_close(g3_file *f);

/* The model's default path, where examples/gemma3/setup.sh puts it:
 * $PKV_CACHE/gemma3/gemma-3-270m-q4_k_m.gguf, PKV_CACHE defaulting to
 * $XDG_CACHE_HOME/pkv or ~/.cache/pkv. The caller frees it; NULL when out
 * of memory. */
char *g3_default_weights_path(void);

/* Format a message into err (size bytes) and return -1: how the Gemma 3
 * host's loaders report an error. */
int g3_fail(char *err, size_t size, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#endif
