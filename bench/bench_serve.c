/* SPDX-License-Identifier: MIT */
/*
 * pkv-bench serve: the llama example model (examples/llama/model.c) served
 * through pkv over an arrival trace, continuous batching against static
 * batching, in one run.
 *
 * The model (bench_serve_config, bench_llama.c): the llama architecture at
 * dim 1024, 4 layers, 16 heads (4 kv heads), hidden 2816, vocab 512,
 * seeded random f32 weights: 183 MB, past the last-level cache, so that a
 * decode step reads every weight from memory once (the matmuls are
 * weight-stationary over the batch), as decode does on inference
 * hardware. The step-cost table printed first measures
 * the forward pass at 1 to 64 rows: the fixed weight read, then what each
 * row adds in arithmetic. On a GPU that second part is small until the batch
 * reaches the hundreds; on a CPU it is not, which bounds the ratio.
 *
 * The trace: Poisson arrivals; prompt lengths lognormal (median 48, sigma
 * 0.6) and output lengths lognormal (median 32, sigma 1.0, capped at 128
 * like a server's max_tokens), both seeded; 80 requests (20 with --quick),
 * which at this model's step cost keeps the run near a minute.
 * The arrival rate is 2x what a calibration run measured the continuous
 * engine to sustain (its rows per second over a mean request's rows), so
 * requests queue in both modes: the regime where the batching policy, not
 * the arrival rate, sets throughput. The output-length tail (sigma 1) is
 * what a static batch waits on: its longest member, typically several
 * times the median, runs alone at the end.
 *
 * Both modes run the example hosts' serving loop (examples/host/serve.c).
 * Continuous: every arrived request is added to the engine at once; each
 * step mixes prompt chunks and decodes, and a finished sequence's place is
 * taken at the next step. Static: when the engine is idle, the requests
 * that have arrived (up to max_num_seqs) form one batch, run until its
 * longest member ends; later arrivals wait for the next batch. Same engine
 * parameters, same model, same trace.
 */
#include "attend.h"
#include "bench.h"
#include "bench_llama.h"
#include "model.h"
#include "sample.h"
#include "serve.h"
#ifdef PKV_BENCH_GGUF
#include "host.h" /* examples/gguf */
#endif

#include "pkv/pkv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NUM_SEQS 16
#define MAX_BATCH_TOKENS 512
#define LOAD_FACTOR 2.0
/* A server's cap on max_tokens; it also bounds the longest request's
 * critical path, so that the run measures throughput, not one request. */
#define MAX_OUTPUT 128

typedef struct serve_result {
    double tokens_per_s, processed_per_s, elapsed;
    double ttft_p50, ttft_p99, itl_p50, itl_p99; /* ms */
    double kv_util_mean, seqs_per_step;
    uint64_t preemptions, steps, generated;
    /* KV utilisation over time, for the plot. */
    double *util_t, *util;
    uint32_t util_n, util_cap;
    /* Every inter-token gap, for the plot (ms, sorted). */
    double *itl;
    size_t itl_n, itl_cap;
    double *ttft; /* ms, sorted */
} serve_result;

/* The model served: its forward pass over pkv (host_model), the engine's
 * geometry, and for the step-cost table its forward pass with attention
 * replaced by out = q. */
typedef struct served_model {
    const host_model *host;
    pkv_engine_params geometry;
    double weight_bytes;
    int (*forward_no_attention)(void *self, uint32_t rows,
                                const int32_t *tokens,
                                const uint32_t *positions,
                                const uint32_t *logit_rows, float *logits);
    void *self;
    char description[320];
} served_model;

static double percentile(const double *sorted, size_t n, double p)
{
    if (n == 0)
        return 0;
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return sorted[i < n ? i : n - 1];
}

static void free_trace(host_request *t, uint32_t n)
{
    for (uint32_t i = 0; t != NULL && i < n; i++)
        free(t[i].prompt);
    free(t);
}

/* The trace's requests as the serving loop takes them: lengths and
 * tokens; arrival times (host_request.arrival_s) are set later, once the
 * rate is known. */
