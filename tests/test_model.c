/* SPDX-License-Identifier: MIT */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_model.h"

#include "engine.h"
#ifdef PKV_HAVE_OPENCL
#include "opencl/opencl.h"
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

float tm_value(int kind, int32_t token, uint32_t position, uint32_t layer,
               uint32_t head, uint32_t dim)
{
    uint64_t h = mix((uint64_t)(uint32_t)token * 0x9e3779b97f4a7c15ull ^
                     ((uint64_t)kind << 56));
    h = mix(h ^ ((uint64_t)position << 20) ^ layer);
    h = mix(h ^ ((uint64_t)head << 32) ^ dim);
    return (float)((double)(h >> 40) / (double)(1 << 23) - 1.0);
}

void tm_row(int kind, int32_t token, uint32_t position, uint32_t layer,
            uint32_t heads, uint32_t head_dim, float *row)
{
    for (uint32_t h = 0; h < heads; h++)
        for (uint32_t d = 0; d < head_dim; d++)
            row[h * head_dim + d] =
                tm_value(kind, token, position, layer, h, d);
}

int32_t tm_sample(int32_t last_token, uint32_t position, uint32_t vocab)
{
    return (int32_t)(mix((uint64_t)(uint32_t)last_token << 32 | position) %
                     vocab);
}

float tm_tolerance(int32_t dtype)
{
    if (dtype == PKV_KV_U4 || dtype == PKV_KV_U8K_U4V)
        return 0.5f;
    return dtype == PKV_KV_U8 ? 0.05f : dtype == PKV_KV_F16 ? 2e-3f : 1e-4f;
}

pkv_engine_params tm_params(int32_t backend)
{
    pkv_engine_params p;
    assert_int_equal(pkv_engine_params_init(&p), PKV_OK);
    p.num_layers = 2;
    p.num_q_heads = 4;
    p.num_kv_heads = 2;
    p.head_dim = 8;
    p.block_size = 4;
    p.num_blocks = 256;
    p.kv_dtype = PKV_KV_F32;
    p.vocab_size = 1000;
    p.max_model_len = 1024;
    p.backend = backend;
    return p;
}

int32_t *tm_prompt(uint32_t len, uint32_t seed)
{
    int32_t *t = malloc(len * sizeof *t);
    assert_non_null(t);
    for (uint32_t i = 0; i < len; i++)
        t[i] = (int32_t)((seed * 7919u + i * 104729u) % 1000u);
    return t;
}

void tm_host_init(tm_host *host, const pkv_engine_params *params,
                  float tolerance)
{
    memset(host, 0, sizeof *host);
    host->params = *params;
    host->tolerance = tolerance;
    host->check_stride = 1;
    assert_int_equal(pkv_engine_create(params, &host->engine), PKV_OK);
    /* The engine resolves defaults; read back what it uses. */
    host->params = host->engine->params;
}

void tm_host_free(tm_host *host)
{
    pkv_engine_destroy(host->engine);
    for (uint32_t i = 0; i < host->num_seqs; i++) {
        free(host->seqs[i].tokens);
        free(host->seqs[i].sample_out);
        free(host->seqs[i].recorded);
    }
    free(host->seqs);
    memset(host, 0, sizeof *host);
}

static tm_seq *new_record(tm_host *host, pkv_seq_id id, const int32_t *tokens,
                          uint32_t len)
{
    if (host->num_seqs == host->capacity) {
        host->capacity = host->capacity ? host->capacity * 2 : 64;
        host->seqs = realloc(host->seqs, host->capacity * sizeof *host->seqs);
        assert_non_null(host->seqs);
    }
    tm_seq *s = &host->seqs[host->num_seqs++];
    memset(s, 0, sizeof *s);
    s->id = id;
    s->capacity = len + 64;
    s->tokens = malloc(s->capacity * sizeof *s->tokens);
    assert_non_null(s->tokens);
    memcpy(s->tokens, tokens, len * sizeof *tokens);
    s->num_tokens = len;
    return s;
}

