/* SPDX-License-Identifier: MIT */
/* pkv-server's state and its step loop (server.h). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "server.h"

#include "sample.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int srv_server_init(srv_server *s)
{
    if (pthread_mutex_init(&s->lock, NULL) != 0)
        return -1;
    if (pthread_cond_init(&s->wake, NULL) != 0) {
        pthread_mutex_destroy(&s->lock);
        return -1;
    }
    return 0;
}

void srv_server_free(srv_server *s)
{
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->lock);
}

int srv_server_queue(srv_server *s, srv_job *j, srv_error *e)
{
    pthread_mutex_lock(&s->lock);
    int rc = 0;
    if (s->draining) {
        rc = srv_error_set(e, 503, "server_error", "shutting_down", NULL,
                           "the server is shutting down");
    } else if (s->num_jobs >= s->max_jobs) {
        rc = srv_error_set(e, 429, "rate_limit_exceeded", NULL, NULL,
                           "%u requests are in flight, the server's limit: "
                           "try again later",
                           s->max_jobs);
    } else {
        srv_job_ref(j);
        snprintf(j->id, sizeof j->id, "%s-%llu",
                 j->kind == SRV_CHAT ? "chatcmpl" : "cmpl",
                 (unsigned long long)++s->next_id);
        j->next = NULL;
        if (s->inbox_last != NULL)
            s->inbox_last->next = j;
        else
            s->inbox = j;
        s->inbox_last = j;
        s->num_jobs++;
        s->figures.queued++;
        pthread_cond_signal(&s->wake);
    }
    if (rc != 0)
        s->figures.rejected++;
    pthread_mutex_unlock(&s->lock);
    return rc;
}

void srv_server_rejected(srv_server *s)
{
    pthread_mutex_lock(&s->lock);
    s->figures.rejected++;
    pthread_mutex_unlock(&s->lock);
}

/* The loop's own state. */
typedef struct loop {
    srv_server *s;
    pkv_engine *e;
    const host_model *m;
    srv_job *active; /* added to pkv, not yet reported finished */
    float *logits;   /* [max_rows][vocab_size] */
    int32_t *sampled;
    uint8_t *stop;
    /* Counts since the last publication, and the tokens/s window. */
    uint64_t prompt_tokens, generated;
    uint64_t finished[SRV_OUTCOMES];
    double window_start;
    uint64_t window_tokens;
    double tokens_per_s;
} loop;

/* The jobs queued since the last call, oldest first. */
static srv_job *take_inbox(srv_server *s)
{
    pthread_mutex_lock(&s->lock);
    srv_job *first = s->inbox;
    s->inbox = s->inbox_last = NULL;
    pthread_mutex_unlock(&s->lock);
    return first;
}

/* A job stops counting against --max-requests: once it ended, or when
 * the loop lets go of it. */
static void uncount(loop *l, srv_job *j)
{
    if (j->uncounted)
        return;
    j->uncounted = 1;
    pthread_mutex_lock(&l->s->lock);
    l->s->num_jobs--;
    pthread_mutex_unlock(&l->s->lock);
}

/* The loop lets go of a job it had taken. */
static void let_go(loop *l, srv_job *j)
{
    uncount(l, j);
    srv_job_unref(j);
}

/* End a job (its answer complete) and count it by outcome. */
static void end_job(loop *l, srv_job *j, int end, const srv_error *e,
                    int outcome)
{
    srv_job_end(j, end, e);
    uncount(l, j);
    l->finished[outcome]++;
}

static void end_error(loop *l, srv_job *j, int outcome, unsigned status,
                      const char *type, const char *code, const char *what)
{
    srv_error e;
    srv_error_set(&e, status, type, code, NULL, "%s", what);
    end_job(l, j, SRV_END_ERROR, &e, outcome);
}

/* The queued jobs into pkv. One pkv refuses ends with an error; a
 * shutdown ends them all. */
static void admit(loop *l, int draining)
{
    srv_job *next;
    for (srv_job *j = take_inbox(l->s); j != NULL; j = next) {
        next = j->next;
        pthread_mutex_lock(&l->s->lock);
        l->s->figures.queued--;
        pthread_mutex_unlock(&l->s->lock);
        pkv_seq_params sp;
        pkv_seq_params_init(&sp);
        sp.prompt = j->prompt;
        sp.prompt_len = j->prompt_len;
        sp.max_new_tokens = j->max_tokens;
        sp.user_data = j;
        if (draining) {
            end_error(l, j, SRV_OUTCOME_ERROR, 503, "server_error",
                      "shutting_down", "the server is shutting down");
        } else if (pkv_seq_add(l->e, &sp, &j->seq) != PKV_OK) {
            char what[256];
            snprintf(what, sizeof what, "pkv refused the sequence: %s",
                     pkv_last_error());
            end_error(l, j, SRV_OUTCOME_ERROR, 500, "server_error", NULL,
                      what);
        } else {
            l->prompt_tokens += j->prompt_len;
            j->next = l->active;
            l->active = j;
            continue;
        }
        let_go(l, j);
    }
}

