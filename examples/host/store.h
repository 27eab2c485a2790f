/* SPDX-License-Identifier: MIT */
/*
 * An example host's KV store: --store HOST:PORT, a Redis server through
 * libpkv_redis, so that hosts in other processes share the blocks of the
 * prompts they have in common (pkv.h, "KV store"). Built with hiredis;
 * without it, host_store_open says so.
 */
#ifndef PKV_EXAMPLE_HOST_STORE_H
#define PKV_EXAMPLE_HOST_STORE_H

#include <pkv/pkv.h>

typedef struct host_store {
    pkv_store store; /* for pkv_engine_params.store */
    void *redis;     /* the pkv_redis connector */
    char *model;     /* the model's name, which store.model points at */
} host_store;

/* Connect to spec ("HOST:PORT") for a model named `model` (the weights:
 * see pkv_store.model), copied: the caller's string may go before
 * pkv_engine_create reads it. 0, or -1 after printing why (program names
 * the caller). */
int host_store_open(host_store *s, const char *program, const char *spec,
                    const char *model);

/* How many of keys[0, n) (a prompt's block names, in order:
 * pkv_engine_store_keys) the store holds, leading, into *held; names
 * only, one round trip. 0, or -1 (the store unreachable or failing,
 * built without hiredis). Safe from any thread while engines use the
 * store. */
int host_store_count_prefix(const host_store *s, const char *const *keys,
                            uint32_t n, uint32_t *held);

/* Close the connector (after the engine is destroyed). */
void host_store_close(host_store *s);

/* One summary line of the engine's store counters. */
void host_store_print(const pkv_engine *e);

#endif
