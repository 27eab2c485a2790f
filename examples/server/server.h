/* SPDX-License-Identifier: MIT */
/*
 * pkv-server's state: the model's text side (tokenizer, chat template),
 * the limits, the queue of jobs from the HTTP side to the step loop, and
 * the figures /metrics reports, which the loop publishes after each step
 * (pkv's counters are the stepping thread's to read).
 */
#ifndef PKV_SERVER_SERVER_H
#define PKV_SERVER_SERVER_H

#include "job.h"
#include "request.h"
#include "serve.h"
#include "store.h"
#include "tokenizer.h"

#include <pkv/pkv.h>

#include <pthread.h>
#include <signal.h>
#include <stdint.h>

/* Jobs by how they ended, for /metrics. */
enum { SRV_OUTCOME_STOP, SRV_OUTCOME_LENGTH, SRV_OUTCOME_CANCELLED,
       SRV_OUTCOME_TIMEOUT, SRV_OUTCOME_ERROR, SRV_OUTCOMES };

/* What /metrics reports, as of the last step. */
typedef struct srv_figures {
    pkv_engine_stats engine;
    uint64_t prompt_tokens, generated_tokens;
    uint64_t finished[SRV_OUTCOMES];
    uint64_t rejected; /* refused before the engine: 4xx, 429, 503 */
    double tokens_per_s; /* generated, over the last second or more */
    uint32_t queued;     /* handed to the loop, not yet added to pkv */
    uint64_t lookups;    /* prefix lookups answered (lookup.h) */
    uint64_t lookup_store_failures; /* of them, the store not asked */
} srv_figures;

typedef struct srv_server {
    /* Set before the threads start, then read only. */
    const gg_tokenizer *tok;
    gg_chat chat;         /* kind GG_CHAT_NONE: no /v1/chat/completions */
    int32_t stop_ids[2];  /* end of text, end of turn */
    uint32_t num_stop_ids;
    srv_limits limits;
    const char *model_name;
    uint32_t ctx;         /* tokens a sequence holds, prompt and answer */
    size_t max_body;      /* bytes of a request body */
    uint32_t max_jobs;    /* jobs in flight at most; 429 beyond */
    double timeout_s;     /* a job's time at most, from its arrival */
    long long started;    /* Unix seconds */
    /* Set before the HTTP side starts, for the prefix lookup (lookup.h),
     * which runs on its threads. */
    pkv_engine *engine;
    const host_store *store; /* NULL: no --store */
    /* Under lock. */
    pthread_mutex_t lock;
    pthread_cond_t wake; /* a job queued, or the end asked for */
    srv_job *inbox, *inbox_last;
    uint32_t num_jobs; /* handed to the loop, not yet ended (a job
                          cancelled: until pkv ends its sequence) */
    int draining;      /* shutting down: no new job */
    uint64_t next_id;
    srv_figures figures;
} srv_server;

/* 0, or -1 (the lock or the condition variable). */
int srv_server_init(srv_server *s);
void srv_server_free(srv_server *s);

/* The HTTP side: hand j to the loop (a reference goes with it). 0, or -1
 * with e filled: too many jobs in flight (429), shutting down (503). */
int srv_server_queue(srv_server *s, srv_job *j, srv_error *e);

/* The HTTP side: a request refused before the loop, for /metrics. */
void srv_server_rejected(srv_server *s);

/*
 * The step loop, on the calling thread, until *stop is set and every job
 * has ended: takes the queued jobs into pkv (pkv_seq_add), aborts those
 * cancelled or past their time (pkv_seq_abort), steps the engine through
 * the model, samples each job's rows with its own settings, and hands
 * the text to the jobs. Sleeps while there is nothing to do. Once *stop
 * is set, new requests get 503 and the jobs in flight are aborted. 0, or
 * 1 after printing why (a failed step or forward pass).
 */
int srv_loop_run(srv_server *s, pkv_engine *e, const host_model *m,
                 volatile sig_atomic_t *stop);

#endif
