/* SPDX-License-Identifier: MIT */
/*
 * The GGUF host's model on pkv: the engine for the model (its geometry,
 * its attention window per layer, the cache asked for), and the model as
 * the serving loop's host_model, with attention through
 * pkv_engine_attend.
 */
#ifndef PKV_EXAMPLE_GGUF_HOST_H
#define PKV_EXAMPLE_GGUF_HOST_H

#include "model.h"
#include "serve.h"
#include "tokenizer.h"

#include <pkv/pkv.h>

/* A model file loaded with its tokenizer. */
typedef struct gg_loaded {
    gg_model model;
    gg_tokenizer tok;
    const char *weights; /* the file's path */
    char *path;          /* the cached model's path, when named */
} gg_loaded;

/* Load weights (a GGUF's path), or else the model examples/gguf/setup.sh
 * caches under name (NULL: gemma3), its matrix products on threads
 * threads (0: every core), and its tokenizer. 0, or -1 after printing
 * why on stderr, prefixed with program. */
int gg_load(gg_loaded *l, const char *program, const char *name,
            const char *weights, uint32_t threads);
void gg_unload(gg_loaded *l);

/* Tokens a block holds, in every engine the host makes. */
#define GG_BLOCK_SIZE 16

/* The KV store's name for the weights (pkv_store.model): this
 * architecture, this file (its name), this way of running it; hosts
 * that name it alike share blocks. */
void gg_store_model_name(const gg_model *m, const char *weights, char *name,
                         size_t size);

/* pkv_engine_params_init, then the model's geometry, layer_windows
 * (pointing into m), vocab_size and max_model_len. */
void gg_engine_params(pkv_engine_params *p, const gg_model *m,
                      uint32_t max_model_len);

/* The cache a run asks for. */
typedef struct gg_kv_choice {
    int32_t dtype;     /* pkv_kv_dtype */
    int32_t key_quant; /* pkv_quant_group of U8/U4 keys */
    int32_t backend;   /* pkv_backend_kind */
    int every_token;   /* kv_memory PKV_KV_MEMORY_EVERY_TOKEN (pkv.h) */
    pkv_kv_events_fn events; /* pkv_engine_params.kv_events, or NULL */
    void *events_user;
} gg_kv_choice;

/* The engine of every run of the host (serving, scoring): the model's
 * geometry (gg_engine_params), the cache kv asks for (hybrid memory
 * unless every_token), blocks blocks of GG_BLOCK_SIZE tokens over every
 * layer, max_rows rows a step, warnings on stderr, and store
 * when not NULL. Its parameters in *p. NULL after printing why. */
pkv_engine *gg_engine_create(pkv_engine_params *p, const gg_model *m,
                             const gg_kv_choice *kv, uint32_t max_model_len,
                             uint32_t blocks, uint32_t max_rows,
                             const pkv_store *store);

/* gg_attend_fn over pkv: user is a gg_pkv_attend. Prints the engine's
 * message to stderr on failure. */
typedef struct gg_pkv_attend {
    pkv_engine *engine;
    const gg_file_config *config;
} gg_pkv_attend;

int gg_attend_pkv(void *user, uint32_t layer, uint32_t rows, const float *q,
                  const float *k, const float *v, float *out);

/* The model as the serving loop's host_model (serve.h): the logits of a
 * step's sample rows, on its own scratch of max_rows rows. */
typedef struct gg_host {
    host_model model; /* self points to this struct */
    gg_model *weights;
    gg_scratch scratch;
} gg_host;

/* 0, or -1 out of memory. */
int gg_host_init(gg_host *h, gg_model *m, uint32_t max_rows);
void gg_host_free(gg_host *h);

#endif
