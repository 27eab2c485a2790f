/* SPDX-License-Identifier: MIT */
/*
 * The serving loop of pkv's example hosts: requests arrive while the
 * engine runs, each step's batch goes through the host's model, the
 * sampled tokens go back to pkv, and a status line reports the engine.
 * The model is a callback, so pkv-gguf and pkv-bench serve (its GGUF
 * models and the small llama fixture) share this loop.
 */
#ifndef PKV_EXAMPLE_HOST_SERVE_H
#define PKV_EXAMPLE_HOST_SERVE_H

#include <pkv/pkv.h>

#include <stdint.h>

/* A model as the loop sees it: one forward pass over a step's batch. */
typedef struct host_model {
    uint32_t vocab_size;
    uint32_t max_rows; /* rows per pass at most: the engine's
                          max_batch_tokens */
    /* The logits of the batch's sample rows, the first num_samples rows
     * of logits [max_rows][vocab_size] (the rest the model may use as
     * scratch), after running every row (attention through
     * pkv_engine_attend). 0, or -1 after printing why. */
    int (*forward)(void *self, pkv_engine *e, const pkv_batch *b,
                   float *logits);
    void *self;
} host_model;

typedef struct host_request {
    int32_t *prompt; /* the caller's */
    uint32_t prompt_len;
    uint32_t max_new;
    uint64_t rng; /* per request: sampling does not depend on batching */
    /* Seconds from the loop's start before which the request is not added
     * (0: at once): a trace's arrival time. Requests arrive in array
     * order, so these must not decrease. */
    double arrival_s;
    /* Set by the loop. */
    pkv_seq_id id;
    uint32_t generated;
    /* Seconds from the loop's start to the step that sampled the first
     * and the last token (0 before the first). */
    double first_token_s, last_token_s;
} host_request;

enum {
    HOST_STATUS_NONE,  /* the summary only */
    HOST_STATUS_LINES, /* one status line per step */
    HOST_STATUS_LIVE   /* one line rewritten in place (a terminal) */
};

typedef struct host_serve_options {
    float temperature; /* 0: greedy */
    float top_p;       /* 1: every token */
    uint32_t arrivals_per_step; /* requests added before each step at
                                   most (0: every one that has arrived) */
    /* Static batching: 0, continuous (requests join the running batch
     * at any step); else requests are added only when the engine is idle,
     * this many at most, and that batch runs until its longest member
     * ends. */
    uint32_t static_batch;
    const int32_t *stop; /* tokens that end a sequence (counted) */
    uint32_t num_stop;
    int status; /* HOST_STATUS_* */
    /* Called for every sampled token and every finished sequence (NULL:
     * none); index is the request's place in the array. */
    void (*on_token)(void *user, uint32_t index, int32_t token);
    void (*on_finish)(void *user, uint32_t index, const pkv_finished *f);
    /* Called after every step that ran rows (NULL: none), with the
     * engine's stats after it and the seconds from the loop's start to
     * its sampling (the request's last_token_s for the tokens it
     * sampled). */
    void (*on_step)(void *user, const pkv_batch *b,
                    const pkv_engine_stats *st, double at);
    void *user;
} host_serve_options;

typedef struct host_serve_result {
    uint64_t generated, processed; /* tokens sampled, rows run */
    uint32_t failed;               /* requests that ended failed */
    double elapsed;                /* seconds */
    double kv_util_mean; /* tokens stored / slots allocated, over steps */
    uint64_t util_samples;
} host_serve_result;

/* Serve n requests on e (created by the caller, idle) until every one has
 * finished. A request's pkv_seq_params.user_data is its host_request, so
 * e must not be given sequences of its own meanwhile. 0, or 1 after
 * printing why (a request pkv refused, a failed step or forward pass, or
 * every request failed). */
int host_serve(pkv_engine *e, const host_model *m, host_request *reqs,
               uint32_t n, const host_serve_options *o,
               host_serve_result *out);

/* The summary after host_serve: tokens/s, KV use, preemptions, prefix
 * hits and the backend, each line prefixed as the README shows. */
void host_print_summary(const char *program, pkv_engine *e,
                        const pkv_engine_params *p, uint32_t n,
                        const host_serve_result *r);

/* A finish reason's name: stop, length, max_model_len, aborted, failed. */
const char *host_reason_name(int32_t reason);

/* pkv's warnings and errors to stderr (a pkv_engine_params.log). */
void host_log_stderr(void *user, int32_t level, const char *message);

/* Seconds on the monotonic clock. */
double host_now_s(void);

#endif