static host_request *make_trace(uint32_t n, uint32_t vocab, uint64_t seed)
{
    host_request *t = calloc(n, sizeof *t);
    if (t == NULL)
        return NULL;
    uint64_t rng = seed;
    for (uint32_t i = 0; i < n; i++) {
        t[i].prompt_len = host_lognormal_len(&rng, 48, 0.6, 4, 512);
        t[i].max_new = host_lognormal_len(&rng, 32, 1.0, 2, MAX_OUTPUT);
        t[i].prompt = malloc(t[i].prompt_len * sizeof *t[i].prompt);
        if (t[i].prompt == NULL) {
            free_trace(t, i);
            return NULL;
        }
        for (uint32_t k = 0; k < t[i].prompt_len; k++)
            t[i].prompt[k] = (int32_t)(host_rand(&rng) % vocab);
    }
    return t;
}

static void set_arrivals(host_request *t, uint32_t n, double rate,
                         uint64_t seed)
{
    uint64_t rng = seed ^ 0xa5a5a5a5ull;
    double at = 0;
    for (uint32_t i = 0; i < n; i++) {
        t[i].arrival_s = at;
        at += -log(host_uniform(&rng)) / rate;
    }
}

static int push_util(serve_result *r, double t, double u)
{
    if (r->util_n == r->util_cap) {
        uint32_t cap = r->util_cap ? 2 * r->util_cap : 1024;
        double *nt = realloc(r->util_t, cap * sizeof *nt);
        if (nt == NULL)
            return -1;
        r->util_t = nt;
        double *nu = realloc(r->util, cap * sizeof *nu);
        if (nu == NULL)
            return -1;
        r->util = nu;
        r->util_cap = cap;
    }
    r->util_t[r->util_n] = t;
    r->util[r->util_n++] = u;
    return 0;
}

static int push_gap(serve_result *r, double ms)
{
    if (r->itl_n == r->itl_cap) {
        size_t cap = r->itl_cap ? 2 * r->itl_cap : 4096;
        double *g = realloc(r->itl, cap * sizeof *g);
        if (g == NULL)
            return -1;
        r->itl = g;
        r->itl_cap = cap;
    }
    r->itl[r->itl_n++] = ms;
    return 0;
}

/* What the serving loop's hooks record (host_serve_options.user). */
typedef struct trace_run {
    serve_result *res;
    const host_request *reqs;
    double *prev_token_s; /* [n]: each request's previous token */
    uint64_t seqs_in_steps, steps;
    int failed; /* out of memory in a hook */
} trace_run;

/* Every inter-token gap, for the percentiles and the plot. */
static void record_token(void *user, uint32_t index, int32_t token)
{
    trace_run *run = user;
    const host_request *r = &run->reqs[index];
    (void)token;
    if (r->generated > 1 &&
        push_gap(run->res,
                 1e3 * (r->last_token_s - run->prev_token_s[index])) != 0)
        run->failed = 1;
    run->prev_token_s[index] = r->last_token_s;
}

/* KV utilisation over time, and the sequences per step. */
static void record_step(void *user, const pkv_batch *b,
                        const pkv_engine_stats *st, double at)
{
    trace_run *run = user;
    run->seqs_in_steps += b->num_seqs;
    run->steps++;
    if (st->slots_allocated > 0 &&
        push_util(run->res, at,
                  (double)st->tokens_stored / (double)st->slots_allocated) !=
            0)
        run->failed = 1;
}

/*
 * Serve the trace through the example hosts' loop (examples/host/serve.c).
 * is_static: batches formed when the engine is idle. Writes the measures
 * into *res, which free_result frees (also after a failure). 0 on
 * success.
 */
