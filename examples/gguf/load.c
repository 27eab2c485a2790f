/* SPDX-License-Identifier: MIT */
/* Loading the GGUF host's model tensors (load.h). */
#include "load.h"

#include "weights.h"

#include <stdio.h>

struct ggml_tensor *gg_load_tensor(gg_loader *l, const char *name, int64_t n,
                                   int64_t out)
{
    if (out == 0)
        return gg_file_tensor(&l->m->file, name, 1, &n, 1, l->err,
                              l->err_size);
    /* A row of n values per output, in its stored type. */
    int64_t ne[2] = {n, out};
    return gg_file_tensor(&l->m->file, name, 2, ne, 0, l->err, l->err_size);
}

struct ggml_tensor *gg_load_layer_tensor(gg_loader *l, uint32_t i,
                                         const char *name, int64_t n,
                                         int64_t out)
{
    char full[64];
    snprintf(full, sizeof full, "blk.%u.%s.weight", i, name);
    return gg_load_tensor(l, full, n, out);
}
