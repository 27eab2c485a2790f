/* SPDX-License-Identifier: MIT */
/*
 * Gemma 3 on pkv: the engine's parameters for the model (its geometry and
 * its attention window per layer), and the model as the serving loop's
 * host_model, with attention through pkv_engine_attend.
 */
#ifndef PKV_EXAMPLE_GEMMA3_HOST_H
#define PKV_EXAMPLE_GEMMA3_HOST_H

#include "model.h"
#include "serve.h"

#include <pkv/pkv.h>

/* pkv_engine_params_init, then the model's geometry, layer_windows
 * (pointing into m), vocab_size and max_model_len. */
void g3_engine_params(pkv_engine_params *p, const g3_model *m,
                      uint32_t max_model_len);

/* Sets p->hybrid_memory (pkv.h) to `hybrid` and gives p->num_blocks, a
 * count of blocks over every layer, as many blocks of one group of
 * layers as hold the same tokens: with hybrid memory a block holds one
 * group's layers (Gemma 3: 6 groups of 3). */
void g3_engine_hybrid(pkv_engine_params *p, const g3_model *m, int hybrid);

/* g3_attend_fn over pkv: user is a g3_pkv_attend. Prints the engine's
 * message to stderr on failure. */
typedef struct g3_pkv_attend {
    pkv_engine *engine;
    const g3_file_config *config;
} g3_pkv_attend;

int g3_attend_pkv(void *user, uint32_t layer, uint32_t rows, const float *q,
                  const float *k, const float *v, float *out);

/* The model as the serving loop's host_model (serve.h): the logits of a
 * step's sample rows, on its own scratch of max_rows rows. */
typedef struct g3_host {
    host_model model; /* self points to this struct */
    g3_model *weights;
    g3_scratch scratch;
} g3_host;

/* 0, or -1 out of memory. */
int g3_host_init(g3_host *h, g3_model *m, uint32_t max_rows);
void g3_host_free(g3_host *h);

#endif
