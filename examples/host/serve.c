/* SPDX-License-Identifier: MIT */
/* The serving loop of the example hosts (serve.h). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep */
#include "serve.h"

#include "args.h"
#include "sample.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

double host_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
    if (s <= 0)
        return;
    struct timespec ts;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    nanosleep(&ts, NULL);
}

void host_log_stderr(void *user, int32_t level, const char *message)
{
    (void)user;
    if (level <= PKV_LOG_LEVEL_WARN)
        fprintf(stderr, "pkv: %s\n", message);
}

const char *host_reason_name(int32_t reason)
{
    switch (reason) {
    case PKV_FINISH_REASON_STOP:
        return "stop";
    case PKV_FINISH_REASON_LENGTH:
        return "length";
    case PKV_FINISH_REASON_MAX_MODEL_LEN:
        return "max_model_len";
    case PKV_FINISH_REASON_ABORTED:
        return "aborted";
    default: return "failed";
    }
}

static int is_stop(const host_serve_options *o, int32_t token)
{
    for (uint32_t i = 0; i < o->num_stop; i++)
        if (o->stop[i] == token)
            return 1;
    return 0;
}

/* Before printing anything else in live mode: erase the status line. */
static void clear_live(const host_serve_options *o, int *shown)
{
    if (o->status == HOST_STATUS_LIVE && *shown) {
        fputs("\r\033[K", stdout);
        *shown = 0;
    }
}

static void print_status(const host_serve_options *o, const pkv_batch *b,
                         const pkv_engine_stats *st, double tokens_per_s,
                         int *shown)
{
    if (o->status == HOST_STATUS_NONE)
        return;
    double kv = st->slots_allocated ? 100.0 * (double)st->tokens_stored /
                                          (double)st->slots_allocated
                                    : 0.0;
    if (o->status == HOST_STATUS_LIVE)
        fputs("\r\033[K", stdout);
    printf("step %4llu  running %3u  waiting %3u  swapped %2u  "
           "preempted %2u  KV %5.1f%%  %7.1f tokens/s",
           (unsigned long long)st->steps, st->num_running, st->num_waiting,
           st->num_swapped, b->num_preempted, kv, tokens_per_s);
    if (o->status == HOST_STATUS_LIVE)
        *shown = 1;
    else
        putchar('\n');
    fflush(stdout);
}

/* The loop's state between its steps. */
typedef struct serve_loop {
    pkv_engine *e;
    const host_model *m;
    host_request *reqs;
    uint32_t n, added;
    const host_serve_options *o;
    float *logits;    /* [max_rows][vocab_size] */
    int32_t *sampled; /* [max_rows] */
    uint8_t *stop;    /* [max_rows] */
    host_serve_result *out;
    int shown; /* a live status line is on the terminal */
    double t0; /* the loop's start */
    double at; /* the last step's sampling, seconds from t0 */
} serve_loop;

/* Add the requests that arrive before this step: each request's
 * host_request is its user_data, which every batch echoes. When the engine
 * is idle and the next request has not arrived yet, wait for it. */
static int arrive(serve_loop *l)
{
    const host_serve_options *o = l->o;
    int idle = !pkv_engine_has_work(l->e);
    if (idle && l->added < l->n)
        sleep_s(l->t0 + l->reqs[l->added].arrival_s - host_now_s());
    if (o->static_batch != 0 && !idle)
        return 0;
    uint32_t limit =
        o->static_batch != 0 ? o->static_batch : o->arrivals_per_step;
    double now = host_now_s() - l->t0;
    for (uint32_t k = 0; l->added < l->n && (limit == 0 || k < limit) &&
                         l->reqs[l->added].arrival_s <= now;
         k++) {
        host_request *r = &l->reqs[l->added];
        pkv_seq_params sp;
        pkv_seq_params_init(&sp);
        sp.prompt = r->prompt;
        sp.prompt_len = r->prompt_len;
        sp.max_new_tokens = r->max_new;
        sp.user_data = r;
        if (pkv_seq_add(l->e, &sp, &r->id) != PKV_OK) {
            fprintf(stderr, "request %u: %s\n", l->added, pkv_last_error());
            return -1;
        }
        l->added++;
    }
    return 0;
}

/* Sample the step's rows and report them to the requests. */
static void sample(serve_loop *l, const pkv_batch *b)
{
    const host_serve_options *o = l->o;
    uint32_t vocab = l->m->vocab_size;
    /* A sample row's request: the user_data of the sequence whose rows
     * hold it (both ascend). */
    uint32_t seq = 0;
    for (uint32_t j = 0; j < b->num_samples; j++) {
        while (b->query_start[seq + 1] <= b->sample_rows[j])
            seq++;
        host_request *r = b->seq_user_data[seq];
        l->sampled[j] = host_sample(l->logits + (size_t)j * vocab, vocab,
                                    o->temperature, o->top_p, &r->rng);
        l->stop[j] = (uint8_t)is_stop(o, l->sampled[j]);
        if (r->generated++ == 0)
            r->first_token_s = l->at;
        r->last_token_s = l->at;
        l->out->generated++;
        if (o->on_token != NULL) {
            clear_live(o, &l->shown);
            o->on_token(o->user, (uint32_t)(r - l->reqs), l->sampled[j]);
        }
    }
}

