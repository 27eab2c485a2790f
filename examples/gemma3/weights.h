/* SPDX-License-Identifier: MIT */
/*
 * The weight file of the Gemma 3 example host (written once by prepare.py
 * from the GGUF, format in its docstring), mapped read-only: the model's
 * hyperparameters, its tensors by name and its vocabulary.
 */
#ifndef PKV_EXAMPLE_GEMMA3_WEIGHTS_H
#define PKV_EXAMPLE_GEMMA3_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

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
} g3_file_config;

enum { G3_F32 = 0, G3_F16 = 1 };

typedef struct g3_tensor {
    const char *name;
    uint32_t dtype; /* G3_F32 or G3_F16 */
    uint32_t ndim;
    uint64_t shape[4]; /* outermost first; unused dimensions are 1 */
    const void *data;
    uint64_t bytes;
} g3_tensor;

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
    uint32_t num_tensors;
    g3_tensor *tensors;
    g3_piece *vocab; /* vocab_size entries */
    void *map;
    size_t map_size;
} g3_file;

/* Map and check the file: the magic, the version, every table entry and
 * vocabulary entry inside the file. 0, or -1 with a message in err. */
int g3_file_open(g3_file *f, const char *path, char *err, size_t err_size);

/* The tensor named name with the given dtype and shape (ndim entries,
 * outermost first), or NULL with a message in err naming what differs. */
const g3_tensor *g3_file_tensor(const g3_file *f, const char *name,
                                uint32_t dtype, uint32_t ndim,
                                const uint64_t *shape, char *err,
                                size_t err_size);

void g3_file_close(g3_file *f);

/* The weight file's default path, where examples/gemma3/setup.sh writes
 * it: $PKV_CACHE/gemma3/gemma-3-270m.pkvw, PKV_CACHE defaulting to
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
