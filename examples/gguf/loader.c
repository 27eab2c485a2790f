/* SPDX-License-Identifier: MIT */
/* Loading a model's tensors by name, for every architecture (graph.h):
 * model.c loads what all share, gemma3.c and llama.c what each adds. */
#include "graph.h"

#include <stdio.h>

struct ggml_tensor *gg_load_vector(gg_loader *l, const char *name, int64_t n)
{
    return gg_file_tensor(&l->m->file, name, 1, &n, 1, l->err, l->err_size);
}

struct ggml_tensor *gg_load_matrix(gg_loader *l, const char *name,
                                   int64_t in, int64_t out)
{
    int64_t ne[2] = {in, out};
    return gg_file_tensor(&l->m->file, name, 2, ne, 0, l->err, l->err_size);
}

struct ggml_tensor *gg_load_layer_tensor(gg_loader *l, uint32_t i,
                                         const char *name, int64_t n,
                                         int64_t out)
{
    char full[64];
    snprintf(full, sizeof full, "blk.%u.%s.weight", i, name);
    return out ? gg_load_matrix(l, full, n, out)
               : gg_load_vector(l, full, n);
}
