/* SPDX-License-Identifier: MIT */
/* The serving loop of the example hosts (serve.h). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep */
#include "serve.h"

#include "args.h"
#include "sample.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void host_log_stderr(void *user, int32_t level, const char *message)
{
    (void)user;
    if (level <= PKV_LOG_WARN)
        fprintf(stderr, "pkv: %s\n", message);
}

const char *host_reason_name(int32_t reason)
{
    switch (reason) {
    case PKV_FINISH_STOP: return "stop";
    case PKV_FINISH_LENGTH: return "length";
    case PKV_FINISH_MAX_MODEL_LEN: return "max_model_len";
    case PKV_FINISH_ABORTED: return "aborted";
    default: return "failed";
    }
}

/* The request of a sequence: ids ascend in the order requests were added. */
static uint32_t find_request(const host_request *reqs, uint32_t added,
                             pkv_seq_id id)
{
    uint32_t lo = 0, hi = added;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (reqs[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
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

/* Add the requests that arrive before this step. */
static int arrive(pkv_engine *e, host_request *reqs, uint32_t n,
                  const host_serve_options *o, uint32_t *added)
{
    uint32_t k = 0;
    while (*added < n && (o->arrivals_per_step == 0 ||
                          k++ < o->arrivals_per_step)) {
        host_request *r = &reqs[*added];
        pkv_seq_params sp;
        pkv_seq_params_init(&sp);
        sp.prompt = r->prompt;
        sp.prompt_len = r->prompt_len;
        sp.max_new_tokens = r->max_new;
        if (pkv_seq_add(e, &sp, &r->id) != PKV_OK) {
            fprintf(stderr, "request %u: %s\n", *added, pkv_last_error());
            return -1;
        }
        (*added)++;
    }
    return 0;
}

typedef struct step_buffers {
    float *logits;
    int32_t *sampled;
    uint8_t *stop;
} step_buffers;

/* One step: plan, forward, sample, end. */
static int step(pkv_engine *e, const host_model *m, host_request *reqs,
                uint32_t added, const host_serve_options *o,
                step_buffers *s, host_serve_result *out, int *shown,
                const pkv_batch **batch, double t0)
{
    const pkv_batch *b;
    if (pkv_engine_step_begin(e, &b) != PKV_OK) {
        fprintf(stderr, "step: %s\n", pkv_engine_last_error(e));
        return -1;
    }
    *batch = b;
    for (uint32_t i = 0; i < b->num_finished; i++) {
        const pkv_finished *f = &b->finished[i];
        if (f->reason == PKV_FINISH_FAILED) {
            out->failed++;
            clear_live(o, shown);
            fprintf(stderr, "request %llu failed: %s\n",
                    (unsigned long long)f->id, pkv_status_name(f->status));
        }
        if (o->on_finish != NULL) {
            clear_live(o, shown);
            o->on_finish(o->user, find_request(reqs, added, f->id), f);
        }
    }
    if (m->forward(m->self, e, b, s->logits) != 0)
        return -1;
    out->processed += b->num_tokens;
    double at = now_s() - t0;
    for (uint32_t j = 0; j < b->num_samples; j++) {
        uint32_t index = find_request(reqs, added, b->sample_seq_ids[j]);
        host_request *r = &reqs[index];
        s->sampled[j] = host_sample(s->logits + (size_t)j * m->vocab_size,
                                    m->vocab_size, o->temperature, o->top_p,
                                    &r->rng);
        s->stop[j] = (uint8_t)is_stop(o, s->sampled[j]);
        if (r->generated++ == 0)
            r->first_token_s = at;
        r->last_token_s = at;
        out->generated++;
        if (o->on_token != NULL) {
            clear_live(o, shown);
            o->on_token(o->user, index, s->sampled[j]);
        }
    }
    if (pkv_engine_step_end(e, s->sampled, s->stop, b->num_samples) !=
        PKV_OK) {
        fprintf(stderr, "step_end: %s\n", pkv_engine_last_error(e));
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
    step_buffers s = {
        malloc((size_t)rows * m->vocab_size * sizeof *s.logits),
        malloc(rows * sizeof *s.sampled), malloc(rows * sizeof *s.stop)};
    int rc = 0, shown = 0;
    if (!s.logits || !s.sampled || !s.stop) {
        fprintf(stderr, "out of memory\n");
        rc = 1;
    }
    uint32_t added = 0;
    double util_sum = 0, t0 = now_s();
    while (rc == 0 && (added < n || pkv_engine_has_work(e))) {
        const pkv_batch *b = NULL;
        if (arrive(e, reqs, n, o, &added) != 0 ||
            step(e, m, reqs, added, o, &s, out, &shown, &b, t0) != 0) {
            rc = 1;
            break;
        }
        if (b != NULL && b->num_tokens == 0 && pkv_engine_has_work(e)) {
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
        print_status(o, b, &st, (double)out->generated / (now_s() - t0),
                     &shown);
    }
    clear_live(o, &shown);
    if (rc == 0 && n > 0 && out->failed == n) {
        fprintf(stderr, "every request failed\n");
        rc = 1;
    }
    out->elapsed = now_s() - t0;
    out->kv_util_mean =
        out->util_samples ? util_sum / (double)out->util_samples : 0;
    free(s.logits);
    free(s.sampled);
    free(s.stop);
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