static int serve(const served_model *m, host_request *t, uint32_t n,
                 int is_static, serve_result *res)
{
    memset(res, 0, sizeof *res);
    pkv_engine_params p = m->geometry;
    p.kv_dtype = PKV_KV_DTYPE_F16;
    p.backend = PKV_BACKEND_KIND_CPU;
    p.max_num_seqs = MAX_NUM_SEQS;
    p.max_batch_tokens = MAX_BATCH_TOKENS;
    /* Room for MAX_NUM_SEQS sequences of about twice the mean length:
     * preemption happens when long ones meet. */
    p.num_blocks = MAX_NUM_SEQS * 12 + 1;
    pkv_engine *e = NULL;
    if (pkv_engine_create(&p, &e) != PKV_OK) {
        fprintf(stderr, "serve: %s\n", pkv_last_error());
        return 1;
    }
    trace_run run = {res, t, malloc(n * sizeof *run.prev_token_s), 0, 0, 0};
    for (uint32_t i = 0; i < n; i++)
        t[i].rng = 99 + i;
    host_serve_options so = {0};
    so.temperature = 1;
    so.top_p = 1;
    so.static_batch = is_static ? MAX_NUM_SEQS : 0;
    so.on_token = record_token;
    so.on_step = record_step;
    so.user = &run;
    host_serve_result hr;
    int rc = run.prev_token_s == NULL ||
             host_serve(e, m->host, t, n, &so, &hr) != 0 || run.failed;
    if (rc == 0) {
        pkv_engine_stats st;
        pkv_engine_stats_init(&st);
        pkv_engine_get_stats(e, &st);
        res->preemptions = st.preemptions;
        res->steps = st.steps;
        res->generated = hr.generated;
        res->elapsed = hr.elapsed;
        res->tokens_per_s = (double)hr.generated / hr.elapsed;
        res->processed_per_s = (double)hr.processed / hr.elapsed;
        res->kv_util_mean = hr.kv_util_mean;
        res->seqs_per_step =
            run.steps ? (double)run.seqs_in_steps / (double)run.steps : 0;
        res->ttft = malloc(n * sizeof *res->ttft);
        rc = res->ttft == NULL;
    }
    if (rc == 0) {
        for (uint32_t i = 0; i < n; i++)
            res->ttft[i] = 1e3 * (t[i].first_token_s - t[i].arrival_s);
        qsort(res->ttft, n, sizeof *res->ttft, bench_compare_double);
        res->ttft_p50 = percentile(res->ttft, n, 0.5);
        res->ttft_p99 = percentile(res->ttft, n, 0.99);
        qsort(res->itl, res->itl_n, sizeof *res->itl, bench_compare_double);
        res->itl_p50 = percentile(res->itl, res->itl_n, 0.5);
        res->itl_p99 = percentile(res->itl, res->itl_n, 0.99);
    }
    free(run.prev_token_s);
    pkv_engine_destroy(e);
    return rc;
}

/*
 * The model's forward pass (attention excluded) at 1 to 64 rows, every row
 * sampled as in a decode step: the best of reps runs. The step cost's
 * dependence on the batch size is what sets continuous batching's gain;
 * 12, 13 and 16 rows show what a count of logit rows that is not a
 * multiple of 4 costs (examples/gguf/model.c: logit_rows_computed).
 */
static int step_cost(const served_model *m, const bench_options *opt,
                     int reps)
{
    static const uint32_t sizes[] = {1, 2, 4, 8, 12, 13, 16, 32, 64};
    const uint32_t ns = sizeof sizes / sizeof sizes[0], max = 64;
    uint32_t vocab = m->host->vocab_size;
    int32_t tokens[64];
    uint32_t positions[64], rows[64];
    float *logits = malloc((size_t)max * vocab * sizeof *logits);
    if (logits == NULL)
        return 1;
    for (uint32_t r = 0; r < max; r++) {
        tokens[r] = (int32_t)(r * 7 % vocab);
        positions[r] = 100 + r;
        rows[r] = r;
    }
    double bytes = m->weight_bytes;
    printf("step cost (forward pass without attention, %.0f MB of "
           "weights; best of %d):\n",
           bytes / 1e6, reps);
    printf("%-6s %9s %9s %13s\n", "rows", "ms", "ms/row", "weights GB/s");
    for (uint32_t k = 0; k < ns; k++) {
        double best = 1e30;
        for (int rep = 0; rep < reps; rep++) {
            double t0 = bench_now_s();
            if (m->forward_no_attention(m->self, sizes[k], tokens, positions,
                                        rows, logits) != 0)
                break;
            double dt = bench_now_s() - t0;
            best = dt < best ? dt : best;
        }
        printf("%-6u %9.1f %9.2f %13.1f\n", sizes[k], 1e3 * best,
               1e3 * best / sizes[k], bytes / best / 1e9);
        if (opt->json)
            fprintf(opt->json,
                    "{\"bench\":\"serve_step\",\"model\":\"%s\",\"rows\":%u,"
                    "\"ms\":%.3f,\"weights_gb_per_s\":%.2f}\n",
                    opt->model ? opt->model : "llama", sizes[k], 1e3 * best,
                    bytes / best / 1e9);
    }
    free(logits);
    return 0;
}

