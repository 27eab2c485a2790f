/* SPDX-License-Identifier: MIT */
/*
 * A deterministic test model for the engine loop: the Q, K and V rows of a
 * token are a fixed function of (token id, position, layer), so the output
 * of every row of every step can be recomputed densely from the sequence's
 * token history and compared, whatever the engine did in between (chunked
 * prefill, prefix hits, forks, preemption, swap).
 */
#ifndef PKV_TEST_MODEL_H
#define PKV_TEST_MODEL_H

#include "pkv/pkv.h"

#include <stdint.h>

enum { TM_Q = 0, TM_K = 1, TM_V = 2 };

/* One element in [-1, 1). */
float tm_value(int kind, int32_t token, uint32_t position, uint32_t layer,
               uint32_t head, uint32_t dim);

/* Fill row [heads][head_dim] of kind for (token, position, layer). */
void tm_row(int kind, int32_t token, uint32_t position, uint32_t layer,
            uint32_t heads, uint32_t head_dim, float *row);

/* The token a test "samples" for a sequence after `position`: a fixed
 * function of the sequence's last token and position, below vocab. */
int32_t tm_sample(int32_t last_token, uint32_t position, uint32_t vocab);

/* The small geometry the engine-loop tests start from (2 layers, 4 query
 * heads over 2 kv heads, head_dim 8, 4-token blocks, 256 blocks, f32 KV,
 * vocabulary 1000, max_model_len 1024) on the given backend. */
pkv_engine_params tm_params(int32_t backend);

/* The most |output - dense f64 reference| a cache of dtype allows on the
 * test model's values (uniform in [-1, 1), head_dim 8): f32 1e-4, f16
 * 2e-3, U8 0.05, and 0.5 with U4 parts, from the bound of docs/design.md
 * ("Attention error bounds": U4's step, 2/15, perturbs a score by up to
 * 0.19 and a value by 0.07). */
float tm_tolerance(int32_t dtype);

/* A prompt of len tokens below 1000, a fixed function of seed (malloc'd). */
int32_t *tm_prompt(uint32_t len, uint32_t seed);

/* A live sequence as the test host sees it: its whole token history. */
typedef struct tm_seq {
    pkv_seq_id id;
    int32_t *tokens;
    uint32_t num_tokens;
    uint32_t capacity;
    int ended;
    int32_t finish_reason;
    int32_t finish_status;
    uint32_t drafts; /* proposed for the next step (tm_propose), at the
                        end of tokens until tm_step settles them */
    /* With tm_host.record_samples: the output rows (every layer) of each
     * sample row whose sample the sequence kept, by position: [position]
     * [layer][num_q_heads * head_dim]; recorded[position] says which. */
    float *sample_out;
    uint8_t *recorded;
    uint32_t record_capacity; /* positions */
} tm_seq;

/* The host side of one engine: geometry, live sequences, and what was
 * checked. */
typedef struct tm_host {
    pkv_engine *engine;
    pkv_engine_params params;
    float tolerance; /* max |out - dense reference| accepted */
    uint32_t check_stride; /* check rows at positions % stride == 0 and
                              the last row of each sequence; 1: all */
    int retry; /* a failed step_begin, attend or step_end is called again
                  (at most 3 times in a row), counted in faults */
    int record_samples; /* keep tm_seq.sample_out (set before stepping) */
    uint32_t faults;
    tm_seq *seqs;
    uint32_t num_seqs;
    uint32_t capacity;
    /* Filled by tm_step. */
    uint64_t rows_checked;
    double max_error;
    uint32_t steps;
    uint32_t finished;
    uint32_t preempted_reports;
} tm_host;

/* Create the engine from params (geometry must be set). */
void tm_host_init(tm_host *host, const pkv_engine_params *params,
                  float tolerance);
/* Destroy the engine and the host's records. */
void tm_host_free(tm_host *host);

/* pkv_seq_add a prompt, recording it. Returns the id. */
pkv_seq_id tm_add(tm_host *host, const int32_t *prompt, uint32_t len,
                  uint32_t max_new_tokens, int32_t priority, uint32_t tenant);
/* Record a sequence created with this history (pkv_seq_import). */
void tm_record(tm_host *host, pkv_seq_id id, const int32_t *tokens,
               uint32_t len);
/* pkv_seq_propose drafts for id's next step, recorded at the end of its
 * tokens; tm_step keeps those the engine accepts (greedy: each equals
 * tm_sample at the row before it). */
void tm_propose(tm_host *host, pkv_seq_id id, const int32_t *drafts,
                uint32_t n);
/* tm_propose n drafts (n <= 64) that the first sample rejects: each is
 * the token tm_sample gives after id's last token, plus one. */
void tm_propose_wrong(tm_host *host, pkv_seq_id id, uint32_t n);
/* Record a sequence that the engine created (fork): copy parent's history
 * with the last token replaced. */
void tm_record_fork(tm_host *host, pkv_seq_id parent, pkv_seq_id child,
                    int32_t last_token);
tm_seq *tm_find(tm_host *host, pkv_seq_id id);

/* One full step: step_begin, attend on every layer with the test model's
 * rows, check every output row against the dense f64 reference, sample
 * with tm_sample (stop never), step_end. Fails the test on any mismatch.
 * *batch_out (optional) receives the batch of the step. */
void tm_step(tm_host *host, const pkv_batch **batch_out);

/* pkv_seq_add a prompt of len tokens with max_new_tokens and cache_salt,
 * recording it. Returns the id. */
pkv_seq_id tm_add_salted(tm_host *host, const int32_t *prompt, uint32_t len,
                         uint32_t max_new_tokens, uint64_t salt);

/* Step until sequence id runs; the rows of its first step. Steps without
 * rows (a KV store's load on its way) sleep 1 ms; fails after 20,000. */
uint32_t tm_first_rows(tm_host *host, pkv_seq_id id);

/* Step until the engine has no work, sleeping 1 ms on steps without rows
 * (a store's load or save on its way; fails after 20,000 steps), then
 * tm_check_idle. */
void tm_run_idle(tm_host *host);

/* The rows sequence id has in batch b (0 when it does not run). */
uint32_t tm_rows_of(const pkv_batch *b, pkv_seq_id id);

/* Step until the engine has no work (at most max_steps). */
void tm_run(tm_host *host, uint32_t max_steps);

/* The leak check: nothing live, every block free (total - 1, the null
 * block excepted), every ref count 0. */
void tm_check_idle(tm_host *host);

#ifdef PKV_HAVE_OPENCL
/* The start of a test program's OpenCL build: 77 (ctest's skip code) when
 * there is no OpenCL device, else 0, with PKV_TEST_FILTER applied (run
 * only the tests whose names match cmocka's pattern, as the oclgrind pass
 * in tests/run.sh does). */
int tm_opencl_start(void);
#endif

#endif
