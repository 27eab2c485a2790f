/* SPDX-License-Identifier: MIT */
/*
 * The llama example's model (examples/llama/model.c) served through pkv
 * against the same model with plain dense attention: greedy tokens with f32
 * KV equal token for token (also when a small pool forces preemption), and
 * the top-1 agreement of f16 and u8 KV is reported. And the llama2.c
 * checkpoint loader on files this test writes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "attend.h"
#include "model.h"
#include "sample.h"

#include <pkv/pkv.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NUM_PROMPTS 8
#define PREFIX_LEN 24

typedef struct workload {
    int32_t *prompts[NUM_PROMPTS];
    uint32_t prompt_len[NUM_PROMPTS];
    uint32_t max_new[NUM_PROMPTS];
    int32_t *expected[NUM_PROMPTS]; /* dense greedy tokens, max_new each */
} workload;

static llama_config small_config(void)
{
    llama_config c;
    c.dim = 64;
    c.hidden_dim = 160;
    c.num_layers = 2;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.vocab_size = 256;
    c.seq_len = 256;
    c.shared_classifier = 0;
    return c;
}

static void make_workload(workload *w, const llama_config *c)
{
    memset(w, 0, sizeof *w);
    uint64_t rng = 7;
    int32_t prefix[PREFIX_LEN];
    for (uint32_t t = 0; t < PREFIX_LEN; t++)
        prefix[t] = (int32_t)(host_rand(&rng) % c->vocab_size);
    for (uint32_t i = 0; i < NUM_PROMPTS; i++) {
        uint32_t user = 3 + (uint32_t)(host_rand(&rng) % 50);
        w->prompt_len[i] = PREFIX_LEN + user;
        w->max_new[i] = 8 + (uint32_t)(host_rand(&rng) % 24);
        w->prompts[i] = malloc(w->prompt_len[i] * sizeof(int32_t));
        w->expected[i] = malloc(w->max_new[i] * sizeof(int32_t));
        assert_true(w->prompts[i] && w->expected[i]);
        memcpy(w->prompts[i], prefix, sizeof prefix);
        for (uint32_t t = 0; t < user; t++)
            w->prompts[i][PREFIX_LEN + t] =
                (int32_t)(host_rand(&rng) % c->vocab_size);
    }
}

static void free_workload(workload *w)
{
    for (uint32_t i = 0; i < NUM_PROMPTS; i++) {
        free(w->prompts[i]);
        free(w->expected[i]);
    }
}

/* Greedy tokens of every prompt, one sequence at a time, dense cache. */
static void run_dense(const llama_model *m, workload *w)
{
    const llama_config *c = &m->config;
    llama_dense_cache d;
    llama_scratch s;
    assert_int_equal(llama_dense_cache_init(&d, c), 0);
    assert_int_equal(llama_scratch_init(&s, c, c->seq_len), 0);
    uint64_t processed = 0;
    for (uint32_t i = 0; i < NUM_PROMPTS; i++)
        assert_int_equal(llama_dense_generate(m, &s, &d, w->prompts[i],
                                              w->prompt_len[i], w->max_new[i],
                                              0, NULL, -1, w->expected[i],
                                              &processed),
                         (int)w->max_new[i]);
    llama_dense_cache_free(&d);
    llama_scratch_free(&s);
}

/* ------------------------------------------------------------- pkv serving */

typedef struct pkv_result {
    uint32_t mismatches;   /* greedy tokens unequal to the dense ones */
    uint32_t agree, total; /* teacher-forced top-1 agreement */
    uint64_t preemptions;
    uint64_t prefix_hits;
} pkv_result;

/*
 * Serve the workload through pkv, prompts arriving two per step. Greedy
 * (teacher_forced 0): count tokens unequal to the dense run. Teacher
 * forced: feed the dense tokens back and count how often pkv's argmax
 * agrees, so that one early difference does not spoil the rest.
 */
