/* SPDX-License-Identifier: MIT */
/*
 * ggml's threads lent to pkv (lend.h). A batch is posted by storing the
 * node's key in `posted` after its task, argument and count; a helper
 * counts itself in `inside`, then checks `posted` again before reading
 * them. Thread 0 ends a batch by storing 0 in `posted` and waiting for
 * `inside` to reach 0, so (sequentially consistent atomics: either thread
 * 0 sees the helper inside or the helper sees the batch gone) no helper
 * reads a batch while thread 0 writes the next one.
 */
#define _POSIX_C_SOURCE 200809L /* sched_yield */
#include "lend.h"

#include <sched.h>

static void run_tasks(gg_lend *l, uint32_t worker)
{
    while (atomic_load(&l->next) < l->count) {
        uint32_t i = atomic_fetch_add(&l->next, 1);
        if (i >= l->count)
            break;
        l->task(l->arg, i, worker);
        atomic_fetch_add(&l->done, 1);
    }
}

void gg_lend_open(gg_lend *l, uint64_t key)
{
    l->key = key;
}

void gg_lend_close(gg_lend *l)
{
    atomic_store(&l->closed, l->key);
}

void gg_lend_help(gg_lend *l, uint64_t key, uint32_t ith)
{
    while (atomic_load(&l->closed) != key) {
        if (atomic_load(&l->posted) != key) {
            sched_yield();
            continue;
        }
        atomic_fetch_add(&l->inside, 1);
        if (atomic_load(&l->posted) == key)
            run_tasks(l, ith);
        atomic_fetch_sub(&l->inside, 1);
        sched_yield(); /* the batch's last tasks are under way elsewhere */
    }
}

void gg_lend_parallel(void *user, pkv_task_fn task, void *arg,
                      uint32_t count)
{
    gg_lend *l = user;
    l->task = task;
    l->arg = arg;
    l->count = count;
    atomic_store(&l->next, 0);
    atomic_store(&l->done, 0);
    atomic_store(&l->posted, l->key);
    run_tasks(l, 0);
    while (atomic_load(&l->done) != count)
        sched_yield();
    atomic_store(&l->posted, 0);
    while (atomic_load(&l->inside) != 0)
        sched_yield();
}
