/* SPDX-License-Identifier: MIT */
/* pkv-bench scheduler: host time of one step (step_begin + step_end) at 1
 * to 1,024 running sequences, attention excluded: what pkv adds to a host's
 * step besides the kernels. CPU backend, a one-layer toy geometry; rows
 * with 64 tenants under quotas and 10,000 waiting sequences show what
 * the bookkeeping costs when the engine is full.
 *
 * Each case takes its steps two ways, one after the other: warm, with only
 * the toy attention between step_begin and step_end, then cold, with the
 * caches
 * evicted (a read of twice the last-level cache) before step_begin and
 * before step_end, as a model's forward pass and sampling would. Warm
 * flatters whatever fits in a core's cache: 256 sequences' state
 * survives the toy attention in 2 MB of L2, 1,024's does not. */
#include "bench.h"

#include "pkv/pkv.h"

#include <stdlib.h>
#include <string.h>

#define PROMPT_LEN 64 /* tokens per prompt, unless a case says more */
#define LONG_PROMPT 2048
#define MEASURED_STEPS 64 /* of each kind, warm and cold */

/* Evicts the caches: reads every line of buf (twice the last-level
 * cache). The volatile sum keeps the compiler from dropping the reads. */
typedef struct evictor {
    const uint64_t *buf;
    size_t words;
    volatile uint64_t sum;
} evictor;

static void evict(evictor *ev)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < ev->words; i += 8)
        sum += ev->buf[i];
    ev->sum += sum;
}

/* One measured configuration: n running sequences, spread over `tenants`
 * tenants (with a block quota each when tenants > 1), `waiting` more
 * sequences queued behind max_num_seqs, each with a prompt of
 * `prompt_len` tokens (0: PROMPT_LEN). Prompts share their first half,
 * so admissions hit the prefix cache. */
typedef struct sched_case {
    uint32_t running;
    uint32_t tenants;
    uint32_t waiting;
    uint32_t prompt_len;
} sched_case;

/* Median host microseconds per decode step of case c, warm and cold. */
static int measure(const sched_case *c, evictor *ev, double *warm_us,
                   double *cold_us)
{
    uint32_t n = c->running;
    uint32_t steps = 2 * MEASURED_STEPS;
    uint32_t len = c->prompt_len ? c->prompt_len : PROMPT_LEN;
    uint32_t blocks_per_seq = (len + steps + 32) / 16 + 1;
    pkv_engine_params p;
    pkv_engine_params_init(&p);
    p.num_layers = 1;
    p.num_q_heads = 1;
    p.num_kv_heads = 1;
    p.head_dim = 4;
    p.kv_dtype = PKV_KV_DTYPE_F32;
    p.block_size = 16;
    p.num_blocks = n * blocks_per_seq + 1;
    p.max_num_seqs = n;
    p.max_batch_tokens = n * len;
    p.max_model_len = len + steps + 32;
    if (c->tenants > 1) /* binding only if a tenant outgrew its share */
        p.max_blocks_per_tenant = (n / c->tenants + 1) * blocks_per_seq;
    p.backend = PKV_BACKEND_KIND_CPU;
    pkv_engine *e;
    if (pkv_engine_create(&p, &e) != PKV_OK) {
        fprintf(stderr, "scheduler: %s\n", pkv_last_error());
        return 1;
    }
    int32_t *prompt = malloc(len * sizeof *prompt);
    if (prompt == NULL)
        return 1;
    for (uint32_t i = 0; i < n + c->waiting; i++) {
        for (uint32_t t = 0; t < len; t++)
            prompt[t] = (int32_t)(t < len / 2 ? t : i * 131 + t);
        pkv_seq_params sp;
        pkv_seq_params_init(&sp);
        sp.prompt = prompt;
        sp.prompt_len = len;
        sp.tenant = i % c->tenants;
        pkv_seq_id id;
        if (pkv_seq_add(e, &sp, &id) != PKV_OK) {
            fprintf(stderr, "scheduler: %s\n", pkv_last_error());
            free(prompt);
            pkv_engine_destroy(e);
            return 1;
        }
    }
    free(prompt);
    size_t rows = (size_t)n * len * 4;
    float *x = calloc(rows, sizeof *x), *out = calloc(rows, sizeof *out);
    int32_t *sampled = calloc(n, sizeof *sampled);
    double *times = calloc(steps, sizeof *times); /* warm, then cold */
    if (!x || !out || !sampled || !times)
        return 1;
    int rc = 0;
    /* Step 0 is the prefill; the measured steps are decodes, the second
     * half cold (taking turns would leave no warm step: each would follow
     * an eviction). */
    for (uint32_t step = 0; step <= steps && rc == 0; step++) {
        const pkv_batch *b;
        int cold = step > MEASURED_STEPS;
        if (cold)
            evict(ev);
        double t0 = 1e6 * bench_now_s();
        rc |= pkv_engine_step_begin(e, &b) != PKV_OK;
        double t1 = 1e6 * bench_now_s();
        pkv_tensor t =
            pkv_tensor_host(x, 0, PKV_TENSOR_DTYPE_F32, b->num_tokens, 1, 4);
        pkv_tensor o = t;
        o.data = out;
        rc |= pkv_engine_attend(e, 0, &t, &t, &t, &o) != PKV_OK;
        for (uint32_t j = 0; j < b->num_samples; j++)
            sampled[j] = (int32_t)(step + j);
        if (cold)
            evict(ev);
        double t2 = 1e6 * bench_now_s();
        rc |= pkv_engine_step_end(e, sampled, NULL, b->num_samples) != PKV_OK;
        double t3 = 1e6 * bench_now_s();
        if (step > 0)
            times[step - 1] = (t1 - t0) + (t3 - t2);
        if (b->num_seqs != n && rc == 0) {
            fprintf(stderr, "scheduler: %u of %u sequences ran\n",
                    b->num_seqs, n);
            rc = 1;
        }
    }
    *warm_us = bench_median(times, MEASURED_STEPS);
    *cold_us = bench_median(times + MEASURED_STEPS, MEASURED_STEPS);
    free(x);
    free(out);
    free(sampled);
    free(times);
    pkv_engine_destroy(e);
    return rc;
}

