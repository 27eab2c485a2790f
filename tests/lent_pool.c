/* SPDX-License-Identifier: MIT */
/* A host's threads lent to pkv (lent_pool.h). */
#define _POSIX_C_SOURCE 200809L

#include "lent_pool.h"

#include <string.h>

/* Under the lock: run tasks of the batch until none is left to take. */
static void run_tasks(lent_pool *p, uint32_t who)
{
    while (p->task != NULL && p->next < p->count) {
        uint32_t i = p->next++;
        pkv_task_fn task = p->task;
        void *arg = p->arg;
        p->running++;
        pthread_mutex_unlock(&p->lock);
        task(arg, i, who);
        pthread_mutex_lock(&p->lock);
        if (--p->running == 0 && p->next == p->count)
            pthread_cond_broadcast(&p->idle);
    }
}

static void *pool_thread(void *arg)
{
    const lent_pool_thread *a = arg;
    lent_pool *p = a->pool;
    pthread_mutex_lock(&p->lock);
    while (!p->stop) {
        run_tasks(p, a->who);
        if (!p->stop)
            pthread_cond_wait(&p->wake, &p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

void lent_pool_parallel(void *user, pkv_task_fn task, void *arg,
                        uint32_t count)
{
    lent_pool *p = user;
    pthread_mutex_lock(&p->lock);
    p->task = task;
    p->arg = arg;
    p->count = count;
    p->next = 0;
    pthread_cond_broadcast(&p->wake);
    run_tasks(p, 0);
    while (p->running > 0 || p->next < p->count)
        pthread_cond_wait(&p->idle, &p->lock);
    p->task = NULL;
    pthread_mutex_unlock(&p->lock);
}

int lent_pool_start(lent_pool *p, uint32_t threads)
{
    memset(p, 0, sizeof *p);
    if (threads > LENT_POOL_MAX_THREADS ||
        pthread_mutex_init(&p->lock, NULL) != 0)
        return -1;
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->idle, NULL);
    for (uint32_t t = 0; t < threads; t++) {
        p->started[t] = (lent_pool_thread){p, t + 1};
        if (pthread_create(&p->threads[t], NULL, pool_thread,
                           &p->started[t]) != 0) {
            lent_pool_stop(p);
            return -1;
        }
        p->num_threads = t + 1;
    }
    return 0;
}

void lent_pool_stop(lent_pool *p)
{
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (uint32_t t = 0; t < p->num_threads; t++)
        pthread_join(p->threads[t], NULL);
    pthread_cond_destroy(&p->idle);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->lock);
}
