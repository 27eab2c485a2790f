/* SPDX-License-Identifier: MIT */
/*
 * The checking host of every engine-loop test: it steps the engine with
 * the hash model's rows (hash_model.h) and checks every batch against its
 * own record of each sequence, every output row against the dense f64
 * reference (dense_ref.h), every end report (each id ends exactly once,
 * for the reason the host expects), and the memory manager's invariants
 * through the engine's internals. No test framework: a failed check calls
 * host->fail, which must not return (check_host_cmocka.h gives cmocka's).
 * A new engine feature is modelled here once.
 */
#ifndef PKV_TESTS_CHECK_HOST_H
#define PKV_TESTS_CHECK_HOST_H

#include "pkv/pkv.h"

#include <stddef.h>
#include <stdint.h>

/* What the host knows of one sequence id. */
typedef struct ch_seq {
    int32_t *tokens; /* its history: the prompt, then each sampled token */
    uint32_t num_tokens;
    uint32_t capacity;
    uint32_t generated;
    uint32_t max_new_tokens;
    uint8_t known;    /* recorded (add, fork, import) or seen in a batch */
    uint8_t complete; /* the whole prompt is known */
    uint8_t ended;    /* reported in a batch's finished list */
    uint8_t bad;      /* poisoned in the current step */
    int32_t expect;   /* the pkv_finish_reason the next report must carry,
                         0 when the host expects none */
    int32_t reason;   /* as reported */
    int32_t status;
    uint32_t drafts; /* proposed for the next step (ch_propose): the last
                        of tokens until ch_end settles them */
    uint32_t ran;    /* of those, the ones the current step runs */
    /* With ch_host.record_samples: the output rows (every layer) of each
     * sample row whose sample the sequence kept, by position: [position]
     * [layer][num_q_heads * head_dim]; recorded[position] says which. */
    float *sample_out;
    uint8_t *recorded;
    uint32_t record_capacity; /* positions */
} ch_seq;

typedef struct ch_host {
    pkv_engine *engine;
    pkv_engine_params params; /* as the engine resolved them */
    /* Most |out - reference| accepted; rows of the step's batch. */
    double tolerance;
    /* Check the rows at positions % stride == 0 and the last row of each
     * sequence in a step; 1 (the default): all. */
    uint32_t check_stride;
    /* Faults are injected: a failed step_begin, attend or step_end is
     * called again (at most 3 times in a row), and ch_fork and ch_propose
     * take an out-of-memory or device error as the fault; each counts in
     * faults. */
    int retry;
    uint32_t faults;
    /* Keep ch_seq.sample_out (set before stepping). */
    int record_samples;
    /* Learn mode (sequences added by other threads): an id first seen in a
     * batch is recorded then, its tokens learned from the rows (only with
     * salts that rule out prefix hits across sequences), and its
     * max_new_tokens is learn_max_new_tokens. */
    int learn;
    uint32_t learn_max_new_tokens;
    /* Tensors passed to attend as f16 (never with an f32 cache). */
    int f16_tensors;
    void (*fail)(const char *message);
    /* Called after each step of ch_run, or NULL: a host whose store
     * answers from another thread waits there a little. */
    void (*idle)(void);

    ch_seq *seqs; /* by id - 1 */
    uint64_t num_ids;
    uint64_t last_id; /* the highest id issued, as far as the host knows */
    const pkv_batch *batch; /* of the current step, or NULL */

    uint64_t rows_checked;
    double max_error;
    uint64_t steps;
    uint64_t ended;
    uint64_t preempted_reports; /* sum of the batches' num_preempted */
    uint64_t imported; /* ch_move copies that came with KV */

    /* Scratch: q, k, v, out of every layer (f32 and f16), history K/V,
     * reference. */
    float *q, *k, *v, *out, *hk, *hv;
    uint16_t *q16, *k16, *v16, *out16;
    double *ref;
    uint32_t *rows;
    size_t cap_rows, cap_ctx;
} ch_host;

/* Create the engine; a failure calls fail with the engine's message. */
void ch_init(ch_host *host, const pkv_engine_params *params, double tolerance,
             void (*fail)(const char *message));
void ch_free(ch_host *host);