/* ------------------------------------------------- the two served models */

/* out = q: attention's stand-in for the step-cost table. */
static int copy_attend(void *user, uint32_t layer, uint32_t rows,
                       const float *q, const float *k, const float *v,
                       float *out)
{
    const uint32_t *width = user; /* floats of a row of q */
    (void)layer;
    (void)k;
    (void)v;
    memcpy(out, q, (size_t)rows * *width * sizeof *out);
    return 0;
}

typedef struct llama_served {
    llama_model weights;
    llama_host host;
    uint32_t q_width;
} llama_served;

static int llama_no_attention(void *self, uint32_t rows,
                              const int32_t *tokens,
                              const uint32_t *positions,
                              const uint32_t *logit_rows, float *logits)
{
    llama_served *l = self;
    return llama_forward(&l->weights, &l->host.scratch, rows, tokens,
                         positions, copy_attend, &l->q_width, logit_rows,
                         rows, logits);
}

/* The seeded llama model of bench_serve_config (bench_llama.c). */
static int llama_open(served_model *m, llama_served *l)
{
    llama_config c = bench_serve_config();
    if (llama_model_init_random(&l->weights, &c, 42) != 0)
        return -1;
    if (llama_host_init(&l->host, &l->weights, MAX_BATCH_TOKENS) != 0) {
        llama_model_free(&l->weights);
        return -1;
    }
    l->q_width = c.dim;
    m->host = &l->host.model;
    llama_engine_params(&m->geometry, &c);
    m->weight_bytes = (double)l->weights.num_floats * sizeof(float);
    m->forward_no_attention = llama_no_attention;
    m->self = l;
    snprintf(m->description, sizeof m->description,
             "llama model dim %u, hidden %u, %u layers, %u heads (%u kv), "
             "vocab %u, seeded random f32 weights",
             c.dim, c.hidden_dim, c.num_layers, c.num_heads, c.num_kv_heads,
             c.vocab_size);
    return 0;
}

static void llama_close(llama_served *l)
{
    llama_host_free(&l->host);
    llama_model_free(&l->weights);
}

#ifdef PKV_BENCH_GGUF
typedef struct gguf_served {
    gg_model weights;
    gg_host host;
    uint32_t q_width;
} gguf_served;

static int gguf_no_attention(void *self, uint32_t rows, const int32_t *tokens,
                             const uint32_t *positions,
                             const uint32_t *logit_rows, float *logits)
{
    gguf_served *g = self;
    return gg_forward(&g->weights, &g->host.scratch, rows, tokens, positions,
                      copy_attend, &g->q_width, logit_rows, rows, logits);
}

/* The model examples/gguf/setup.sh caches as name (gemma3, smollm2). */
static int gguf_open(served_model *m, gguf_served *g, const char *name,
                     uint32_t threads)
{
    char *path = gg_default_weights_path(name), err[512];
    if (path == NULL ||
        gg_model_load(&g->weights, path, threads, err, sizeof err) != 0) {
        fprintf(stderr, "serve: %s (sh examples/gguf/setup.sh gets it)\n",
                path ? err : "out of memory");
        free(path);
        return -1;
    }
    free(path);
    if (gg_host_init(&g->host, &g->weights, MAX_BATCH_TOKENS) != 0) {
        gg_model_free(&g->weights);
        return -1;
    }
    const gg_file_config *c = &g->weights.config;
    g->q_width = c->num_heads * c->key_len;
    m->host = &g->host.model;
    gg_engine_params(&m->geometry, &g->weights, 1024);
    m->geometry.block_size = GG_BLOCK_SIZE;
    m->weight_bytes = (double)g->weights.file.tensor_bytes;
    m->forward_no_attention = gguf_no_attention;
    m->self = g;
    uint32_t windowed = 0;
    for (uint32_t l = 0; l < c->num_layers; l++)
        windowed += g->weights.layer_windows[l] != 0;
    char windows[64] = "no windows";
    if (windowed != 0)
        snprintf(windows, sizeof windows, "windows of %u on %u layers",
                 c->sliding_window, windowed);
    snprintf(m->description, sizeof m->description,
             "%s (%s: dim %u, ffn %u, %u layers, %u heads (%u kv) of %u, "
             "vocab %u, %s), the GGUF's weights on ggml",
             name, c->arch == GG_ARCH_GEMMA3 ? "gemma3" : "llama", c->dim,
             c->ffn_dim, c->num_layers, c->num_heads, c->num_kv_heads,
             c->key_len, c->vocab_size, windows);
    return 0;
}

