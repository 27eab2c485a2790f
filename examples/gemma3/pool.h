/* SPDX-License-Identifier: MIT */
/*
 * A fixed set of worker threads that run one parallel loop at a time: the
 * Gemma 3 host's matrix products split their output rows over the cores.
 */
#ifndef PKV_EXAMPLE_GEMMA3_POOL_H
#define PKV_EXAMPLE_GEMMA3_POOL_H

#include <pthread.h>
#include <stdint.h>

/* One task of a loop: run items [begin, end). */
typedef void (*g3_task_fn)(void *arg, uint32_t begin, uint32_t end);

typedef struct g3_pool {
    uint32_t num_threads; /* workers plus the calling thread */
    pthread_t *workers;
    pthread_mutex_t lock;
    pthread_cond_t start, done;
    /* The loop being run, under lock. */
    g3_task_fn fn;
    void *arg;
    uint32_t items, chunk, next, busy;
    uint64_t generation;
    int stopping;
} g3_pool;

/* threads: 0 for one per online CPU (at most 16). 0 or -1. */
int g3_pool_init(g3_pool *p, uint32_t threads);

/* Run fn over [0, items) in chunks of chunk items, on every thread, and
 * return when all are done. The calling thread works too. */
void g3_pool_run(g3_pool *p, g3_task_fn fn, void *arg, uint32_t items,
                 uint32_t chunk);

void g3_pool_free(g3_pool *p);

#endif
