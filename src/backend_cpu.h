/* SPDX-License-Identifier: MIT */
/*
 * The CPU backend's state, shared by its two files: backend_cpu.c (the
 * backend object, the cache's storage, append and the U8/U4 freeze, copies
 * and swap) and backend_cpu_attend.c (attention over the cache).
 */
#ifndef PKV_BACKEND_CPU_H
#define PKV_BACKEND_CPU_H

#include "attend_math.h"
#include "backend.h"

#include <stddef.h>
#include <stdint.h>

/* One attention task: query rows [r0, r1) of sequence seq over kv head h,
 * the context chunks [c0, c1) of backend_cpu_attend.c. part: the first
 * of the task's partial results (one per chunk, row and head), or
 * PKV__NO_PART when the task takes every chunk its rows see and writes
 * its rows of out itself. */
#define PKV__NO_PART UINT32_MAX
typedef struct pkv__cpu_task {
    uint32_t seq, h, r0, r1, c0, c1, part;
} pkv__cpu_task;

/* A tile (rows of one sequence over one kv head) split into a task per
 * context chunk: its first task and its chunks, whose partial results
 * a merge task folds in order. */
typedef struct pkv__cpu_merge {
    uint32_t task, chunks;
} pkv__cpu_merge;

/* A worker's scratch: the softmax state of a task's (row, head) pairs
 * over the chunks folded so far and over the chunk under way, the
 * chunk's accumulators, and a block's K and V rows converted to f32 once
 * for a task's many quads (pkv__rows.values). */
typedef struct pkv__cpu_scratch {
    pkv__softmax *total; /* [pairs] */
    pkv__softmax *chunk; /* [pairs] */
    float *acc;          /* [pairs][head_dim] */
    float *tile;         /* [K, V][block_size][head_dim] */
} pkv__cpu_scratch;

struct pkv__backend {
    pkv__backend_config cfg;
    pkv__allocator alloc;
    size_t layer_block_bytes;
    size_t head_bytes;   /* one kv head of one block: K part, V part */
    size_t k_part_bytes; /* offset of the V part within a head */
    size_t arena_bytes;  /* one arena: a layer, or a slot of a group */
    uint32_t num_arenas;
    uint8_t **arenas;    /* [num_arenas] (backend.h) */
    float *stages;       /* [num_stages][layer][kv head][K, V][token][ch] */
    size_t stage_floats; /* one tail over every layer */
    /* How K (0) and V (1) parts store their rows, where a quantized
     * part's parameters start in it, and a staging tail's format (f32). */
    pkv__rows_format formats[2];
    size_t lo_at[2], scale_at[2];
    pkv__rows_format tail_format;
    const pkv__attend_math *math; /* the processor's fastest for them */
    uint32_t workers;
    uint32_t tile_rows;          /* query rows of a task at most */
    pkv__cpu_scratch *scratch;   /* [workers] */
    pkv__step step;              /* borrowed from begin_step */
    int have_step;
    pkv__tables_seen checked;    /* block-table rows begin_step checked */
    /* A layer's tasks, partial results and merges, grown to the most a
     * step has needed: no allocation per layer. */
    pkv__cpu_task *tasks;
    size_t tasks_capacity;
    pkv__softmax *part_state; /* [parts] */
    size_t part_state_capacity;
    float *part_acc;          /* [parts][head_dim] */
    size_t part_acc_capacity;
    pkv__cpu_merge *merges;   /* [split tiles] */
    size_t merges_capacity;
};

/* The K (kv 0) or V (kv 1) part of kv head h of block blk. */
static inline uint8_t *pkv__cpu_part(const pkv__backend *b, uint32_t layer,
                                     uint64_t blk, uint32_t h, int kv)
{
    return b->arenas[pkv__backend_arena(&b->cfg, layer)] +
           blk * b->layer_block_bytes + h * b->head_bytes +
           (kv ? b->k_part_bytes : 0);
}

/* The K or V rows of kv head h in staging tail `stage`. */
static inline float *pkv__cpu_stage(const pkv__backend *b, uint32_t stage,
                                    uint32_t layer, uint32_t h, int kv)
{
    const pkv__backend_config *c = &b->cfg;
    size_t rows = ((size_t)layer * c->num_kv_heads + h) * 2u + (size_t)kv;
    return b->stages + stage * b->stage_floats +
           rows * c->block_size * c->head_dim;
}

/* The attend op (backend.h), backend_cpu_attend.c. */
pkv_status pkv__cpu_attend(pkv__backend *b, uint32_t layer, const float *q,
                           float *out, float scale, uint32_t sliding_window);

/* Query rows of a task at most for a GQA group of `group` heads, and the
 * scratch a worker needs for it (backend_cpu_attend.c). */
uint32_t pkv__cpu_tile_rows(uint32_t group);
void pkv__cpu_scratch_free(const pkv__allocator *a, pkv__cpu_scratch *s,
                           size_t pairs, const pkv__backend_config *c);
pkv_status pkv__cpu_scratch_init(const pkv__allocator *a,
                                 pkv__cpu_scratch *s, size_t pairs,
                                 const pkv__backend_config *c);

#endif