static pkv_result run_pkv(const llama_model *m, const workload *w,
                          int32_t kv_dtype, uint32_t num_blocks,
                          int teacher_forced)
{
    const llama_config *c = &m->config;
    pkv_engine_params p;
    llama_engine_params(&p, c);
    p.kv_dtype = kv_dtype;
    p.num_blocks = num_blocks;
    p.max_batch_tokens = 64; /* prompts are cut into chunks */
    p.backend = PKV_BACKEND_KIND_CPU;
    pkv_engine *e = NULL;
    assert_int_equal(pkv_engine_create(&p, &e), PKV_OK);
    llama_pkv_attend ctx = {e, c};
    llama_scratch s;
    assert_int_equal(llama_scratch_init(&s, c, p.max_batch_tokens), 0);
    float *logits = malloc((size_t)p.max_batch_tokens * c->vocab_size *
                           sizeof *logits);
    int32_t *sampled = malloc(p.max_batch_tokens * sizeof *sampled);
    assert_true(logits && sampled);
    pkv_seq_id ids[NUM_PROMPTS];
    uint32_t generated[NUM_PROMPTS] = {0}, added = 0;
    pkv_result res;
    memset(&res, 0, sizeof res);
    while (added < NUM_PROMPTS || pkv_engine_has_work(e)) {
        for (uint32_t k = 0; k < 2 && added < NUM_PROMPTS; k++, added++) {
            pkv_seq_params sp;
            pkv_seq_params_init(&sp);
            sp.prompt = w->prompts[added];
            sp.prompt_len = w->prompt_len[added];
            sp.max_new_tokens = w->max_new[added];
            assert_int_equal(pkv_seq_add(e, &sp, &ids[added]), PKV_OK);
        }
        const pkv_batch *b;
        assert_int_equal(pkv_engine_step_begin(e, &b), PKV_OK);
        for (uint32_t i = 0; i < b->num_finished; i++)
            assert_int_equal(b->finished[i].reason, PKV_FINISH_REASON_LENGTH);
        assert_int_equal(llama_forward(m, &s, b->num_tokens, b->token_ids,
                                       b->positions, llama_attend_pkv, &ctx,
                                       b->sample_rows, b->num_samples,
                                       logits),
                         0);
        for (uint32_t j = 0; j < b->num_samples; j++) {
            uint32_t i = 0;
            while (i < added && ids[i] != b->sample_seq_ids[j])
                i++;
            assert_true(i < added);
            /* A preempted sequence resumes from its tokens: it never
             * samples one position twice. */
            assert_true(generated[i] < w->max_new[i]);
            int32_t top = host_sample(logits + (size_t)j * c->vocab_size,
                                       c->vocab_size, 0, 1, NULL);
            int32_t want = w->expected[i][generated[i]];
            if (teacher_forced) {
                res.agree += top == want;
                res.total++;
                sampled[j] = want;
            } else {
                res.mismatches += top != want;
                sampled[j] = top;
            }
            generated[i]++;
        }
        assert_int_equal(pkv_engine_step_end(e, sampled, NULL,
                                             b->num_samples),
                         PKV_OK);
    }
    for (uint32_t i = 0; i < NUM_PROMPTS; i++)
        assert_int_equal(generated[i], w->max_new[i]);
    pkv_engine_stats st;
    st.struct_size = sizeof st;
    assert_int_equal(pkv_engine_get_stats(e, &st), PKV_OK);
    res.preemptions = st.preemptions;
    res.prefix_hits = st.prefix_hit_tokens;
    llama_scratch_free(&s);
    free(logits);
    free(sampled);
    pkv_engine_destroy(e);
    return res;
}

static void test_pkv_equals_dense(void **state)
{
    (void)state;
    llama_config c = small_config();
    llama_model m;
    assert_int_equal(llama_model_init_random(&m, &c, 1234), 0);
    workload w;
    make_workload(&w, &c);
    run_dense(&m, &w);
    /* The equality below means something only if the model does not
     * repeat one token. */
    uint32_t distinct = 0;
    int seen[256] = {0};
    for (uint32_t i = 0; i < NUM_PROMPTS; i++)
        for (uint32_t g = 0; g < w.max_new[i]; g++)
            distinct += !seen[w.expected[i][g]]++;
    assert_true(distinct >= 16);

    /* A roomy pool, then one with room for about two sequences. */
    pkv_result roomy = run_pkv(&m, &w, PKV_KV_DTYPE_F32, 128, 0);
    assert_int_equal(roomy.mismatches, 0);
    assert_true(roomy.prefix_hits > 0);
    pkv_result tight = run_pkv(&m, &w, PKV_KV_DTYPE_F32, 12, 0);
    assert_int_equal(tight.mismatches, 0);
    assert_true(tight.preemptions > 0);
    printf("f32 KV: greedy tokens equal dense attention token for token "
           "(%u distinct tokens; roomy pool %llu prefix-hit tokens, tight "
           "pool %llu preemptions)\n",
           distinct, (unsigned long long)roomy.prefix_hits,
           (unsigned long long)tight.preemptions);

    static const int32_t dtypes[] = {PKV_KV_DTYPE_F32, PKV_KV_DTYPE_F16,
                                     PKV_KV_DTYPE_U8};
    static const char *const names[] = {"f32", "f16", "u8"};
    for (int k = 0; k < 3; k++) {
        pkv_result r = run_pkv(&m, &w, dtypes[k], 128, 1);
        double agreement = (double)r.agree / (double)r.total;
        printf("%s KV: top-1 agreement with dense f32, teacher forced: "
               "%.1f%% (%u of %u)\n",
               names[k], 100.0 * agreement, r.agree, r.total);
        assert_true(agreement >= (dtypes[k] == PKV_KV_DTYPE_U8 ? 0.5 : 0.9));
    }
    free_workload(&w);
    llama_model_free(&m);
}

/* ------------------------------------------------------------- checkpoint */

/* Write a llama2.c checkpoint of config c, every float i of the weights
 * (RoPE tables included) equal to value(i). */
static float value(size_t i)
{
    return (float)((double)(i % 1000) / 500.0 - 1.0);
}