/* Fail with a formatted message. */
_Noreturn void ch_failf(const ch_host *host, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* The record of id, or NULL (id 0, or never recorded). */
ch_seq *ch_find(ch_host *host, uint64_t id);

/* pkv_seq_add and record the prompt; returns the status. */
pkv_status ch_add(ch_host *host, const pkv_seq_params *params,
                  pkv_seq_id *out_id);
/* ch_add of a prompt with these fields, failing on an error. */
pkv_seq_id ch_add_prompt(ch_host *host, const int32_t *prompt, uint32_t len,
                         uint32_t max_new_tokens, int32_t priority,
                         uint32_t tenant);
pkv_seq_id ch_add_salted(ch_host *host, const int32_t *prompt, uint32_t len,
                         uint32_t max_new_tokens, uint64_t salt);
/* pkv_seq_abort, checking the status (single-threaded hosts). */
void ch_abort(ch_host *host, pkv_seq_id id);
/* pkv_seq_fork, checking the status and, on success, the child. */
pkv_status ch_fork(ch_host *host, pkv_seq_id parent, int32_t last_token,
                   pkv_seq_id *out_child);
/* pkv_seq_truncate, checking the status and, on success, cutting the
 * host's record of the sequence the same way. */
pkv_status ch_truncate(ch_host *host, pkv_seq_id id, uint32_t num_tokens);

/* pkv_seq_export then pkv_seq_import into the same engine: a copy of the
 * sequence, recorded like a fork; checks the statuses. */
pkv_status ch_move(ch_host *host, pkv_seq_id id, pkv_seq_id *out_copy);
/* Record id, which pkv_seq_import made from an export of from (a record
 * of this host or of another's). */
void ch_record_import(ch_host *host, pkv_seq_id id, const ch_seq *from);

/* pkv_seq_propose, checking the status; on success the drafts join the
 * host's record until the step settles them as the engine does. */
pkv_status ch_propose(ch_host *host, pkv_seq_id id, const int32_t *drafts,
                      uint32_t n);
/* ch_propose n drafts (n <= 64) that the first sample rejects: each is the
 * token hm_sample gives after id's last token, plus one. */
void ch_propose_wrong(ch_host *host, pkv_seq_id id, uint32_t n);

/* The three parts of a step. begin checks the batch and its reports;
 * attend runs every layer, with a NaN in k at (poison_row, poison_layer)
 * when poison_row < num_tokens, and checks the outputs; end samples with
 * hm_sample, stop[j] for sample j (NULL: none). */
void ch_begin(ch_host *host);
void ch_attend(ch_host *host, uint32_t poison_row, uint32_t poison_layer);
void ch_end(ch_host *host, const uint8_t *stop);
/* Record that id sampled token in a step the test ran by hand (no stop
 * flag). */
void ch_sampled(ch_host *host, pkv_seq_id id, int32_t token);
/* All three, no poison, no stop; *batch_out (optional) receives the
 * step's batch, valid until the next step_begin. */
void ch_step(ch_host *host, const pkv_batch **batch_out);

/* Every invariant of the pool, the tables and the sequence lists, and the
 * agreement of the engine's sequences with the host's records. */
void ch_check(ch_host *host);

/* Step and ch_check until the engine has no work; fails after max_steps. */
void ch_run(ch_host *host, uint64_t max_steps);
/* ch_run, then ch_check_idle. */
void ch_drain(ch_host *host, uint64_t max_steps);
/* Step until the engine has no work, sleeping 1 ms on steps without rows
 * (a KV store's load or save on its way; fails after 20,000 steps), then
 * ch_check_idle. */
void ch_run_idle(ch_host *host);
/* Step until sequence id runs; the rows of its first step. Steps without
 * rows sleep 1 ms; fails after 20,000. */
uint32_t ch_first_rows(ch_host *host, pkv_seq_id id);
/* The rows sequence id has in batch b (0 when it does not run). */
uint32_t ch_rows_of(const pkv_batch *b, pkv_seq_id id);
/* The leak check: every recorded id ended exactly once, nothing live,
 * every block free (the null block excepted), every ref count 0, no swap
 * space held. */
void ch_check_idle(ch_host *host);

/* Two deployment keys (pkv_engine_params.seal_key) for the sealing
 * tests: any 32 bytes will do, as long as the two differ. */
extern const uint8_t ch_seal_key[32];
extern const uint8_t ch_other_seal_key[32];

#endif
