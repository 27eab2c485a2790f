/* SPDX-License-Identifier: MIT */
/* A host's threads lent to pkv (pkv_engine_params.parallel): a pool of
 * pthreads and the caller taking the tasks of a posted batch in turn,
 * for the tests and pkv-bench (lent_pool.c). */
#ifndef PKV_TESTS_LENT_POOL_H
#define PKV_TESTS_LENT_POOL_H

#include "pkv/pkv.h"

#include <pthread.h>
#include <stdint.h>

#define LENT_POOL_MAX_THREADS 63

typedef struct lent_pool lent_pool;

/* What a pool thread is started with: its pool and worker number. */
typedef struct lent_pool_thread {
    lent_pool *pool;
    uint32_t who;
} lent_pool_thread;

struct lent_pool {
    pthread_mutex_t lock;
    pthread_cond_t wake, idle;
    pkv_task_fn task; /* NULL between batches */
    void *arg;
    uint32_t count, next, running;
    int stop;
    uint32_t num_threads;
    pthread_t threads[LENT_POOL_MAX_THREADS];
    lent_pool_thread started[LENT_POOL_MAX_THREADS];
};

/* Start `threads` pool threads (workers 1 to threads; the caller of
 * lent_pool_parallel is worker 0): 0 on success, -1 otherwise (nothing
 * left running). */
int lent_pool_start(lent_pool *p, uint32_t threads);
void lent_pool_stop(lent_pool *p);

/* pkv_parallel_fn; user is the lent_pool. */
void lent_pool_parallel(void *user, pkv_task_fn task, void *arg,
                        uint32_t count);

#endif