static void gguf_close(gguf_served *g)
{
    gg_host_free(&g->host);
    gg_model_free(&g->weights);
}
#else
typedef struct gguf_served {
    int none;
} gguf_served;

static int gguf_open(served_model *m, gguf_served *g, const char *name,
                     uint32_t threads)
{
    (void)m;
    (void)g;
    (void)threads;
    fprintf(stderr, "serve: --model %s runs on ggml, which this pkv-bench "
                    "was built without (sh examples/gguf/setup.sh builds "
                    "it; then configure again)\n",
            name);
    return -1;
}

static void gguf_close(gguf_served *g)
{
    (void)g;
}
#endif

static void free_result(serve_result *r)
{
    free(r->util_t);
    free(r->util);
    free(r->itl);
    free(r->ttft);
}

/* KV utilisation over time and the inter-token latency CDF of both modes,
 * as PNGs in --plot's directory: each mode a data set of its own (gnuplot
 * index 0 continuous, 1 static). */
static void plot(const bench_options *opt, const serve_result *res)
{
    static const char *const legend =
        "index 0 w l t 'continuous', data index 1 w l t 'static'";
    char body[512];
    FILE *f = bench_plot_open(opt, "serve_kv_utilization");
    for (int k = 0; f != NULL && k < 2; k++) {
        for (uint32_t i = 0; i < res[k].util_n; i++)
            fprintf(f, "%.4f %.4f\n", res[k].util_t[i], 100 * res[k].util[i]);
        fputs("\n\n", f);
    }
    snprintf(body, sizeof body,
             "set xlabel 'seconds'; set ylabel 'KV utilisation (%%)'\n"
             "set yrange [0:100]\nplot data %s",
             legend);
    bench_plot_close(opt, f, "serve_kv_utilization", body);
    f = bench_plot_open(opt, "serve_latency_cdf");
    for (int k = 0; f != NULL && k < 2; k++) {
        for (size_t i = 0; i < res[k].itl_n; i++)
            fprintf(f, "%.4f %.5f\n", res[k].itl[i],
                    (double)(i + 1) / (double)res[k].itl_n);
        fputs("\n\n", f);
    }
    snprintf(body, sizeof body,
             "set xlabel 'inter-token latency (ms)'; set ylabel 'CDF'\n"
             "set yrange [0:1]; set logscale x\nplot data %s",
             legend);
    bench_plot_close(opt, f, "serve_latency_cdf", body);
}

