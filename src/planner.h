/* SPDX-License-Identifier: MIT */
/* The step planner (planner.c): what the next step runs, as a plan
 * (plan.h), from const views of the KV-cache manager and of the engine's
 * sequences. */
#ifndef PKV_PLANNER_H
#define PKV_PLANNER_H

#include "plan.h"
#include "seqs.h"

/* What the planner reads. */
typedef struct pkv__plan_input {
    const pkv__kv *kv;     /* the blocks, groups and swap bytes in use */
    const pkv__seqs *seqs; /* the lists and the tenants' blocks */
    const pkv_engine_params *params;
    uint32_t watermark_blocks; /* blocks admission leaves free */
    uint64_t step;             /* the number of the step it plans */
    uint64_t drafts_step; /* the step the latest drafts were proposed for */
    int store;            /* a KV store is set: a waiting sequence waits for
                             its answer (store/engine_store.h) */
    const pkv__allocator *alloc; /* the plan's arrays grow with it */
} pkv__plan_input;

/* Plan the step: running sequences, swapped, waiting, drafts, writing
 * only the plan. PKV_ERR_OUT_OF_MEMORY when the plan's own arrays cannot
 * grow. */
pkv_status pkv__planner_run(pkv__plan *plan, const pkv__plan_input *in);

#endif