/* Abort the jobs whose client went away or whose time is up (or all of
 * them: a shutdown); pkv ends them at the next step. */
static void abort_some(loop *l, int all, double now)
{
    for (srv_job *j = l->active; j != NULL; j = j->next) {
        if (j->aborted)
            continue;
        pthread_mutex_lock(&j->lock);
        int ended = j->end != SRV_END_NONE, cancelled = j->cancelled;
        pthread_mutex_unlock(&j->lock);
        if (ended)
            continue; /* its answer is whole: pkv is ending it */
        if (!all && !cancelled && now < j->deadline)
            continue;
        if (pkv_seq_abort(l->e, j->seq) != PKV_OK)
            fprintf(stderr, "pkv-server: abort: %s\n", pkv_last_error());
        j->aborted = 1;
        if (cancelled)
            l->finished[SRV_OUTCOME_CANCELLED]++;
        else if (all)
            end_error(l, j, SRV_OUTCOME_ERROR, 503, "server_error",
                      "shutting_down", "the server is shutting down");
        else
            end_error(l, j, SRV_OUTCOME_TIMEOUT, 504, "timeout_error",
                      "request_timeout",
                      "the request ran past the server's time limit");
    }
}

/* A sequence pkv reports finished: the loop's last word on its job. */
static void finished(loop *l, const pkv_finished *f, void *user)
{
    srv_job *j = user;
    srv_job **at = &l->active;
    while (*at != NULL && *at != j)
        at = &(*at)->next;
    if (*at == NULL)
        return;
    *at = j->next;
    /* Ends the host did not decide: a failure, or max_model_len (the
     * server keeps prompt + max_tokens within it, so only pkv's own). */
    if (f->reason == PKV_FINISH_REASON_FAILED) {
        char what[128];
        snprintf(what, sizeof what, "the sequence failed: %s",
                 pkv_status_name(f->status));
        end_error(l, j, SRV_OUTCOME_ERROR, 500, "server_error", NULL, what);
    } else if (f->reason == PKV_FINISH_REASON_MAX_MODEL_LEN) {
        end_job(l, j, SRV_END_LENGTH, NULL, SRV_OUTCOME_LENGTH);
    } else if (f->reason == PKV_FINISH_REASON_ABORTED && !j->aborted) {
        end_error(l, j, SRV_OUTCOME_ERROR, 500, "server_error", NULL,
                  "the sequence was aborted");
    }
    let_go(l, j);
}

static int is_stop_id(const srv_server *s, int32_t id)
{
    for (uint32_t i = 0; i < s->num_stop_ids; i++)
        if (s->stop_ids[i] == id)
            return 1;
    return 0;
}

/* Sample row k of the batch for job j; 1 when the job ends there. */
static int sample_one(loop *l, srv_job *j, uint32_t k)
{
    const srv_server *s = l->s;
    uint32_t vocab = l->m->vocab_size;
    float *logits = l->logits + (size_t)k * vocab;
    /* ignore_eos as llama-server has it: the end-of-text and end-of-turn
     * tokens are never drawn, so the answer runs to max_tokens (or a
     * stop string). */
    for (uint32_t i = 0; j->ignore_eos && i < s->num_stop_ids; i++)
        logits[s->stop_ids[i]] = -INFINITY;
    int32_t id = host_sample(logits, vocab, j->temperature, j->top_p, &j->rng);
    l->sampled[k] = id;
    l->generated++;
    l->window_tokens++;
    int stop = is_stop_id(s, id);
    if (!stop) {
        char piece[64];
        size_t n = gg_detokenize(s->tok, id, piece, sizeof piece);
        int got = srv_job_append(j, piece, n);
        if (got < 0) {
            end_error(l, j, SRV_OUTCOME_ERROR, 500, "server_error", NULL,
                      "out of memory");
            return 1;
        }
        stop = got;
    }
    pthread_mutex_lock(&j->lock);
    uint32_t generated = ++j->generated;
    pthread_mutex_unlock(&j->lock);
    if (stop) {
        end_job(l, j, SRV_END_STOP, NULL, SRV_OUTCOME_STOP);
        return 1;
    }
    if (generated >= j->max_tokens) /* pkv ends it too (max_new_tokens) */
        end_job(l, j, SRV_END_LENGTH, NULL, SRV_OUTCOME_LENGTH);
    return 0;
}

