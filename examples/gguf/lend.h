/* SPDX-License-Identifier: MIT */
/*
 * ggml's threads lent to pkv. Inside a layer's attention node every thread
 * of the graph's pool is present: thread 0 calls pkv_engine_attend, whose
 * CPU backend hands its tasks to gg_lend_parallel
 * (pkv_engine_params.parallel), and the other threads run them beside
 * thread 0 until it closes the node.
 */
#ifndef PKV_EXAMPLE_GGUF_LEND_H
#define PKV_EXAMPLE_GGUF_LEND_H

#include <pkv/pkv.h>

#include <stdatomic.h>
#include <stdint.h>

typedef struct gg_lend {
    /* The node whose batch of tasks is on offer, 0 between batches. */
    _Atomic uint64_t posted;
    _Atomic uint64_t closed; /* the last node thread 0 has left */
    _Atomic uint32_t inside; /* helpers between joining and leaving a batch */
    _Atomic uint32_t next;   /* the batch's next task */
    _Atomic uint32_t done;   /* the batch's tasks finished */
    /* The batch: written by thread 0 while no helper is inside. */
    pkv_task_fn task;
    void *arg;
    uint32_t count;
    uint64_t key; /* the node thread 0 is in */
} gg_lend;

/* Thread 0, entering a node with a key no earlier node had (never 0):
 * pkv_engine_attend may call gg_lend_parallel until gg_lend_close. */
void gg_lend_open(gg_lend *l, uint64_t key);
void gg_lend_close(gg_lend *l);

/* Thread ith > 0 in the node with this key: runs tasks of the batches
 * posted in it, as worker ith; returns once thread 0 has closed it. */
void gg_lend_help(gg_lend *l, uint64_t key, uint32_t ith);

/* pkv_parallel_fn (user: the gg_lend), on thread 0 inside an open node:
 * runs tasks as worker 0 beside the helpers and returns when every task
 * has run and no helper is left in the batch. */
void gg_lend_parallel(void *user, pkv_task_fn task, void *arg,
                      uint32_t count);

#endif