/* One step: plan, forward, sample, end. */
static int step(serve_loop *l, const pkv_batch **batch)
{
    const host_serve_options *o = l->o;
    const pkv_batch *b;
    if (pkv_engine_step_begin(l->e, &b) != PKV_OK) {
        fprintf(stderr, "step: %s\n", pkv_engine_last_error(l->e));
        return -1;
    }
    *batch = b;
    for (uint32_t i = 0; i < b->num_finished; i++) {
        const pkv_finished *f = &b->finished[i];
        if (f->reason == PKV_FINISH_REASON_FAILED) {
            l->out->failed++;
            clear_live(o, &l->shown);
            fprintf(stderr, "request %llu failed: %s\n",
                    (unsigned long long)f->id, pkv_status_name(f->status));
        }
        if (o->on_finish != NULL) {
            const host_request *r = b->finished_user_data[i];
            clear_live(o, &l->shown);
            o->on_finish(o->user, (uint32_t)(r - l->reqs), f);
        }
    }
    if (l->m->forward(l->m->self, l->e, b, l->logits) != 0)
        return -1;
    l->out->processed += b->num_tokens;
    l->at = host_now_s() - l->t0;
    sample(l, b);
    if (pkv_engine_step_end(l->e, l->sampled, l->stop, b->num_samples) !=
        PKV_OK) {
        fprintf(stderr, "step_end: %s\n", pkv_engine_last_error(l->e));
        return -1;
    }
    return 0;
}

int host_serve(pkv_engine *e, const host_model *m, host_request *reqs,
               uint32_t n, const host_serve_options *o,
               host_serve_result *out)
{
    *out = (host_serve_result){0};
    uint32_t rows = m->max_rows;
    serve_loop l = {e, m, reqs, n, 0, o,
                    malloc((size_t)rows * m->vocab_size * sizeof *l.logits),
                    malloc(rows * sizeof *l.sampled),
                    malloc(rows * sizeof *l.stop), out, 0, host_now_s(), 0};
    for (uint32_t i = 0; i < n; i++) {
        reqs[i].id = 0;
        reqs[i].generated = 0;
        reqs[i].first_token_s = reqs[i].last_token_s = 0;
    }
    int rc = 0;
    if (!l.logits || !l.sampled || !l.stop) {
        fprintf(stderr, "out of memory\n");
        rc = 1;
    }
    double util_sum = 0;
    while (rc == 0 && (l.added < n || pkv_engine_has_work(e))) {
        const pkv_batch *b = NULL;
        if (arrive(&l) != 0 || step(&l, &b) != 0) {
            rc = 1;
            break;
        }
        if (b->num_tokens == 0 && pkv_engine_has_work(e)) {
            /* Nothing to run: a KV store's load or save on its way. */
            struct timespec nap = {0, 100000};
            nanosleep(&nap, NULL);
            continue;
        }
        pkv_engine_stats st;
        pkv_engine_stats_init(&st);
        if (pkv_engine_get_stats(e, &st) == PKV_OK && st.slots_allocated) {
            util_sum += (double)st.tokens_stored / (double)st.slots_allocated;
            out->util_samples++;
        }
        if (o->on_step != NULL && b->num_tokens > 0)
            o->on_step(o->user, b, &st, l.at);
        print_status(o, b, &st,
                     (double)out->generated / (host_now_s() - l.t0),
                     &l.shown);
    }
    clear_live(o, &l.shown);
    if (rc == 0 && n > 0 && out->failed == n) {
        fprintf(stderr, "every request failed\n");
        rc = 1;
    }
    out->elapsed = host_now_s() - l.t0;
    out->kv_util_mean =
        out->util_samples ? util_sum / (double)out->util_samples : 0;
    free(l.logits);
    free(l.sampled);
    free(l.stop);
    return rc;
}

void host_print_summary(const char *program, pkv_engine *e,
                        const pkv_engine_params *p, uint32_t n,
                        const host_serve_result *r)
{
    pkv_engine_stats st;
    pkv_engine_stats_init(&st);
    pkv_engine_get_stats(e, &st);
    printf("\n%s: %u requests, %llu tokens generated, %llu processed in "
           "%.2f s (%llu steps)\n",
           program, n, (unsigned long long)r->generated,
           (unsigned long long)r->processed, r->elapsed,
           (unsigned long long)st.steps);
    printf("tokens/s:         %.1f generated, %.1f processed\n",
           (double)r->generated / r->elapsed,
           (double)r->processed / r->elapsed);
    printf("KV utilisation:   %.1f%% (tokens stored / slots allocated, mean "
           "over %llu steps; %u blocks of %u tokens, %s)\n",
           100.0 * r->kv_util_mean, (unsigned long long)r->util_samples,
           p->num_blocks, st.block_size,
           host_kv_name(p->kv_dtype));
    printf("preemptions:      %llu\n", (unsigned long long)st.preemptions);
    printf("prefix hits:      %llu of %llu prompt tokens\n",
           (unsigned long long)st.prefix_hit_tokens,
           (unsigned long long)st.prefix_query_tokens);
    printf("backend:          %s\n", pkv_engine_backend_name(e));
}