/* One step: plan, forward, sample, end. 0, or -1 after printing why. */
static int step(loop *l, uint32_t *rows)
{
    const pkv_batch *b;
    if (pkv_engine_step_begin(l->e, &b) != PKV_OK) {
        fprintf(stderr, "pkv-server: step: %s\n",
                pkv_engine_last_error(l->e));
        return -1;
    }
    for (uint32_t i = 0; i < b->num_finished; i++)
        finished(l, &b->finished[i], b->finished_user_data[i]);
    *rows = b->num_tokens;
    if (b->num_tokens > 0 &&
        l->m->forward(l->m->self, l->e, b, l->logits) != 0)
        return -1;
    uint32_t seq = 0;
    for (uint32_t k = 0; k < b->num_samples; k++) {
        while (b->query_start[seq + 1] <= b->sample_rows[k])
            seq++;
        l->stop[k] = (uint8_t)sample_one(l, b->seq_user_data[seq], k);
    }
    if (pkv_engine_step_end(l->e, l->sampled, l->stop, b->num_samples) !=
        PKV_OK) {
        fprintf(stderr, "pkv-server: step_end: %s\n",
                pkv_engine_last_error(l->e));
        return -1;
    }
    return 0;
}

/* The figures for /metrics, after a step or while idle. */
static void publish(loop *l, double now, int idle)
{
    if (now - l->window_start >= 1.0 || idle) {
        l->tokens_per_s = now > l->window_start
                              ? (double)l->window_tokens /
                                    (now - l->window_start)
                              : 0;
        if (idle && l->window_tokens == 0)
            l->tokens_per_s = 0;
        l->window_start = now;
        l->window_tokens = 0;
    }
    pkv_engine_stats st;
    pkv_engine_stats_init(&st);
    int have = pkv_engine_get_stats(l->e, &st) == PKV_OK;
    srv_figures *f = &l->s->figures;
    pthread_mutex_lock(&l->s->lock);
    if (have)
        f->engine = st;
    f->prompt_tokens += l->prompt_tokens;
    f->generated_tokens += l->generated;
    for (int k = 0; k < SRV_OUTCOMES; k++)
        f->finished[k] += l->finished[k];
    f->tokens_per_s = l->tokens_per_s;
    pthread_mutex_unlock(&l->s->lock);
    l->prompt_tokens = l->generated = 0;
    memset(l->finished, 0, sizeof l->finished);
}

/* Nothing to run: wait for a job or the end, 100 ms at most (a signal
 * sets *stop without waking the condition variable). */
static void wait_for_work(srv_server *s, volatile sig_atomic_t *stop)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 100000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&s->lock);
    while (s->inbox == NULL && !*stop &&
           pthread_cond_timedwait(&s->wake, &s->lock, &until) != ETIMEDOUT)
        ;
    pthread_mutex_unlock(&s->lock);
}

int srv_loop_run(srv_server *s, pkv_engine *e, const host_model *m,
                 volatile sig_atomic_t *stop)
{
    uint32_t rows_max = m->max_rows;
    loop l = {s, e, m, NULL,
              malloc((size_t)rows_max * m->vocab_size * sizeof *l.logits),
              malloc(rows_max * sizeof *l.sampled),
              malloc(rows_max * sizeof *l.stop), 0, 0, {0}, host_now_s(),
              0, 0};
    int rc = 0;
    if (l.logits == NULL || l.sampled == NULL || l.stop == NULL) {
        fprintf(stderr, "pkv-server: out of memory\n");
        rc = 1;
    }
    while (rc == 0) {
        int draining = *stop != 0;
        if (draining) {
            pthread_mutex_lock(&s->lock);
            s->draining = 1;
            pthread_mutex_unlock(&s->lock);
        }
        admit(&l, draining);
        double now = host_now_s();
        abort_some(&l, draining, now);
        if (!pkv_engine_has_work(e)) {
            publish(&l, now, 1);
            if (draining)
                break;
            wait_for_work(s, stop);
            continue;
        }
        uint32_t rows = 0;
        if (step(&l, &rows) != 0) {
            rc = 1;
            break;
        }
        publish(&l, host_now_s(), 0);
        if (rows == 0) {
            /* Only ends to report, or a store's load on its way. */
            struct timespec nap = {0, 100000};
            nanosleep(&nap, NULL);
        }
    }
    /* A failed step: every job still held ends with an error. */
    srv_job *next;
    for (srv_job *j = l.active; j != NULL; j = next) {
        next = j->next;
        end_error(&l, j, SRV_OUTCOME_ERROR, 500, "server_error", NULL,
                  "the server failed");
        let_go(&l, j);
    }
    free(l.logits);
    free(l.sampled);
    free(l.stop);
    return rc;
}
