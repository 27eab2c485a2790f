/* SPDX-License-Identifier: MIT */
/*
 * A checking host for the engine loop, without cmocka, shared by the engine
 * fuzz target and the thread test. It steps the engine with the test
 * model's rows (test_model.h) and checks every batch against the host's own
 * record of each sequence, every output row against the dense f64 reference
 * (dense_ref.h), every end report (each id ends exactly once, for the reason
 * the host expects), and the memory manager's invariants through the
 * engine's internals. A failed check calls host->fail, which must not
 * return.
 */
#ifndef PKV_TESTS_ENGINE_HOST_H
#define PKV_TESTS_ENGINE_HOST_H

#include "pkv/pkv.h"

#include <stdint.h>

/* What the host knows of one sequence id. */
typedef struct eh_seq {
    int32_t *tokens; /* its history: the prompt, then each sampled token */
    uint32_t num_tokens;
    uint32_t capacity;
    uint32_t generated;
    uint32_t max_new_tokens;
    uint8_t known;    /* recorded (add, fork) or seen in a batch */
    uint8_t complete; /* the whole prompt is known */
    uint8_t ended;    /* reported in a batch's finished list */
    uint8_t bad;      /* poisoned in the current step */
    int32_t expect;   /* the pkv_finish_reason the next report must carry,
                         0 when the host expects none */
    int32_t reason;   /* as reported */
    int32_t status;
    uint32_t drafts; /* proposed for the next step (eh_propose): the last
                        of tokens until eh_end settles them */
    uint32_t ran;    /* of those, the ones the current step runs */
} eh_seq;

typedef struct eh_host {
    pkv_engine *engine;
    pkv_engine_params params; /* as the engine resolved them */
    /* Most |out - reference| accepted; rows of the step's batch. */
    double tolerance;
    /* Learn mode (sequences added by other threads): an id first seen in a
     * batch is recorded then, its tokens learned from the rows (only with
     * salts that rule out prefix hits across sequences), and its
     * max_new_tokens is learn_max_new_tokens. */
    int learn;
    uint32_t learn_max_new_tokens;
    /* Tensors passed to attend as f16 (never with an f32 cache). */
    int f16_tensors;
    void (*fail)(const char *message);
    /* Called after each step of eh_drain, or NULL: a host whose store
     * answers from another thread waits there a little. */
    void (*idle)(void);

    eh_seq *seqs; /* by id - 1 */
    uint64_t num_ids;
    uint64_t last_id; /* the highest id issued, as far as the host knows */
    const pkv_batch *batch; /* of the current step, or NULL */

    uint64_t rows_checked;
    double max_error;
    uint64_t steps;
    uint64_t ended;
    uint64_t imported; /* eh_move copies that came with KV */

    /* Scratch: q, k, v, out (f32 and f16), history K/V, reference. */
    float *q, *k, *v, *out, *hk, *hv;
    uint16_t *q16, *k16, *v16, *out16;
    double *ref;
    uint32_t *rows;
    size_t cap_rows, cap_ctx;
} eh_host;

/* Create the engine; returns pkv_engine_create's status. */
pkv_status eh_init(eh_host *host, const pkv_engine_params *params,
                   double tolerance, void (*fail)(const char *message));
void eh_free(eh_host *host);

/* Fail with a formatted message. */
void eh_failf(const eh_host *host, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* The record of id, or NULL (id 0, or never recorded). */
eh_seq *eh_find(eh_host *host, uint64_t id);

/* pkv_seq_add a prompt and record it; returns the status. */
pkv_status eh_add(eh_host *host, const pkv_seq_params *params,
                  pkv_seq_id *out_id);
/* pkv_seq_abort, checking the status (single-threaded hosts). */
void eh_abort(eh_host *host, pkv_seq_id id);
/* pkv_seq_fork, checking the status and, on success, the child. */
pkv_status eh_fork(eh_host *host, pkv_seq_id parent, int32_t last_token,
                   pkv_seq_id *out_child);
/* pkv_seq_truncate, checking the status and, on success, cutting the
 * host's record of the sequence the same way. */
pkv_status eh_truncate(eh_host *host, pkv_seq_id id, uint32_t num_tokens);

/* pkv_seq_export then pkv_seq_import into the same engine: a copy of the
 * sequence, recorded like a fork; checks the statuses. */
pkv_status eh_move(eh_host *host, pkv_seq_id id, pkv_seq_id *out_copy);

/* pkv_seq_propose, checking the status; on success the drafts join the
 * host's record until the step settles them as the engine does. */
pkv_status eh_propose(eh_host *host, pkv_seq_id id, const int32_t *drafts,
                      uint32_t n);

/* The three parts of a step. begin checks the batch and its reports;
 * attend runs every layer, with a NaN in k at (poison_row, poison_layer)
 * when poison_row < num_tokens, and checks the outputs; end samples with
 * tm_sample, stop[j] for sample j (NULL: none). */
void eh_begin(eh_host *host);
void eh_attend(eh_host *host, uint32_t poison_row, uint32_t poison_layer);
void eh_end(eh_host *host, const uint8_t *stop);
/* All three, no poison, no stop. */
void eh_step(eh_host *host);

/* Every invariant of the pool, the tables and the sequence lists, and the
 * agreement of the engine's sequences with the host's records. */
void eh_check(eh_host *host);

/* Step until the engine has no work (at most max_steps), then check that
 * every recorded id ended exactly once and the pool is idle. */
void eh_drain(eh_host *host, uint64_t max_steps);

#endif