tm_seq *tm_find(tm_host *host, pkv_seq_id id)
{
    for (uint32_t i = 0; i < host->num_seqs; i++)
        if (host->seqs[i].id == id)
            return &host->seqs[i];
    return NULL;
}

pkv_seq_id tm_add(tm_host *host, const int32_t *prompt, uint32_t len,
                  uint32_t max_new_tokens, int32_t priority, uint32_t tenant)
{
    pkv_seq_params p;
    assert_int_equal(pkv_seq_params_init(&p), PKV_OK);
    p.prompt = prompt;
    p.prompt_len = len;
    p.max_new_tokens = max_new_tokens;
    p.priority = priority;
    p.tenant = tenant;
    pkv_seq_id id = 0;
    assert_int_equal(pkv_seq_add(host->engine, &p, &id), PKV_OK);
    new_record(host, id, prompt, len);
    return id;
}

void tm_record(tm_host *host, pkv_seq_id id, const int32_t *tokens,
               uint32_t len)
{
    new_record(host, id, tokens, len);
}

void tm_record_fork(tm_host *host, pkv_seq_id parent, pkv_seq_id child,
                    int32_t last_token)
{
    tm_seq *p = tm_find(host, parent);
    assert_non_null(p);
    /* new_record may move the array: copy the parent's history first. */
    uint32_t len = p->num_tokens;
    int32_t *copy = malloc(len * sizeof *copy);
    assert_non_null(copy);
    memcpy(copy, p->tokens, len * sizeof *copy);
    if (last_token >= 0)
        copy[len - 1] = last_token;
    new_record(host, child, copy, len);
    free(copy);
}

/* Keep the output rows (every layer, in outs [layer][T][hq * d]) of batch
 * row r, the sample row for position `position` of s. */
static void record_sample(const tm_host *host, tm_seq *s, uint32_t position,
                          const float *outs, uint32_t T, uint32_t r)
{
    const pkv_engine_params *p = &host->params;
    size_t row = (size_t)p->num_q_heads * p->head_dim;
    size_t per_position = p->num_layers * row;
    if (position >= s->record_capacity) {
        uint32_t cap = s->record_capacity ? s->record_capacity : 64;
        while (cap <= position)
            cap *= 2;
        s->sample_out =
            realloc(s->sample_out, cap * per_position * sizeof(float));
        s->recorded = realloc(s->recorded, cap);
        assert_true(s->sample_out != NULL && s->recorded != NULL);
        memset(s->recorded + s->record_capacity, 0,
               cap - s->record_capacity);
        s->record_capacity = cap;
    }
    for (uint32_t layer = 0; layer < p->num_layers; layer++)
        memcpy(s->sample_out + position * per_position + layer * row,
               outs + ((size_t)layer * T + r) * row, row * sizeof(float));
    s->recorded[position] = 1;
}

static void push_token(tm_seq *s, int32_t token)
{
    if (s->num_tokens == s->capacity) {
        s->capacity *= 2;
        s->tokens = realloc(s->tokens, s->capacity * sizeof *s->tokens);
        assert_non_null(s->tokens);
    }
    s->tokens[s->num_tokens++] = token;
}

void tm_propose(tm_host *host, pkv_seq_id id, const int32_t *drafts,
                uint32_t n)
{
    pkv_status st = pkv_seq_propose(host->engine, id, drafts, n);
    if (host->retry && st == PKV_ERR_OUT_OF_MEMORY) {
        host->faults++; /* no drafts this step: the tokens stay the same */
        return;
    }
    assert_int_equal(st, PKV_OK);
    tm_seq *s = tm_find(host, id);
    assert_non_null(s);
    s->num_tokens -= s->drafts;
    for (uint32_t i = 0; i < n; i++)
        push_token(s, drafts[i]);
    s->drafts = n;
}