int bench_scheduler(const bench_options *opt)
{
    /* A tenant each, nothing waiting; then the loaded rows: 64
     * tenants with quotas and 10,000 sequences waiting; then 256
     * sequences of LONG_PROMPT-token prompts, whose steps should cost what
     * 64-token ones do: a decode step adds a block here and there, however
     * many the tables hold. */
    static const sched_case full[] = {
        {1, 1, 0, 0},        {4, 1, 0, 0},         {16, 1, 0, 0},
        {64, 1, 0, 0},       {256, 1, 0, 0},       {1024, 1, 0, 0},
        {256, 64, 10000, 0}, {1024, 64, 10000, 0}, {256, 1, 0, LONG_PROMPT}};
    static const sched_case quick[] = {
        {1, 1, 0, 0}, {256, 1, 0, 0}, {256, 64, 10000, 0}};
    const sched_case *cases = opt->quick ? quick : full;
    size_t count = opt->quick ? sizeof quick / sizeof quick[0]
                              : sizeof full / sizeof full[0];
    evictor ev = {NULL, 2 * bench_llc_bytes() / sizeof(uint64_t), 0};
    uint64_t *evict_buf = malloc(ev.words * sizeof *evict_buf);
    if (evict_buf == NULL) {
        fprintf(stderr, "scheduler: no memory for the eviction buffer\n");
        return 1;
    }
    memset(evict_buf, 1, ev.words * sizeof *evict_buf);
    ev.buf = evict_buf;
    printf("scheduler: host time of step_begin + step_end per decode step "
           "(median of %d each), attention excluded;\ncold: caches evicted "
           "(%zu MB read) before step_begin and before step_end\n",
           MEASURED_STEPS, ev.words * sizeof *evict_buf / 1000000);
    printf("%9s %8s %8s %7s %12s %12s %14s\n", "running", "tenants",
           "waiting", "prompt", "us/step", "cold us/step", "cold us/seq");
    FILE *plot = bench_plot_open(opt, "scheduler");
    double at256[2][2] = {{0}}, at1024[2][2] = {{0}}; /* [loaded][cold] */
    double long256[2] = {0}; /* [cold], LONG_PROMPT */
    int rc = 0;
    for (size_t i = 0; i < count && rc == 0; i++) {
        const sched_case *c = &cases[i];
        bench_progress("scheduler: case %zu of %zu", i + 1, count);
        double warm, cold;
        if (measure(c, &ev, &warm, &cold) != 0) {
            rc = 1;
            break;
        }
        uint32_t len = c->prompt_len ? c->prompt_len : PROMPT_LEN;
        printf("%9u %8u %8u %7u %12.1f %12.1f %14.3f\n", c->running,
               c->tenants, c->waiting, len, warm, cold, cold / c->running);
        int loaded = c->tenants > 1;
        if (len != PROMPT_LEN) {
            long256[0] = warm;
            long256[1] = cold;
        } else if (c->running == 256) {
            at256[loaded][0] = warm;
            at256[loaded][1] = cold;
        } else if (c->running == 1024) {
            at1024[loaded][0] = warm;
            at1024[loaded][1] = cold;
        }
        if (plot != NULL && c->tenants == 1 && len == PROMPT_LEN)
            fprintf(plot, "%u %.3f %.3f\n", c->running, warm, cold);
        if (opt->json)
            fprintf(opt->json,
                    "{\"bench\":\"scheduler\",\"running\":%u,"
                    "\"tenants\":%u,\"waiting\":%u,\"prompt_len\":%u,"
                    "\"us_per_step\":%.2f,\"cold_us_per_step\":%.2f}\n",
                    c->running, c->tenants, c->waiting, len, warm, cold);
    }
    for (int loaded = 0; loaded < 2 && rc == 0; loaded++)
        if (at256[loaded][0] > 0.0 && at1024[loaded][0] > 0.0)
            printf("1,024 / 256 running%s: %.2fx warm, %.2fx cold\n",
                   loaded ? ", 64 tenants, 10,000 waiting" : "",
                   at1024[loaded][0] / at256[loaded][0],
                   at1024[loaded][1] / at256[loaded][1]);
    if (rc == 0 && long256[0] > 0.0 && at256[0][0] > 0.0)
        printf("256 running, prompts of %d / %d tokens: %.2fx warm, %.2fx "
               "cold\n",
               LONG_PROMPT, PROMPT_LEN, long256[0] / at256[0][0],
               long256[1] / at256[0][1]);
    free(evict_buf);
    if (rc != 0)
        return 1;
    bench_plot_close(opt, plot, "scheduler",
                     "set logscale xy\n"
                     "set xlabel 'running sequences'\n"
                     "set ylabel 'host us per step (step_begin + step_end)'\n"
                     "plot data using 1:2 with linespoints title 'warm', "
                     "'' using 1:3 with linespoints title 'cold'");
    return 0;
}
