/* SPDX-License-Identifier: MIT */
/*
 * An in-process KV store for the engine's store tests and fuzzer: a table
 * of keys and values that several connectors (engines) share, and per
 * connector the operations in flight, which finish on a later poll. Faults
 * on demand: refused or failed operations, operations that never finish,
 * a delay in polls. It also checks the engine's side of the contract:
 * tickets unique, no operation polled or cancelled twice, and (fs_free)
 * nothing left in flight once the engine is gone.
 */
#ifndef PKV_TESTS_STORE_FAKE_H
#define PKV_TESTS_STORE_FAKE_H

#include "pkv/pkv.h"

#include <stddef.h>
#include <stdint.h>

typedef struct fs_entry {
    char key[PKV_STORE_KEY_MAX];
    uint8_t *value;
    size_t size;
    /* When it was written: the place of its save among the table's saves
     * (their calls, as a store that runs them in order writes them; what
     * an LRU store evicts by when nothing reads). */
    uint64_t written;
} fs_entry;

/* The shared table. */
typedef struct fs_data {
    fs_entry *entries;
    size_t count, capacity;
    uint64_t clock; /* saves and puts so far */
} fs_data;

typedef struct fs_op {
    uint64_t ticket;
    int save;
    uint32_t num_keys;
    char *keys; /* num_keys * PKV_STORE_KEY_MAX */
    void *values;
    const void *value;
    size_t value_size;
    uint64_t *sizes;
    uint32_t polls_left;
    uint64_t written; /* a save's place (fs_entry.written) */
} fs_op;

/* One connector. */
typedef struct fs_store {
    fs_data *data;
    fs_op *ops;
    size_t num_ops, capacity;
    /* Faults, for every later operation until changed: */
    uint32_t delay_polls; /* finishes on the (1 + delay)th poll */
    int refuse_loads, refuse_saves; /* load/save return PKV_ERR_STORE */
    int fail_loads, fail_saves;     /* finish with PKV_ERR_STORE */
    int hang_loads;                 /* loads never finish */
    /* Counts. */
    uint64_t loads, saves, cancels, polls, last_ticket;
} fs_store;

void fs_data_free(fs_data *data);
/* The entry of key, or NULL. */
fs_entry *fs_get(fs_data *data, const char *key);
/* Store a copy of size bytes under key (replacing). */
void fs_put(fs_data *data, const char *key, const void *value, size_t size);
/* Remove key (an eviction); nothing if absent. */
void fs_delete(fs_data *data, const char *key);

/* A connector over data, its callbacks written into *store (after
 * pkv_store_init). */
void fs_connect(fs_store *fs, fs_data *data, pkv_store *store);
/* Free the connector; fails the test (abort) if operations are in flight
 * (the engine must have cancelled them). */
void fs_free(fs_store *fs);

#endif