void tm_propose_wrong(tm_host *host, pkv_seq_id id, uint32_t n)
{
    const tm_seq *s = tm_find(host, id);
    assert_non_null(s);
    uint32_t vocab = host->params.vocab_size;
    int32_t truth = tm_sample(s->tokens[s->num_tokens - 1],
                              s->num_tokens - 1, vocab);
    int32_t wrong[64];
    assert_true(n <= 64);
    for (uint32_t i = 0; i < n; i++)
        wrong[i] = (int32_t)(((uint32_t)truth + 1) % vocab);
    tm_propose(host, id, wrong, n);
}

/* Dense f64 attention of one query row at `position` of a sequence over
 * its tokens 0..position, for one layer. */
static void dense_row(const tm_host *host, const tm_seq *s, uint32_t position,
                      uint32_t layer, const float *q, double *out)
{
    const pkv_engine_params *p = &host->params;
    uint32_t hq = p->num_q_heads, hkv = p->num_kv_heads, d = p->head_dim;
    uint32_t group = hq / hkv;
    double scale = p->scale > 0 ? p->scale : 1.0 / sqrt((double)d);
    uint32_t window =
        p->layer_windows != NULL ? p->layer_windows[layer] : p->sliding_window;
    uint32_t first = 0;
    if (window && position + 1 > window)
        first = position + 1 - window;
    uint32_t n = position + 1 - first;
    double *scores = malloc(n * sizeof *scores);
    assert_non_null(scores);
    for (uint32_t h = 0; h < hq; h++) {
        uint32_t kvh = h / group;
        double m = -INFINITY;
        for (uint32_t t = 0; t < n; t++) {
            uint32_t pos = first + t;
            double dot = 0;
            for (uint32_t c = 0; c < d; c++)
                dot += (double)q[h * d + c] *
                       tm_value(TM_K, s->tokens[pos], pos, layer, kvh, c);
            scores[t] = dot * scale;
            if (scores[t] > m)
                m = scores[t];
        }
        double sum = 0;
        for (uint32_t t = 0; t < n; t++) {
            scores[t] = exp(scores[t] - m);
            sum += scores[t];
        }
        for (uint32_t c = 0; c < d; c++)
            out[h * d + c] = 0;
        for (uint32_t t = 0; t < n; t++) {
            uint32_t pos = first + t;
            double w = scores[t] / sum;
            for (uint32_t c = 0; c < d; c++)
                out[h * d + c] +=
                    w * tm_value(TM_V, s->tokens[pos], pos, layer, kvh, c);
        }
    }
    free(scores);
}

/* A call failed: fail the test, or (host->retry) count the fault and let
 * the caller call again, at most 3 times in a row. */
static void retried(tm_host *host, pkv_status st, int *tries)
{
    if (!host->retry || ++*tries > 3)
        fail_msg("engine call failed: %s: %s", pkv_status_name(st),
                 pkv_engine_last_error(host->engine));
    host->faults++;
}

