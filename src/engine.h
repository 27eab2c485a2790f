/* SPDX-License-Identifier: MIT */
/* The engine object: what pkv_engine_* functions hold between calls. */
#ifndef PKV_ENGINE_H
#define PKV_ENGINE_H

#include "backend.h"
#include "error.h"
#include "inbox.h"
#include "lock.h"
#include "map.h"
#include "plan.h"
#include "store/engine_store.h"

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

struct pkv_engine {
    pkv__allocator alloc;
    pkv_engine_params params; /* defaults resolved */
    uint64_t block_bytes;     /* one block over all layers */
    pkv__pool pool;
    pkv__prefix prefix;
    const pkv__backend_ops *ops;
    pkv__backend *backend;
    pkv__backend_config backend_config;
    pkv__inbox inbox;

    /* Sequences, by state. waiting and swapped are kept in policy order;
     * running in order of admission. ended: not yet reported. */
    pkv__seq_list waiting;
    pkv__seq_list running;
    pkv__seq_list swapped;
    pkv__seq_list ended;
    pkv__map seqs_by_id;    /* id -> pkv__seq *, every sequence in the
                               lists (reserved with them) */
    pkv__map tenant_blocks; /* tenant -> blocks its tables hold, tenants
                               with blocks only (at most max_num_seqs) */
    uint32_t unswept; /* 1 << state of each list that holds sequences
                         ended by pkv__engine_end_later */
    uint32_t watermark_blocks;
    uint32_t longest_tokens; /* most tokens any sequence ever held: sizes
                                the step arrays without a scan */
    uint64_t admissions;
    uint64_t drafts_step; /* the step the latest pkv_seq_propose was for:
                             in the others, no sequence has drafts */
    uint64_t swap_used; /* host bytes held by swapped sequences */
    uint32_t *free_stages; /* U8 staging tails not in use */
    uint32_t num_free_stages;
    /* U8 rollback window (params.u8_rollback_blocks > 0, else NULL):
     * [max_num_seqs][u8_rollback_blocks], the logical block whose f32
     * rows window tail pkv__engine_window_stage(stage, j) holds, for the
     * sequence that holds working tail `stage`, or PKV__NO_BLOCK. */
    uint32_t *window_blocks;

    /* The current step. */
    int in_step;
    uint32_t layers_left;
    uint8_t *layer_done;   /* [num_layers] */
    uint32_t *layer_windows; /* [num_layers]: each layer's window (0: all),
                                params.layer_windows points here */
    pkv__seq **step_seqs;  /* [max_num_seqs]: the batch's sequences */
    pkv__action *actions;  /* [3 * max_num_seqs] */
    pkv__block_copy *copy_pairs; /* [3 * max_num_seqs]: a run of copies */
    uint32_t num_actions;
    pkv__step step;
    pkv_batch batch;
    pkv_seq_id *seq_ids;        /* [max_num_seqs] */
    void **seq_user_data;       /* [max_num_seqs] */
    uint32_t *query_start;      /* [max_num_seqs + 1] */
    uint32_t *context_lens;     /* [max_num_seqs] */
    uint32_t *stages;           /* [max_num_seqs] */
    uint32_t *sample_rows;      /* [max_num_seqs] */
    pkv_seq_id *sample_seq_ids; /* [max_num_seqs] */
    pkv_seq_id *preempted;      /* [max_num_seqs] */
    int32_t *token_ids;         /* [max_batch_tokens] */
    uint32_t *positions;        /* [max_batch_tokens] */
    uint64_t *slots;            /* [max_batch_tokens] */
    uint32_t *row_windows;      /* [max_batch_tokens], with window_blocks */
    const uint32_t **step_tables; /* [max_num_seqs]: the tables' blocks */
    uint64_t *table_versions;     /* [max_num_seqs] */
    pkv_finished *finished;     /* grown on demand */
    size_t finished_capacity;
    void **finished_user_data;  /* parallel to finished */
    size_t finished_user_data_capacity;
    pkv__plan plan;             /* the step's, made by sched.c */
    uint32_t *hit_blocks;       /* an admission's prefix blocks */
    size_t hit_blocks_capacity;
    float *scratch;             /* attend: f32 q, k, v, out */
    size_t scratch_capacity;
    uint8_t *row_bad;           /* [max_batch_tokens]: non-finite K/V */
    uint8_t *seq_bad;           /* [max_num_seqs] */

    pkv__engine_store store; /* params.store's state */

    pkv_engine_stats totals; /* the cumulative counters */
    /* PKV__ERROR_MAX bytes behind a pointer, so that a function taking a
     * const engine (a getter) can still report its failure there; written
     * and read under error_lock, since pkv_seq_add and pkv_seq_abort fail
     * on any thread. */
    char *last_error;
    pkv__lock *error_lock;
};

/* The engine's messages (engine_error.c). */

/* Set the engine's message (and this thread's), log it, return status. */
pkv_status pkv__engine_fail(const pkv_engine *engine, pkv_status status,
                            const char *fmt, ...) PKV__PRINTF(3, 4);

/* The same for a call that may run on any thread (pkv_seq_add,
 * pkv_seq_abort): no log line, since the log callback is called on the
 * stepping thread only. */
pkv_status pkv__engine_fail_any_thread(const pkv_engine *engine,
                                       pkv_status status, const char *fmt,
                                       ...) PKV__PRINTF(3, 4);

/* The first check of a call that writes a size (export, save): *size
 * zeroed when size is not NULL; PKV_ERR_INVALID_ARGUMENT for a NULL
 * engine or size. */
pkv_status pkv__engine_check_size_out(const pkv_engine *engine,
                                      size_t *size);

/* Send one line to the engine's log callback if level is enabled. */
void pkv__engine_log(const pkv_engine *engine, int32_t level, const char *fmt,
                     ...) PKV__PRINTF(3, 4);


#endif
