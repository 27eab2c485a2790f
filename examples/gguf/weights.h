/* SPDX-License-Identifier: MIT */
/*
 * The GGUF host's model file: llama.cpp's GGUF as shipped, read with
 * ggml's gguf reader and mapped read-only, so the tensors stay in their
 * stored types (Q4_K, Q4_1, Q5_0, Q6_K, Q8_0, f32...) for ggml's products.
 * The architecture (general.architecture: gemma3 or llama) says which
 * keys the model has, the tokenizer model (tokenizer.ggml.model: llama,
 * SentencePiece's, or gpt2, byte-level BPE) which vocabulary. Every key
 * the host reads is checked for its type and range, and every tensor for
 * lying inside the file, before anything uses them.
 */
#ifndef PKV_EXAMPLE_GGUF_WEIGHTS_H
#define PKV_EXAMPLE_GGUF_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

struct ggml_context;
struct ggml_tensor;
struct gguf_context;

/* The architectures the host builds a graph for (model.h). */
enum { GG_ARCH_GEMMA3, GG_ARCH_LLAMA };

/* The vocabularies the host tokenizes with (tokenizer.h). */
enum { GG_VOCAB_SPM, GG_VOCAB_BPE };

typedef struct gg_file_config {
    int32_t arch;       /* GG_ARCH_* */
    int32_t vocab_kind; /* GG_VOCAB_* */
    uint32_t num_layers;
    uint32_t dim;          /* embedding length */
    uint32_t ffn_dim;      /* feed-forward length */
    uint32_t num_heads;
    uint32_t num_kv_heads;
    uint32_t key_len;      /* per head */
    uint32_t value_len;
    uint32_t sliding_window; /* 0: none */
    uint32_t vocab_size;
    int32_t bos, eos;
    int32_t unk, pad; /* -1 where the file names none */
    int add_bos;
    int add_space_prefix;
    float rope_base; /* of the full-attention layers */
    float rms_eps;
    uint32_t context_length; /* the model's trained context */
    uint32_t num_merges;     /* BPE's */
    /* tokenizer.ggml.pre, BPE's pre-tokenizer ("gpt2", "smollm", ...), in
     * gguf's strings; "default" where the file names none. */
    const char *pre;
    /* tokenizer.ggml.chat_template, in gguf's strings; NULL if none. */
    const char *chat_template;
} gg_file_config;

/* A vocabulary entry: its text, SentencePiece's score (0 in a BPE
 * vocabulary) and type (1 normal, 2 unknown, 3 control, 4 user-defined,
 * 5 unused, 6 byte). */
typedef struct gg_piece {
    const char *text; /* not NUL-terminated */
    uint32_t len;
    float score;
    int32_t type;
} gg_piece;

/* A BPE merge: the texts of its two pieces, as the file writes them
 * ("left right"), best first. */
typedef struct gg_merge {
    const char *left, *right; /* not NUL-terminated */
    uint32_t left_len, right_len;
} gg_merge;

typedef struct gg_file {
    gg_file_config config;
    gg_piece *vocab; /* vocab_size entries; text in gguf's strings */
    gg_merge *merges; /* num_merges entries (BPE); text in gguf's strings */
    struct gguf_context *gguf;
    struct ggml_context *tensors; /* the file's tensors, data in map */
    uint64_t tensor_bytes;        /* of all of them */
    void *map;
    size_t map_size;
} gg_file;

/* Read and check the file: a GGUF of architecture gemma3 or llama with a
 * "llama" (SentencePiece) or "gpt2" (byte-level BPE) vocabulary, every
 * tensor inside the file. 0, or -1 with a message in err (naming a
 * truncated file as such). */
int gg_file_open(gg_file *f, const char *path, char *err, size_t err_size);

/* The tensor named name with ndim dimensions ne (ggml's order: the
 * innermost, contiguous one first), in a type ggml multiplies on the CPU
 * (f32 only, when f32 is set), or NULL with a message in err naming what
 * differs. */
struct ggml_tensor *gg_file_tensor(const gg_file *f, const char *name,
                                   uint32_t ndim, const int64_t *ne, int f32,
                                   char *err, size_t err_size);

void gg_file_close(gg_file *f);

/* The models examples/gguf/setup.sh caches, by name. */
typedef struct gg_known_model {
    const char *name; /* for --model */
    const char *file; /* under $PKV_CACHE */
} gg_known_model;

extern const gg_known_model gg_known_models[];
extern const uint32_t gg_num_known_models;

/* The cached model named name (gemma3, smollm2): $PKV_CACHE/its file,
 * PKV_CACHE defaulting to $XDG_CACHE_HOME/pkv or ~/.cache/pkv. The caller
 * frees it; NULL when out of memory or name is none of them. */
char *gg_default_weights_path(const char *name);

/* Format a message into err (size bytes) and return -1: how the GGUF
 * host's loaders report an error. */
int gg_fail(char *err, size_t size, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#endif