void tm_step(tm_host *host, const pkv_batch **batch_out)
{
    const pkv_engine_params *p = &host->params;
    const pkv_batch *b = NULL;
    pkv_status st;
    int tries = 0;
    while ((st = pkv_engine_step_begin(host->engine, &b)) != PKV_OK)
        retried(host, st, &tries);
    assert_non_null(b);
    host->steps++;
    host->preempted_reports += b->num_preempted;
    for (uint32_t i = 0; i < b->num_finished; i++) {
        tm_seq *s = tm_find(host, b->finished[i].id);
        assert_non_null(s);
        assert_false(s->ended);
        s->ended = 1;
        s->finish_reason = b->finished[i].reason;
        s->finish_status = b->finished[i].status;
        host->finished++;
    }
    uint32_t T = b->num_tokens, hq = p->num_q_heads, hkv = p->num_kv_heads;
    uint32_t d = p->head_dim;
    float *q = malloc(((size_t)T * hq * d + 1) * sizeof *q);
    float *k = malloc(((size_t)T * hkv * d + 1) * sizeof *k);
    float *v = malloc(((size_t)T * hkv * d + 1) * sizeof *v);
    /* Every layer's output, for record_samples. */
    float *outs =
        malloc(((size_t)p->num_layers * T * hq * d + 1) * sizeof *outs);
    double *ref = malloc((size_t)hq * d * sizeof *ref);
    assert_true(q && k && v && outs && ref);
    for (uint32_t layer = 0; layer < p->num_layers; layer++) {
        float *out = outs + (size_t)layer * T * hq * d;
        for (uint32_t r = 0; r < T; r++) {
            int32_t tok = b->token_ids[r];
            uint32_t pos = b->positions[r];
            tm_row(TM_Q, tok, pos, layer, hq, d, q + (size_t)r * hq * d);
            tm_row(TM_K, tok, pos, layer, hkv, d, k + (size_t)r * hkv * d);
            tm_row(TM_V, tok, pos, layer, hkv, d, v + (size_t)r * hkv * d);
        }
        pkv_tensor tq = pkv_tensor_host(q, 0, PKV_TENSOR_F32, T, hq, d);
        pkv_tensor tk = pkv_tensor_host(k, 0, PKV_TENSOR_F32, T, hkv, d);
        pkv_tensor tv = pkv_tensor_host(v, 0, PKV_TENSOR_F32, T, hkv, d);
        pkv_tensor to = pkv_tensor_host(out, 0, PKV_TENSOR_F32, T, hq, d);
        tries = 0;
        while ((st = pkv_engine_attend(host->engine, layer, &tq, &tk, &tv,
                                       &to)) != PKV_OK)
            retried(host, st, &tries);
        for (uint32_t i = 0; i < b->num_seqs; i++) {
            tm_seq *s = tm_find(host, b->seq_ids[i]);
            assert_non_null(s);
            assert_int_equal(b->context_lens[i] <= s->num_tokens, 1);
            for (uint32_t r = b->query_start[i]; r < b->query_start[i + 1];
                 r++) {
                uint32_t pos = b->positions[r];
                assert_int_equal(b->token_ids[r], s->tokens[pos]);
                if (pos % host->check_stride != 0 &&
                    r + 1 != b->query_start[i + 1])
                    continue;
                dense_row(host, s, pos, layer, q + (size_t)r * hq * d, ref);
                for (uint32_t c = 0; c < hq * d; c++) {
                    double err = fabs(out[(size_t)r * hq * d + c] - ref[c]);
                    if (err > host->max_error)
                        host->max_error = err;
                    if (!(err <= host->tolerance))
                        fail_msg("seq %llu row %u (position %u) layer %u "
                                 "element %u: %g vs reference %g",
                                 (unsigned long long)s->id, r, pos, layer, c,
                                 (double)out[(size_t)r * hq * d + c], ref[c]);
                }
                host->rows_checked++;
            }
        }
    }
    int32_t *sampled = malloc((b->num_samples + 1) * sizeof *sampled);
    assert_non_null(sampled);
    uint32_t vocab = p->vocab_size ? p->vocab_size : 1000;
    for (uint32_t j = 0; j < b->num_samples; j++) {
        uint32_t r = b->sample_rows[j];
        sampled[j] = tm_sample(b->token_ids[r], b->positions[r], vocab);
    }
    if (batch_out != NULL)
        *batch_out = b;
    /* Record the samples before step_end: the batch stays valid. A
     * sequence that ran k drafts has 1 + k samples: it keeps the drafts
     * the samples confirm, then the first sample that differs. */
    for (uint32_t j = 0; j < b->num_samples;) {
        tm_seq *s = tm_find(host, b->sample_seq_ids[j]);
        uint32_t n = 1;
        while (j + n < b->num_samples &&
               b->sample_seq_ids[j + n] == b->sample_seq_ids[j])
            n++;
        uint32_t first = s->num_tokens - s->drafts, a = 0;
        while (a + 1 < n && sampled[j + a] == s->tokens[first + a])
            a++;
        for (uint32_t i = 0; host->record_samples && i <= a; i++) {
            uint32_t r = b->sample_rows[j + i];
            record_sample(host, s, b->positions[r], outs, T, r);
        }
        s->num_tokens = first + a;
        s->drafts = 0;
        push_token(s, sampled[j + a]);
        j += n;
    }
    /* Drafts that did not run are gone. */
    for (uint32_t i = 0; i < host->num_seqs; i++) {
        host->seqs[i].num_tokens -= host->seqs[i].drafts;
        host->seqs[i].drafts = 0;
    }
    tries = 0;
    while ((st = pkv_engine_step_end(host->engine, sampled, NULL,
                                     b->num_samples)) != PKV_OK)
        retried(host, st, &tries);
    free(sampled);
    free(q);
    free(k);
    free(v);
    free(outs);
    free(ref);
}