static size_t write_checkpoint(const char *path, const llama_config *c,
                               int truncate)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    int32_t h[7] = {(int32_t)c->dim,
                    (int32_t)c->hidden_dim,
                    (int32_t)c->num_layers,
                    (int32_t)c->num_heads,
                    (int32_t)c->num_kv_heads,
                    c->shared_classifier ? (int32_t)c->vocab_size
                                         : -(int32_t)c->vocab_size,
                    (int32_t)c->seq_len};
    assert_int_equal(fwrite(h, sizeof h[0], 7, f), 7);
    size_t d = c->dim, hd = c->hidden_dim, l = c->num_layers;
    size_t kv = c->num_kv_heads * (d / c->num_heads), v = c->vocab_size;
    size_t n = v * d + l * d + l * d * d + 2 * l * kv * d + l * d * d +
               l * d + 3 * l * hd * d + d + c->seq_len * (d / c->num_heads) +
               (c->shared_classifier ? 0 : v * d);
    for (size_t i = 0; i < n - (truncate ? 1 : 0); i++) {
        float x = value(i);
        assert_int_equal(fwrite(&x, sizeof x, 1, f), 1);
    }
    assert_int_equal(fclose(f), 0);
    return n;
}

/* The weight array ptr starts at float `at` of the file's weights. */
static void expect_at(const llama_model *m, const float *ptr, size_t at,
                      size_t count)
{
    assert_true(ptr >= m->storage);
    for (size_t i = 0; i < count; i++)
        assert_true(ptr[i] == value(at + i));
}

static void test_checkpoint_roundtrip(void **state)
{
    (void)state;
    char path[] = "test_llama_ckpt.bin";
    for (int shared = 0; shared < 2; shared++) {
        llama_config c = small_config();
        c.shared_classifier = shared;
        c.seq_len = 128;
        write_checkpoint(path, &c, 0);
        llama_model m;
        char err[256];
        int rc = llama_model_load(&m, path, err, sizeof err);
        if (rc != 0)
            fail_msg("load: %s", err);
        assert_int_equal(m.config.dim, c.dim);
        assert_int_equal(m.config.hidden_dim, c.hidden_dim);
        assert_int_equal(m.config.num_layers, c.num_layers);
        assert_int_equal(m.config.num_heads, c.num_heads);
        assert_int_equal(m.config.num_kv_heads, c.num_kv_heads);
        assert_int_equal(m.config.vocab_size, c.vocab_size);
        assert_int_equal(m.config.seq_len, c.seq_len);
        assert_int_equal(m.config.shared_classifier, shared);
        /* Every array where llama2.c's reader puts it. */
        size_t d = c.dim, hd = c.hidden_dim, l = c.num_layers;
        size_t kv = llama_kv_dim(&c), v = c.vocab_size, at = 0;
        expect_at(&m, m.w.token_embedding, at, v * d);
        at += v * d;
        expect_at(&m, m.w.rms_att, at, l * d);
        at += l * d;
        expect_at(&m, m.w.wq, at, l * d * d);
        at += l * d * d;
        expect_at(&m, m.w.wk, at, l * kv * d);
        at += l * kv * d;
        expect_at(&m, m.w.wv, at, l * kv * d);
        at += l * kv * d;
        expect_at(&m, m.w.wo, at, l * d * d);
        at += l * d * d;
        expect_at(&m, m.w.rms_ffn, at, l * d);
        at += l * d;
        expect_at(&m, m.w.w1, at, l * hd * d);
        at += l * hd * d;
        expect_at(&m, m.w.w2, at, l * d * hd);
        at += l * d * hd;
        expect_at(&m, m.w.w3, at, l * hd * d);
        at += l * hd * d;
        expect_at(&m, m.w.rms_final, at, d);
        at += d + c.seq_len * llama_head_dim(&c); /* RoPE tables skipped */
        if (shared)
            assert_ptr_equal(m.w.classifier, m.w.token_embedding);
        else
            expect_at(&m, m.w.classifier, at, v * d);

        /* The loaded model serves through pkv like the random one. */
        workload w;
        make_workload(&w, &m.config);
        for (uint32_t i = 0; i < NUM_PROMPTS; i++)
            w.max_new[i] = w.max_new[i] < 6 ? w.max_new[i] : 6;
        run_dense(&m, &w);
        assert_int_equal(run_pkv(&m, &w, PKV_KV_DTYPE_F32, 64, 0).mismatches,
                         0);
        free_workload(&w);
        llama_model_free(&m);

        /* A truncated file is refused, with a message. */
        write_checkpoint(path, &c, 1);
        assert_int_equal(llama_model_load(&m, path, err, sizeof err), -1);
        assert_non_null(strstr(err, "truncated"));
        assert_null(m.storage);
    }
    /* A bad header is refused. */
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    int32_t bad[7] = {64, 160, 2, 3, 2, 256, 64}; /* heads do not divide */
    assert_int_equal(fwrite(bad, sizeof bad[0], 7, f), 7);
    assert_int_equal(fclose(f), 0);
    llama_model m;
    char err[256];
    assert_int_equal(llama_model_load(&m, path, err, sizeof err), -1);
    assert_int_equal(llama_model_load(&m, "no/such/file.bin", err, sizeof err),
                     -1);
    remove(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pkv_equals_dense),
        cmocka_unit_test(test_checkpoint_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
