/* SPDX-License-Identifier: MIT */
/*
 * ggml's threads lent to pkv (lend.h). A batch is posted by storing the
 * node's key in `posted` after its task, argument and count; a helper
 * counts itself in `inside`, then checks `posted` again before reading
 * them. Thread 0 ends a batch by storing 0 in `posted` and waiting for
 * `inside` to reach 0, so (sequentially consistent atomics: either thread
 * 0 sees the helper inside or the helper sees the batch gone) no helper
 * reads a batch while thread 0 writes the next one.
 *
 * Every wait spins first (a pause an iteration), as ggml's own barrier
 * does between the nodes, and yields only after LEND_SPINS: a hand-off
 * takes microseconds, and on a machine with more runnable processes than
 * cores a yield at once gives the core to another process for a whole
 * time slice (milliseconds) at every hand-off, 30 a token for SmolLM2,
 * where ggml's spinning threads keep theirs.
 */
#define _POSIX_C_SOURCE 200809L /* sched_yield */
#include "lend.h"

#include <sched.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LEND_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define LEND_PAUSE() __asm__ __volatile__("yield")
#else
#define LEND_PAUSE() ((void)0)
#endif

/* About 0.1-1 ms of pauses (a pause is 10-140 cycles by processor). */
enum { LEND_SPINS = 1u << 14 };

/* One iteration of a wait, the wait's count of them in *spins. */
static void wait_a_moment(uint32_t *spins)
{
    if (*spins < LEND_SPINS) {
        (*spins)++;
        LEND_PAUSE();
    } else {
        sched_yield();
    }
}

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
    uint32_t spins = 0;
    while (atomic_load(&l->closed) != key) {
        if (atomic_load(&l->posted) != key) {
            wait_a_moment(&spins);
            continue;
        }
        atomic_fetch_add(&l->inside, 1);
        if (atomic_load(&l->posted) == key)
            run_tasks(l, ith);
        atomic_fetch_sub(&l->inside, 1);
        /* The batch's last tasks are under way elsewhere; the next batch
         * follows within microseconds. */
        spins = 0;
        wait_a_moment(&spins);
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
    uint32_t spins = 0;
    while (atomic_load(&l->done) != count)
        wait_a_moment(&spins);
    atomic_store(&l->posted, 0);
    while (atomic_load(&l->inside) != 0)
        wait_a_moment(&spins);
}