pkv_seq_id tm_add_salted(tm_host *host, const int32_t *prompt, uint32_t len,
                         uint32_t max_new_tokens, uint64_t salt)
{
    pkv_seq_params sp;
    pkv_seq_params_init(&sp);
    sp.prompt = prompt;
    sp.prompt_len = len;
    sp.max_new_tokens = max_new_tokens;
    sp.cache_salt = salt;
    pkv_seq_id id = 0;
    assert_int_equal(pkv_seq_add(host->engine, &sp, &id), PKV_OK);
    tm_record(host, id, prompt, len);
    return id;
}

static void sleep_1ms(void)
{
    struct timespec t = {0, 1000000L};
    nanosleep(&t, NULL);
}

uint32_t tm_first_rows(tm_host *host, pkv_seq_id id)
{
    for (uint32_t i = 0; i < 20000; i++) {
        const pkv_batch *b;
        tm_step(host, &b);
        uint32_t rows = tm_rows_of(b, id);
        if (rows)
            return rows;
        if (b->num_tokens == 0)
            sleep_1ms();
    }
    fail_msg("sequence %llu never ran", (unsigned long long)id);
    return 0;
}

void tm_run_idle(tm_host *host)
{
    for (uint32_t i = 0; pkv_engine_has_work(host->engine); i++) {
        assert_true(i < 20000);
        const pkv_batch *b;
        tm_step(host, &b);
        if (b->num_tokens == 0)
            sleep_1ms();
    }
    tm_check_idle(host);
}

uint32_t tm_rows_of(const pkv_batch *b, pkv_seq_id id)
{
    for (uint32_t i = 0; i < b->num_seqs; i++)
        if (b->seq_ids[i] == id)
            return b->query_start[i + 1] - b->query_start[i];
    return 0;
}

void tm_run(tm_host *host, uint32_t max_steps)
{
    for (uint32_t i = 0; i < max_steps && pkv_engine_has_work(host->engine);
         i++)
        tm_step(host, NULL);
    assert_false(pkv_engine_has_work(host->engine));
}

void tm_check_idle(tm_host *host)
{
    pkv_engine_stats s;
    s.struct_size = sizeof s;
    assert_int_equal(pkv_engine_get_stats(host->engine, &s), PKV_OK);
    assert_int_equal(s.num_running + s.num_waiting + s.num_swapped, 0);
    assert_int_equal(s.blocks_free + s.blocks_cached_free, s.blocks_total - 1);
    assert_int_equal(s.blocks_used, 1);
    const pkv__pool *pool = &host->engine->pool;
    for (uint32_t b = 0; b < pool->num_blocks; b++)
        assert_int_equal(pool->blocks[b].ref_count, 0);
    assert_int_equal(host->engine->seqs.swap_used, 0);
}

#ifdef PKV_HAVE_OPENCL
int tm_opencl_start(void)
{
    if (!pkv__ocl_available()) {
        print_message("no OpenCL device: skipped\n");
        return 77;
    }
    const char *filter = getenv("PKV_TEST_FILTER");
    if (filter != NULL)
        cmocka_set_test_filter(filter);
    return 0;
}
#endif
