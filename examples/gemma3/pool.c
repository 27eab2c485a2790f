/* SPDX-License-Identifier: MIT */
/* Worker threads for parallel loops (pool.h). */
#define _POSIX_C_SOURCE 200809L /* sysconf */
#include "pool.h"

#include <stdlib.h>
#include <unistd.h>

/* Take chunks until none is left; called with the lock held, returns with
 * it held. */
static void work(g3_pool *p)
{
    while (p->next < p->items) {
        uint32_t begin = p->next;
        uint32_t end = p->items - begin < p->chunk ? p->items
                                                    : begin + p->chunk;
        p->next = end;
        g3_task_fn fn = p->fn;
        void *arg = p->arg;
        p->busy++;
        pthread_mutex_unlock(&p->lock);
        fn(arg, begin, end);
        pthread_mutex_lock(&p->lock);
        p->busy--;
    }
    if (p->busy == 0)
        pthread_cond_broadcast(&p->done);
}

static void *worker(void *arg)
{
    g3_pool *p = arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->stopping && p->generation == seen)
            pthread_cond_wait(&p->start, &p->lock);
        if (p->stopping)
            break;
        seen = p->generation;
        work(p);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

int g3_pool_init(g3_pool *p, uint32_t threads)
{
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n < 1 ? 1 : n > 16 ? 16 : (uint32_t)n;
    }
    *p = (g3_pool){.num_threads = 1};
    if (pthread_mutex_init(&p->lock, NULL) != 0)
        return -1;
    pthread_cond_init(&p->start, NULL);
    pthread_cond_init(&p->done, NULL);
    p->workers = calloc(threads, sizeof *p->workers);
    if (p->workers == NULL)
        return g3_pool_free(p), -1;
    for (uint32_t i = 1; i < threads; i++) {
        if (pthread_create(&p->workers[i - 1], NULL, worker, p) != 0)
            break;
        p->num_threads++;
    }
    return 0;
}

void g3_pool_run(g3_pool *p, g3_task_fn fn, void *arg, uint32_t items,
                 uint32_t chunk)
{
    pthread_mutex_lock(&p->lock);
    p->fn = fn;
    p->arg = arg;
    p->items = items;
    p->chunk = chunk ? chunk : 1;
    p->next = 0;
    p->generation++;
    pthread_cond_broadcast(&p->start);
    work(p);
    while (p->busy > 0)
        pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
}

void g3_pool_free(g3_pool *p)
{
    pthread_mutex_lock(&p->lock);
    p->stopping = 1;
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->lock);
    for (uint32_t i = 1; i < p->num_threads; i++)
        pthread_join(p->workers[i - 1], NULL);
    free(p->workers);
    pthread_cond_destroy(&p->start);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->lock);
    p->workers = NULL;
    p->num_threads = 0;
}
