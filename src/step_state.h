/* SPDX-License-Identifier: MIT */
/*
 * The current step's state: the plan, the device actions, the batch the
 * host reads, the backend's step and the arrays behind both, and the
 * per-layer and per-row flags pkv_engine_attend keeps. Sized once at
 * create by max_num_seqs and max_batch_tokens, except the arrays that
 * follow the live sequences (reserved before each step changes anything).
 * Nothing in them survives a step.
 */
#ifndef PKV_STEP_STATE_H
#define PKV_STEP_STATE_H

#include "alloc.h"
#include "backend.h"
#include "inbox.h"
#include "plan.h"
#include "seqs.h"

/* A device operation of the step's plan, run in order before the step's
 * first layer. */
enum pkv__action_kind {
    PKV__ACTION_SWAP_OUT = 1, /* seq's swap_blocks (+ tail) to its buffer */
    PKV__ACTION_COPY_BLOCK = 2, /* copy-on-write: block src to dst */
    PKV__ACTION_SWAP_IN = 3   /* seq's buffer to its table's blocks */
};

typedef struct pkv__action {
    int32_t kind;
    pkv__block_copy copy;
    pkv__seq *seq;
} pkv__action;

typedef struct pkv__step_state {
    uint32_t max_seqs;   /* max_num_seqs */
    uint32_t max_rows;   /* max_batch_tokens */
    uint32_t num_layers;
    uint32_t groups;     /* groups of layers (groups.h) */
    int in_step;
    uint32_t layers_left;
    uint8_t *layer_done;   /* [num_layers] */
    pkv__plan plan;        /* made by sched.c */
    pkv__seq **step_seqs;  /* [max_seqs]: the batch's sequences */
    pkv__action *actions;  /* [max_seqs * (1 + 2 * groups)] */
    pkv__block_copy *copy_pairs; /* as many: a run of copies */
    uint32_t num_actions;
    pkv__step backend_step; /* what the backend reads */
    pkv_batch batch;        /* what the host reads */
    pkv_seq_id *seq_ids;        /* [max_seqs] */
    void **seq_user_data;       /* [max_seqs] */
    uint32_t *query_start;      /* [max_seqs + 1] */
    uint32_t *context_lens;     /* [max_seqs] */
    uint32_t *stages;           /* [max_seqs] */
    const uint32_t **step_tables; /* [groups][max_seqs]: the tables'
                                     blocks (backend.h) */
    uint64_t *table_versions;   /* [groups][max_seqs] */
    pkv_seq_id *preempted;      /* [max_seqs] */
    uint8_t *seq_bad;           /* [max_seqs]: a non-finite K/V row */
    uint32_t *sample_rows;      /* [max_rows]: drafts sample every row */
    pkv_seq_id *sample_seq_ids; /* [max_rows] */
    int32_t *token_ids;         /* [max_rows] */
    uint32_t *positions;        /* [max_rows] */
    uint64_t *slots;            /* [groups][max_rows], packed by the
                                   step's rows (backend.h) */
    uint8_t *row_bad;           /* [max_rows]: non-finite K/V */
    /* Grown before a step by pkv__step_state_reserve, or on demand. */
    pkv_finished *finished;
    size_t finished_capacity;
    void **finished_user_data; /* parallel to finished */
    size_t finished_user_data_capacity;
    uint32_t *hit_blocks; /* an admission's prefix blocks */
    size_t hit_blocks_capacity;
    float *scratch; /* attend: f32 q, k, v, out */
    size_t scratch_capacity;
} pkv__step_state;

/* The arrays for params' sizes; PKV_ERR_OUT_OF_MEMORY leaves what was
 * made for the release. */
pkv_status pkv__step_state_init(pkv__step_state *step,
                                const pkv__allocator *alloc,
                                const pkv_engine_params *params);
void pkv__step_state_release(pkv__step_state *step,
                             const pkv__allocator *alloc);

/* Room for the reports of `ended` sequences, a plan item for each of
 * `live` ones, and an admission of `longest_blocks` prefix blocks. On
 * failure nothing changed that a step reads. */
pkv_status pkv__step_state_reserve(pkv__step_state *step,
                                   const pkv__allocator *alloc,
                                   uint32_t ended, uint32_t live,
                                   uint32_t longest_blocks);

/* Lay the step out, step_seqs[0 .. num_seqs) as the plan's apply left
 * them, as the batch the host reads and the backend's step: the
 * sequences, rows and samples, and each group's tables and slots, group
 * after group (backend.h), read from the KV-cache manager (which plans
 * the step's rollback windows too). */
void pkv__step_state_lay_out(pkv__step_state *step, pkv__kv *kv,
                             uint32_t num_seqs);

/* Report the ended sequences in the batch, free them and tell the inbox
 * they are gone. */
void pkv__step_state_report(pkv__step_state *step, pkv__seqs *seqs,
                            pkv__inbox *inbox);

#endif