int bench_serve(const bench_options *opt)
{
    uint32_t n = opt->quick ? 20 : 80, calib_n = opt->quick ? 6 : 12;
    int gguf = opt->model != NULL && strcmp(opt->model, "llama") != 0;
    served_model m;
    llama_served llama;
    gguf_served gg;
    memset(&m, 0, sizeof m);
    if (gguf ? gguf_open(&m, &gg, opt->model, opt->threads) != 0
             : llama_open(&m, &llama) != 0)
        return 1;
    /* calib, then the two modes' */
    serve_result res[3];
    memset(res, 0, sizeof res);
    static const char *const modes[] = {"continuous", "static"};
    host_request *t = NULL;
    int rc = 1;
    bench_progress("serve: the forward pass at 1 to 64 rows");
    if (step_cost(&m, opt, opt->quick ? 2 : 3) != 0)
        goto done;
    t = make_trace(n, m.host->vocab_size, 2024);
    if (t == NULL)
        goto done;
    /* Calibration: the first requests all at once, continuous. */
    serve_result *calib = &res[2];
    set_arrivals(t, calib_n, 1e9, 1);
    bench_progress("serve: calibrating on %u requests at once", calib_n);
    if (serve(&m, t, calib_n, 0, calib) != 0)
        goto done;
    double prompt_sum = 0, out_sum = 0;
    uint32_t out_max = 0;
    for (uint32_t i = 0; i < n; i++) {
        prompt_sum += t[i].prompt_len;
        out_sum += t[i].max_new;
        out_max = t[i].max_new > out_max ? t[i].max_new : out_max;
    }
    /* Requests per second the engine sustains: its processed rows per
     * second over the rows (prompt + output) of a mean request. */
    double rate =
        LOAD_FACTOR * calib->processed_per_s / ((prompt_sum + out_sum) / n);
    set_arrivals(t, n, rate, 1);
    printf("serve: %u requests, Poisson arrivals at %.1f/s (%.1fx the "
           "calibrated capacity), prompts lognormal median 48 (mean %.0f), "
           "outputs lognormal median 32 sigma 1 (mean %.0f, max %u);\n"
           "       %s, %.0f MB of weights; f16 KV, CPU backend, %d "
           "sequences at most, temperature 1\n",
           n, rate, LOAD_FACTOR, prompt_sum / n, out_sum / n, out_max,
           m.description, m.weight_bytes / 1e6, MAX_NUM_SEQS);
    rc = 0;
    printf("%-11s %9s %10s %9s %9s %9s %9s %8s %9s %7s %10s\n", "mode",
           "tokens/s", "processed", "ttft p50", "ttft p99", "itl p50",
           "itl p99", "KV util", "seqs/step", "steps", "preemptions");
    for (int k = 0; k < 2 && rc == 0; k++) {
        bench_progress("serve: %s batching over the trace", modes[k]);
        rc = serve(&m, t, n, k, &res[k]);
        if (rc != 0)
            break;
        serve_result *r = &res[k];
        printf("%-11s %9.1f %10.1f %7.0fms %7.0fms %7.1fms %7.1fms %7.1f%% "
               "%9.1f %7llu %10llu\n",
               modes[k], r->tokens_per_s, r->processed_per_s, r->ttft_p50,
               r->ttft_p99, r->itl_p50, r->itl_p99, 100 * r->kv_util_mean,
               r->seqs_per_step, (unsigned long long)r->steps,
               (unsigned long long)r->preemptions);
        if (opt->json)
            fprintf(opt->json,
                    "{\"bench\":\"serve\",\"model\":\"%s\","
                    "\"mode\":\"%s\",\"requests\":%u,"
                    "\"tokens_per_s\":%.2f,\"ttft_p50_ms\":%.2f,"
                    "\"ttft_p99_ms\":%.2f,\"itl_p50_ms\":%.3f,"
                    "\"itl_p99_ms\":%.3f,\"preemptions\":%llu,"
                    "\"kv_utilization_mean\":%.4f,\"steps\":%llu,"
                    "\"seqs_per_step\":%.2f}\n",
                    gguf ? opt->model : "llama", modes[k], n,
                    r->tokens_per_s, r->ttft_p50, r->ttft_p99,
                    r->itl_p50, r->itl_p99,
                    (unsigned long long)r->preemptions, r->kv_util_mean,
                    (unsigned long long)r->steps, r->seqs_per_step);
    }
    if (rc == 0) {
        printf("continuous / static: %.2fx tokens/s, %.2fx sequences per "
               "step (%llu vs %llu steps for the same tokens)\n",
               res[0].tokens_per_s / res[1].tokens_per_s,
               res[0].seqs_per_step / res[1].seqs_per_step,
               (unsigned long long)res[0].steps,
               (unsigned long long)res[1].steps);
        plot(opt, res);
    }
done:
    for (int k = 0; k < 3; k++)
        free_result(&res[k]);
    free_trace(t, n);
    if (gguf)
        gguf_close(&gg);
    else
        llama_close(&llama);
    return rc;
}
