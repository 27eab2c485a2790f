/* SPDX-License-Identifier: MIT */
/*
 * Loading the GGUF host's model tensors (load.c): what the loader
 * (model.c) and each architecture's own tensors (gemma3.c, llama.c)
 * share, below both.
 */
#ifndef PKV_EXAMPLE_GGUF_LOAD_H
#define PKV_EXAMPLE_GGUF_LOAD_H

#include "model.h"

#include <stddef.h>
#include <stdint.h>

typedef struct gg_loader {
    gg_model *m;
    char *err;
    size_t err_size;
} gg_loader;

/* The tensor `name`: an f32 vector of n, or a matrix of n x out in its
 * stored type when out is not 0; NULL with a message. */
struct ggml_tensor *gg_load_tensor(gg_loader *l, const char *name, int64_t n,
                                   int64_t out);

/* Layer i's tensor "blk.<i>.<name>.weight", as gg_load_tensor. */
struct ggml_tensor *gg_load_layer_tensor(gg_loader *l, uint32_t i,
                                         const char *name, int64_t n,
                                         int64_t out);

#endif
