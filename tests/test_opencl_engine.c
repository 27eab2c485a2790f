/* SPDX-License-Identifier: MIT */
/*
 * The engine loop on the OpenCL backend with the deterministic test model
 * (check_host.h), every output row checked against the dense f64
 * reference, through prefix hits, forks, and preemption by recompute and
 * by swap; host cl_mem tensors and the host's own queue; and the faults:
 * a program that does not build, a cache larger than the device allows,
 * invalid interop cl_mem tensors, a corrupt program-cache file.
 *
 * Tolerances against the dense reference are those the CPU backend meets
 * (test_sched.c): 1e-4 for f32 caches, 5e-3 for f16 (storage rounding of
 * K and V), 0.05 for u8 (quantization, |x - x'| <= scale / 2). The OpenCL
 * backend is within 2e-5 of the CPU backend on identical inputs
 * (test_opencl.c), far inside each of them. Where the two engines are
 * compared directly (cl_mem tensors against host tensors) the bound is
 * that 2e-5, or one f16 ulp (1e-3 here) for f16 outputs.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#define CL_TARGET_OPENCL_VERSION 120

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kv_layout.h"
#include "pkv/pkv_opencl.h"
#include "check_host_cmocka.h"
#include "hash_model.h"

#include "opencl/opencl.h"
#include "opencl/program.h"
#include "engine.h"
#include "seqs.h"
#include "half.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const int32_t dtypes[] = {PKV_KV_DTYPE_F32, PKV_KV_DTYPE_F16,
                                 PKV_KV_DTYPE_U8, PKV_KV_DTYPE_U4,
                                 PKV_KV_DTYPE_U8K_U4V};
#define NUM_DTYPES (int)(sizeof dtypes / sizeof dtypes[0])

/* Counts bytes the engine allocates, to check that failures leak none. */
typedef struct counter {
    long long live;
} counter;

static void *count_alloc(void *user, size_t size)
{
    void *p = malloc(size);
    if (p != NULL)
        ((counter *)user)->live += (long long)size;
    return p;
}

static void count_free(void *user, void *ptr, size_t size)
{
    if (ptr != NULL)
        ((counter *)user)->live -= (long long)size;
    free(ptr);
}

typedef struct log_capture {
    int warnings;
    char last[512];
} log_capture;

static void capture_log(void *user, int32_t level, const char *message)
{
    log_capture *l = user;
    if (level <= PKV_LOG_LEVEL_WARN)
        l->warnings++;
    strncpy(l->last, message, sizeof l->last - 1);
    l->last[sizeof l->last - 1] = '\0';
}

/* ---------------------------------------------------------- engine loop */

static void test_decode_and_prefix_hit(void **state)
{
    (void)state;
    for (int k = 0; k < NUM_DTYPES; k++) {
        pkv_engine_params p = hm_params(PKV_BACKEND_KIND_OPENCL);
        p.kv_dtype = dtypes[k];
        ch_host h;
        ch_cmocka_init(&h, &p, hm_tolerance(dtypes[k]));
        int32_t *prompt = hm_prompt(19, 4);
        ch_add_prompt(&h, prompt, 19, 6, 0, 0);
        ch_run(&h, 100);
        /* The same prompt again: 4 full blocks hit, 3 tokens computed. */
        ch_add_prompt(&h, prompt, 19, 6, 0, 0);
        const pkv_batch *b;
        ch_step(&h, &b);
        assert_int_equal(b->num_tokens, 3);
        ch_run(&h, 100);
        pkv_engine_stats s;
        s.struct_size = sizeof s;
        assert_int_equal(pkv_engine_get_stats(h.engine, &s), PKV_OK);
        assert_int_equal(s.prefix_hit_tokens, 16);
        assert_true(h.rows_checked > 0);
        ch_check_idle(&h);
        free(prompt);
        ch_free(&h);
    }
}

static void test_fork_then_diverge(void **state)
{
    (void)state;
    for (int k = 0; k < NUM_DTYPES; k++) {
        pkv_engine_params p = hm_params(PKV_BACKEND_KIND_OPENCL);
        p.kv_dtype = dtypes[k];
        ch_host h;
        ch_cmocka_init(&h, &p, hm_tolerance(dtypes[k]));
        int32_t *prompt = hm_prompt(10, 50);
        pkv_seq_id parent = ch_add_prompt(&h, prompt, 10, 8, 0, 0);
        ch_step(&h, NULL);
        for (int i = 0; i < 3; i++) {
            pkv_seq_id kid;
            assert_int_equal(ch_fork(&h, parent, 100 + i, &kid),
                             PKV_OK);
        }
        ch_run(&h, 100);
        ch_check_idle(&h);
        free(prompt);
        ch_free(&h);
    }
}

/* A pool too small for everyone: preemption, resumption, every row equal
 * to the dense reference. */
static void run_tiny_pool(int32_t mode, int k)
{
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_OPENCL);
    p.num_blocks = 13;
    p.watermark = 0;
    p.preempt_mode = mode;
    p.kv_dtype = dtypes[k];
    p.swap_bytes = 1 << 20;
    ch_host h;
    ch_cmocka_init(&h, &p, hm_tolerance(dtypes[k]));
    int32_t *prompts[4];
    for (uint32_t i = 0; i < 4; i++) {
        prompts[i] = hm_prompt(9, 20 + i);
        ch_add_prompt(&h, prompts[i], 9, 12, 0, 0);
    }
    ch_run(&h, 500);
    pkv_engine_stats st;
    st.struct_size = sizeof st;
    assert_int_equal(pkv_engine_get_stats(h.engine, &st), PKV_OK);
    assert_true(st.preemptions > 0);
    if (mode == PKV_PREEMPT_MODE_SWAP)
        assert_true(st.swap_outs > 0 && st.swap_ins == st.swap_outs);
    ch_check_idle(&h);
    for (uint32_t i = 0; i < 4; i++)
        free(prompts[i]);
    ch_free(&h);
}

static void test_preemption(void **state)
{
    (void)state;
    for (int k = 0; k < NUM_DTYPES; k++) {
        run_tiny_pool(PKV_PREEMPT_MODE_RECOMPUTE, k);
        run_tiny_pool(PKV_PREEMPT_MODE_SWAP, k);
    }
}

/* Many sequences of mixed lengths at once, a wider geometry, a window. */
static void test_mixed_load(void **state)
{
    (void)state;
    for (int k = 0; k < NUM_DTYPES; k++) {
        pkv_engine_params p = hm_params(PKV_BACKEND_KIND_OPENCL);
        p.kv_dtype = dtypes[k];
        p.num_q_heads = 6;
        p.num_kv_heads = 2;
        p.head_dim = 64;
        p.block_size = 16;
        p.sliding_window = k == 1 ? 40 : 0;
        p.max_batch_tokens = 128;
        p.num_blocks = 64;
        ch_host h;
        ch_cmocka_init(&h, &p, hm_tolerance(dtypes[k]));
        h.check_stride = 3;
        int32_t *prompts[12];
        for (uint32_t i = 0; i < 12; i++) {
            uint32_t len = 5 + 23 * i % 90;
            prompts[i] = hm_prompt(len, 300 + i % 4);
            ch_add_prompt(&h, prompts[i], len, 4 + i % 5, 0, 0);
        }
        ch_run(&h, 1000);
        ch_check_idle(&h);
        for (uint32_t i = 0; i < 12; i++)
            free(prompts[i]);
        ch_free(&h);
    }
}

/* ------------------------------------------------------- cl_mem tensors */

static cl_mem new_buffer(cl_context ctx, size_t bytes)
{
    cl_int err;
    cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes ? bytes : 16,
                              NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    return m;
}

/* Fill q, k, v of a layer with the test model's rows. */
static void model_rows(const pkv_engine_params *p, const pkv_batch *b,
                       uint32_t layer, float *q, float *k, float *v)
{
    uint32_t hq = p->num_q_heads, hkv = p->num_kv_heads, d = p->head_dim;
    for (uint32_t r = 0; r < b->num_tokens; r++) {
        hm_row(HM_Q, b->token_ids[r], b->positions[r], layer, hq, d,
               q + (size_t)r * hq * d);
        hm_row(HM_K, b->token_ids[r], b->positions[r], layer, hkv, d,
               k + (size_t)r * hkv * d);
        hm_row(HM_V, b->token_ids[r], b->positions[r], layer, hkv, d,
               v + (size_t)r * hkv * d);
    }
}

/* Two engines with the same params: one on host tensors (the CPU
 * backend), one on cl_mem tensors on the host's own queue. Each step's
 * outputs must agree. */
static void run_interop(int32_t tensor_dtype, int32_t kv_dtype,
                        cl_context ctx, cl_command_queue queue)
{
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_OPENCL);
    p.kv_dtype = kv_dtype;
    /* The smallest head_dim and block the intel kernels take. */
    p.head_dim = 32;
    p.block_size = 8;
    pkv_engine_params pc = p;
    pc.backend = PKV_BACKEND_KIND_CPU;
    assert_int_equal(pkv_engine_params_set_opencl(&p, ctx, queue), PKV_OK);
    pkv_engine *eo = NULL, *ec = NULL;
    assert_int_equal(pkv_engine_create(&p, &eo), PKV_OK);
    assert_int_equal(pkv_engine_create(&pc, &ec), PKV_OK);
    cl_context gctx;
    cl_command_queue gq;
    assert_int_equal(pkv_engine_get_opencl(eo, &gctx, &gq), PKV_OK);
    assert_ptr_equal(gctx, ctx);
    assert_ptr_equal(gq, queue);
    assert_int_equal(pkv_engine_get_opencl(ec, &gctx, &gq),
                     PKV_ERR_UNSUPPORTED);
    for (uint32_t i = 0; i < 3; i++) {
        int32_t *prompt = hm_prompt(7 + 5 * i, 60 + i);
        pkv_seq_params sp;
        pkv_seq_params_init(&sp);
        sp.prompt = prompt;
        sp.prompt_len = 7 + 5 * i;
        sp.max_new_tokens = 5;
        pkv_seq_id id;
        assert_int_equal(pkv_seq_add(eo, &sp, &id), PKV_OK);
        assert_int_equal(pkv_seq_add(ec, &sp, &id), PKV_OK);
        free(prompt);
    }
    uint32_t hq = p.num_q_heads, hkv = p.num_kv_heads, d = p.head_dim;
    size_t es = tensor_dtype == PKV_TENSOR_DTYPE_F16 ? 2 : 4;
    double tol = tensor_dtype == PKV_TENSOR_DTYPE_F16 ? 1e-3 : 2e-5;
    for (int step = 0; pkv_engine_has_work(ec); step++) {
        assert_true(step < 100);
        const pkv_batch *bo, *bc;
        assert_int_equal(pkv_engine_step_begin(eo, &bo), PKV_OK);
        assert_int_equal(pkv_engine_step_begin(ec, &bc), PKV_OK);
        uint32_t T = bc->num_tokens;
        assert_int_equal(bo->num_tokens, T);
        size_t qn = (size_t)T * hq * d, kn = (size_t)T * hkv * d;
        float *q = calloc(qn + 1, 4), *k = calloc(kn + 1, 4);
        float *v = calloc(kn + 1, 4), *out = calloc(qn + 1, 4);
        void *hbuf[4];
        for (int i = 0; i < 4; i++)
            hbuf[i] = calloc((i == 1 || i == 2 ? kn : qn) + 1, es);
        float *dev_out = calloc(qn + 1, 4);
        assert_true(q && k && v && out && dev_out);
        /* One buffer for all four tensors, at offsets: nothing but the
         * offset tells them apart. */
        size_t off[4] = {64, 0, 0, 0};
        off[1] = off[0] + qn * es + 64;
        off[2] = off[1] + kn * es + 64;
        off[3] = off[2] + kn * es + 64;
        cl_mem buf = new_buffer(ctx, off[3] + qn * es + 64);
        for (uint32_t layer = 0; layer < p.num_layers; layer++) {
            model_rows(&p, bc, layer, q, k, v);
            float *src[3] = {q, k, v};
            size_t cnt[4] = {qn, kn, kn, qn};
            for (int i = 0; i < 3; i++) {
                if (es == 2)
                    pkv__f32_to_f16_n(src[i], hbuf[i], (uint32_t)cnt[i]);
                else
                    memcpy(hbuf[i], src[i], cnt[i] * 4);
                if (cnt[i] > 0)
                    assert_int_equal(
                        clEnqueueWriteBuffer(queue, buf, CL_TRUE, off[i],
                                             cnt[i] * es, hbuf[i], 0, NULL,
                                             NULL),
                        CL_SUCCESS);
            }
            pkv_tensor tq =
                pkv_tensor_host(hbuf[0], 0, tensor_dtype, T, hq, d);
            pkv_tensor tk =
                pkv_tensor_host(hbuf[1], 0, tensor_dtype, T, hkv, d);
            pkv_tensor tv =
                pkv_tensor_host(hbuf[2], 0, tensor_dtype, T, hkv, d);
            pkv_tensor to =
                pkv_tensor_host(hbuf[3], 0, tensor_dtype, T, hq, d);
            assert_int_equal(pkv_engine_attend(ec, layer, &tq, &tk, &tv, &to),
                             PKV_OK);
            pkv_tensor dq = pkv_tensor_opencl(buf, off[0], tensor_dtype, T,
                                              hq, d);
            pkv_tensor dk = pkv_tensor_opencl(buf, off[1], tensor_dtype, T,
                                              hkv, d);
            pkv_tensor dv = pkv_tensor_opencl(buf, off[2], tensor_dtype, T,
                                              hkv, d);
            pkv_tensor dout = pkv_tensor_opencl(buf, off[3], tensor_dtype, T,
                                                hq, d);
            pkv_status st = pkv_engine_attend(eo, layer, &dq, &dk, &dv, &dout);
            if (st != PKV_OK)
                fail_msg("cl_mem attend: %s", pkv_engine_last_error(eo));
            /* attend only enqueued: read on the same in-order queue. */
            if (qn > 0)
                assert_int_equal(clEnqueueReadBuffer(queue, buf, CL_TRUE,
                                                     off[3], qn * es, dev_out,
                                                     0, NULL, NULL),
                                 CL_SUCCESS);
            for (size_t i = 0; i < qn; i++) {
                const uint16_t *h16 = (const uint16_t *)(void *)dev_out;
                float a = es == 2 ? pkv__f16_to_f32(h16[i]) : dev_out[i];
                float c = es == 2
                              ? pkv__f16_to_f32(((uint16_t *)hbuf[3])[i])
                              : ((float *)hbuf[3])[i];
                if (!(fabs((double)a - (double)c) <= tol))
                    fail_msg("step %d layer %u element %zu: cl_mem %g, host "
                             "%g",
                             step, layer, i, (double)a, (double)c);
            }
        }
        clReleaseMemObject(buf);
        int32_t *sampled = calloc(bc->num_samples + 1, sizeof *sampled);
        for (uint32_t j = 0; j < bc->num_samples; j++)
            sampled[j] = hm_sample(bc->token_ids[bc->sample_rows[j]],
                                   bc->positions[bc->sample_rows[j]], 1000);
        assert_int_equal(
            pkv_engine_step_end(eo, sampled, NULL, bc->num_samples), PKV_OK);
        assert_int_equal(
            pkv_engine_step_end(ec, sampled, NULL, bc->num_samples), PKV_OK);
        free(sampled);
        free(q);
        free(k);
        free(v);
        free(out);
        free(dev_out);
        for (int i = 0; i < 4; i++)
            free(hbuf[i]);
    }
    assert_false(pkv_engine_has_work(eo));
    pkv_engine_destroy(eo);
    pkv_engine_destroy(ec);
}

/* The host's own context and queue, on the first device pkv would pick. */
static void host_queue(cl_context *ctx, cl_command_queue *queue)
{
    cl_platform_id plat;
    cl_device_id dev;
    cl_uint n = 0;
    assert_int_equal(clGetPlatformIDs(1, &plat, &n), CL_SUCCESS);
    assert_int_equal(clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, &n),
                     CL_SUCCESS);
    cl_int err;
    *ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    *queue = clCreateCommandQueue(*ctx, dev, 0, &err);
    assert_int_equal(err, CL_SUCCESS);
}

/* Every step uploads the block-table rows that changed since the previous
 * step and no others: a row changes when another sequence takes it or its
 * sequence took a new block. Prefill, decode and mixed steps (a prompt
 * admitted while the others decode) share the tables. The outputs
 * (ch_step checks every row against dense attention) show that the rows it
 * kept are the right ones. */
static void test_table_rows_uploaded(void **state)
{
    (void)state;
    setenv("PKV_OPENCL_DECODE", "gpu", 1);
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_OPENCL);
    ch_host h;
    ch_cmocka_init(&h, &p, 1e-4f);
    unsetenv("PKV_OPENCL_DECODE");
    enum { SEQS = 4, MAX_ROWS = 8 };
    int32_t *prompts[SEQS];
    for (uint32_t i = 0; i < SEQS; i++) /* crossing at other steps */
        prompts[i] = hm_prompt(5 + i, 20 + i);
    for (uint32_t i = 0; i < SEQS - 1; i++)
        ch_add_prompt(&h, prompts[i], 5 + i, 12, 0, 0);
    const pkv__backend *be = h.engine->device.backend;
    const uint32_t stride = 16; /* tables of at most 16 blocks */
    pkv_seq_id ids[MAX_ROWS];
    uint32_t blocks[MAX_ROWS], rows = 0, mixed = 0;
    uint64_t words = pkv__ocl_table_words(be);
    for (int step = 0; step < 12; step++) {
        if (step == 4) /* the last prompt joins the decoding sequences */
            ch_add_prompt(&h, prompts[SEQS - 1], 5 + SEQS - 1, 4, 0, 0);
        const pkv_batch *b;
        ch_step(&h, &b);
        assert_true(b->num_seqs <= MAX_ROWS);
        /* A row's blocks cover its context: no fork here, so a row's
         * table changes only when it gains a block. */
        uint32_t bs = p.block_size;
        uint32_t changed = 0;
        for (uint32_t r = 0; r < b->num_seqs; r++) {
            uint32_t nb = (b->context_lens[r] + bs - 1) / bs;
            changed += r >= rows || b->seq_ids[r] != ids[r] || nb != blocks[r];
            ids[r] = b->seq_ids[r];
            blocks[r] = nb;
        }
        rows = b->num_seqs;
        mixed += b->num_tokens > b->num_seqs && step > 0;
        uint64_t now = pkv__ocl_table_words(be);
        if (now - words != changed * (uint64_t)stride)
            fail_msg("step %d: %llu table words uploaded, expected %llu "
                     "(%u rows changed)",
                     step, (unsigned long long)(now - words),
                     (unsigned long long)changed * stride, (unsigned)changed);
        words = now;
    }
    assert_int_equal(mixed, 1);
    for (uint32_t i = 0; i < SEQS; i++)
        free(prompts[i]);
    ch_free(&h);
}

/* A layer's host-tensor attend (append and attention) waits for the
 * device once. */
static void test_one_wait_per_layer(void **state)
{
    (void)state;
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_OPENCL);
    ch_host h;
    ch_cmocka_init(&h, &p, 1e-4f);
    int32_t *prompt = hm_prompt(9, 3);
    ch_add_prompt(&h, prompt, 9, 4, 0, 0);
    for (int step = 0; step < 3; step++) { /* a prefill, then decodes */
        uint64_t before = pkv__ocl_finishes(h.engine->device.backend);
        ch_step(&h, NULL);
        assert_int_equal(pkv__ocl_finishes(h.engine->device.backend) - before,
                         p.num_layers);
    }
    free(prompt);
    ch_free(&h);
}

/* Host tensors go through the backend's own buffers: once those have
 * grown (the prefill, and the first decode step for the decode kernels'
 * partial results), a decode step creates no buffer, on any layer, even for
 * tensors aligned as a CL_MEM_USE_HOST_PTR wrap wants (pkv used to wrap those
 * with a clCreateBuffer per tensor and layer). */
static void test_no_buffer_per_layer(void **state)
{
    (void)state;
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_OPENCL);
    pkv_engine *e = NULL;
    assert_int_equal(pkv_engine_create(&p, &e), PKV_OK);
    int32_t *prompt = hm_prompt(9, 5);
    pkv_seq_params sp;
    pkv_seq_params_init(&sp);
    sp.prompt = prompt;
    sp.prompt_len = 9;
    sp.max_new_tokens = 5;
    pkv_seq_id id;
    assert_int_equal(pkv_seq_add(e, &sp, &id), PKV_OK);
    size_t nq = 9u * p.num_q_heads * p.head_dim;
    size_t nkv = 9u * p.num_kv_heads * p.head_dim;
    float *q = aligned_alloc(4096, 4096 * ((nq * 4 + 4095) / 4096));
    float *k = aligned_alloc(4096, 4096 * ((nkv * 4 + 4095) / 4096));
    float *v = aligned_alloc(4096, 4096 * ((nkv * 4 + 4095) / 4096));
    float *out = aligned_alloc(4096, 4096 * ((nq * 4 + 4095) / 4096));
    assert_true(q && k && v && out);
    for (size_t i = 0; i < nq; i++)
        q[i] = (float)(i % 7) * 0.25f;
    for (size_t i = 0; i < nkv; i++) {
        k[i] = (float)(i % 5) * 0.5f;
        v[i] = (float)(i % 3);
    }
    for (int step = 0; step < 5; step++) { /* a prefill, then decodes */
        const pkv_batch *b;
        uint64_t before = pkv__ocl_buffers_created(e->device.backend);
        assert_int_equal(pkv_engine_step_begin(e, &b), PKV_OK);
        uint32_t rows = b->num_tokens;
        pkv_tensor tq = pkv_tensor_host(q, 0, PKV_TENSOR_DTYPE_F32, rows,
                                        p.num_q_heads, p.head_dim);
        pkv_tensor tk = pkv_tensor_host(k, 0, PKV_TENSOR_DTYPE_F32, rows,
                                        p.num_kv_heads, p.head_dim);
        pkv_tensor tv = pkv_tensor_host(v, 0, PKV_TENSOR_DTYPE_F32, rows,
                                        p.num_kv_heads, p.head_dim);
        pkv_tensor to = pkv_tensor_host(out, 0, PKV_TENSOR_DTYPE_F32, rows,
                                        p.num_q_heads, p.head_dim);
        for (uint32_t layer = 0; layer < p.num_layers; layer++)
            assert_int_equal(pkv_engine_attend(e, layer, &tq, &tk, &tv, &to),
                             PKV_OK);
        /* Rows of one value each: a weighted mean of v stays in range. */
        for (size_t i = 0; i < (size_t)rows * p.num_q_heads * p.head_dim;
             i++)
            assert_true(out[i] >= 0.0f && out[i] <= 2.0f);
        int32_t sampled = 7;
        assert_int_equal(pkv_engine_step_end(e, &sampled, NULL, 1), PKV_OK);
        uint64_t created = pkv__ocl_buffers_created(e->device.backend) - before;
        if (step > 1 && created != 0)
            fail_msg("decode step %d created %llu buffers", step,
                     (unsigned long long)created);
    }
    free(q);
    free(k);
    free(v);
    free(out);
    free(prompt);
    pkv_engine_destroy(e);
}

static void test_interop(void **state)
{
    (void)state;
    cl_context ctx;
    cl_command_queue queue;
    host_queue(&ctx, &queue);
    /* Every decode variant and every prefill kernel (Intel's turn
     * themselves off where the device lacks their extensions) take f16
     * and f32 tensors at offsets. */
    static const char *const variants[] = {"cpu", "gpu", "intel"};
    static const char *const prefills[] = {"rows", "tiles", "intel"};
    for (int i = 0; i < 3; i++) {
        setenv("PKV_OPENCL_DECODE", variants[i], 1);
        setenv("PKV_OPENCL_PREFILL", prefills[i], 1);
        run_interop(PKV_TENSOR_DTYPE_F32, PKV_KV_DTYPE_F32, ctx, queue);
        run_interop(PKV_TENSOR_DTYPE_F16, PKV_KV_DTYPE_U8, ctx, queue);
        run_interop(PKV_TENSOR_DTYPE_F32, PKV_KV_DTYPE_F16, ctx, queue);
    }
    unsetenv("PKV_OPENCL_DECODE");
    unsetenv("PKV_OPENCL_PREFILL");
    clReleaseCommandQueue(queue);
    clReleaseContext(ctx);
}

/* Bad cl_mem tensors: a clear status each, the engine usable after. */
static void test_invalid_cl_mem(void **state)
{
    (void)state;
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_OPENCL);
    ch_host h;
    ch_cmocka_init(&h, &p, 1e-4f);
    int32_t *prompt = hm_prompt(6, 1);
    ch_add_prompt(&h, prompt, 6, 2, 0, 0);
    const pkv_batch *b;
    assert_int_equal(pkv_engine_step_begin(h.engine, &b), PKV_OK);
    cl_context ctx;
    cl_command_queue queue;
    assert_int_equal(pkv_engine_get_opencl(h.engine, &ctx, &queue), PKV_OK);
    uint32_t T = b->num_tokens, hq = 4, hkv = 2, d = 8;
    cl_mem big = new_buffer(ctx, 4096), small = new_buffer(ctx, 16);
    cl_context other;
    cl_command_queue other_q;
    host_queue(&other, &other_q);
    cl_mem foreign = new_buffer(other, 4096);
    pkv_tensor q = pkv_tensor_opencl(big, 0, PKV_TENSOR_DTYPE_F32, T, hq, d);
    pkv_tensor k =
        pkv_tensor_opencl(big, 1024, PKV_TENSOR_DTYPE_F32, T, hkv, d);
    pkv_tensor v =
        pkv_tensor_opencl(big, 2048, PKV_TENSOR_DTYPE_F32, T, hkv, d);
    pkv_tensor o = pkv_tensor_opencl(big, 3072, PKV_TENSOR_DTYPE_F32, T, hq, d);
    struct {
        pkv_tensor *t;
        cl_mem mem;
        uint64_t offset;
        pkv_status want;
        const char *says;
    } cases[] = {
        {&q, NULL, 0, PKV_ERR_INVALID_ARGUMENT, "data is NULL"},
        {&k, small, 0, PKV_ERR_INVALID_ARGUMENT, "needs"},
        {&v, big, 4000, PKV_ERR_INVALID_ARGUMENT, "needs"},
        {&v, big, 2050, PKV_ERR_INVALID_ARGUMENT, "multiple"},
        {&o, foreign, 0, PKV_ERR_INVALID_ARGUMENT, "another context"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pkv_tensor saved = *cases[i].t;
        cases[i].t->data = (void *)cases[i].mem;
        cases[i].t->offset = cases[i].offset;
        assert_int_equal(pkv_engine_attend(h.engine, 0, &q, &k, &v, &o),
                         cases[i].want);
        if (strstr(pkv_engine_last_error(h.engine), cases[i].says) == NULL)
            fail_msg("case %zu: '%s' does not say '%s'", i,
                     pkv_engine_last_error(h.engine), cases[i].says);
        *cases[i].t = saved;
    }
    /* Host and cl_mem tensors mixed. */
    float hostbuf[6 * 4 * 8];
    pkv_tensor hq_t =
        pkv_tensor_host(hostbuf, 0, PKV_TENSOR_DTYPE_F32, T, hq, d);
    assert_int_equal(pkv_engine_attend(h.engine, 0, &hq_t, &k, &v, &o),
                     PKV_ERR_INVALID_ARGUMENT);
    /* Still usable: the step runs with good tensors. */
    assert_int_equal(pkv_engine_attend(h.engine, 0, &q, &k, &v, &o), PKV_OK);
    assert_int_equal(pkv_engine_attend(h.engine, 1, &q, &k, &v, &o), PKV_OK);
    int32_t tok = 1;
    assert_int_equal(pkv_engine_step_end(h.engine, &tok, NULL, 1), PKV_OK);
    clReleaseMemObject(big);
    clReleaseMemObject(small);
    clReleaseMemObject(foreign);
    clReleaseCommandQueue(other_q);
    clReleaseContext(other);
    free(prompt);
    ch_free(&h);

    /* A CPU engine takes no cl_mem. */
    p.backend = PKV_BACKEND_KIND_CPU;
    ch_cmocka_init(&h, &p, 1e-4f);
    ch_add_prompt(&h, (const int32_t[]){1, 2, 3}, 3, 1, 0, 0);
    assert_int_equal(pkv_engine_step_begin(h.engine, &b), PKV_OK);
    q.rows = k.rows = v.rows = o.rows = 3;
    assert_int_equal(pkv_engine_attend(h.engine, 0, &q, &k, &v, &o),
                     PKV_ERR_UNSUPPORTED);
    ch_free(&h);
}

/* --------------------------------------------------------------- faults */

/* Create must fail with `want`, leave *out NULL, leak nothing. */
static void expect_create_fails(pkv_engine_params p, pkv_status want,
                                const char *says)
{
    counter c = {0};
    p.allocator.alloc = count_alloc;
    p.allocator.free = count_free;
    p.allocator.user = &c;
    pkv_engine *e = (pkv_engine *)&p;
    assert_int_equal(pkv_engine_create(&p, &e), want);
    assert_null(e);
    if (strstr(pkv_last_error(), says) == NULL)
        fail_msg("'%s' does not say '%s'", pkv_last_error(), says);
    assert_int_equal(c.live, 0);
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* A kernel tree in a temporary directory: the embedded files, with
 * `broken` appended to kernels/block_copy.cl. */
static void kernel_tree(char *dir, const char *broken)
{
    strcpy(dir, "/tmp/pkv-kernels-XXXXXX");
    assert_non_null(mkdtemp(dir));
    char path[512];
    snprintf(path, sizeof path, "%s/src", dir);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/kernels", dir);
    assert_int_equal(mkdir(path, 0700), 0);
    for (unsigned i = 0; i < pkv__kernel_num_files; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, pkv__kernel_files[i].name);
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        fwrite(pkv__kernel_files[i].data, 1, pkv__kernel_files[i].size, f);
        if (strcmp(pkv__kernel_files[i].name, "kernels/block_copy.cl") == 0)
            fputs(broken, f);
        fclose(f);
    }
}

static void remove_tree(const char *dir)
{
    char path[512];
    for (unsigned i = 0; i < pkv__kernel_num_files; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, pkv__kernel_files[i].name);
        remove(path);
    }
    snprintf(path, sizeof path, "%s/src", dir);
    rmdir(path);
    snprintf(path, sizeof path, "%s/kernels", dir);
    rmdir(path);
    rmdir(dir);
}

static void test_program_fails_to_build(void **state)
{
    (void)state;
    const char *saved = pkv__ocl_kernel_dir;
    char dir[64];
    kernel_tree(dir, "\n__kernel void broken(void) { this is not C; }\n");
    pkv__ocl_kernel_dir = dir;
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_OPENCL);
    expect_create_fails(p, PKV_ERR_BUILD, "clBuildProgram");
    /* AUTO falls back to the CPU backend and says so. */
    log_capture l;
    memset(&l, 0, sizeof l);
    p.backend = PKV_BACKEND_KIND_AUTO;
    p.log = capture_log;
    p.log_user = &l;
    p.log_level = PKV_LOG_LEVEL_WARN;
    pkv_engine *e = NULL;
    assert_int_equal(pkv_engine_create(&p, &e), PKV_OK);
    assert_int_equal(l.warnings, 1);
    assert_non_null(strstr(l.last, "CPU backend"));
    cl_context c;
    cl_command_queue q;
    assert_int_equal(pkv_engine_get_opencl(e, &c, &q), PKV_ERR_UNSUPPORTED);
    pkv_engine_destroy(e);
    remove_tree(dir);
    /* A kernel directory that does not exist. */
    pkv__ocl_kernel_dir = "/nonexistent/pkv";
    p = hm_params(PKV_BACKEND_KIND_OPENCL);
    expect_create_fails(p, PKV_ERR_BUILD, "cannot be read");
    pkv__ocl_kernel_dir = saved;
}

/* pkv_parallel_fn that runs every task on the caller, as worker 0. */
static void serial_parallel(void *user, pkv_task_fn task, void *arg,
                            uint32_t count)
{
    (void)user;
    for (uint32_t i = 0; i < count; i++)
        task(arg, i, 0);
}

/* AUTO runs the OpenCL device, but where that device is the CPU itself
 * and the host lends 2 threads or more, the CPU backend (pkv.h). */
static void test_auto_on_a_cpu_device(void **state)
{
    (void)state;
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_AUTO);
    pkv_engine *e = NULL;
    assert_int_equal(pkv_engine_create(&p, &e), PKV_OK);
    cl_context c;
    cl_command_queue q;
    assert_int_equal(pkv_engine_get_opencl(e, &c, &q), PKV_OK);
    cl_device_id dev;
    cl_device_type type;
    assert_int_equal(clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof dev,
                                           &dev, NULL),
                     CL_SUCCESS);
    assert_int_equal(clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof type,
                                     &type, NULL),
                     CL_SUCCESS);
    pkv_engine_destroy(e);
    int cpu_device = (type & CL_DEVICE_TYPE_CPU) != 0;
    p.parallel = serial_parallel;
    for (uint32_t workers = 1; workers <= 2; workers++) {
        p.parallel_workers = workers;
        assert_int_equal(pkv_engine_create(&p, &e), PKV_OK);
        int cpu_backend =
            strcmp(pkv_engine_backend_name(e), "cpu") == 0;
        assert_int_equal(cpu_backend, cpu_device && workers == 2);
        pkv_engine_destroy(e);
    }
}

static void test_cache_too_large(void **state)
{
    (void)state;
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_OPENCL);
    p.head_dim = 512;
    p.num_kv_heads = 8;
    p.num_q_heads = 8;
    p.block_size = 256;
    p.num_blocks = 1u << 16; /* 64 Ki blocks of 8 MiB per layer */
    expect_create_fails(p, PKV_ERR_DEVICE_MEMORY, "lower num_blocks");
    /* A largest step whose block tables pass the device's largest buffer:
     * refused here, so that step_begin never refuses a planned step
     * (65,536 sequences of 2^20 blocks of 16 tokens: 256 GiB). */
    p = hm_params(PKV_BACKEND_KIND_OPENCL);
    p.max_num_seqs = 65536;
    p.max_model_len = 1u << 24;
    p.block_size = 16;
    expect_create_fails(p, PKV_ERR_DEVICE_MEMORY,
                        "lower max_num_seqs or max_model_len");
    p.max_model_len = 1u << 14; /* 2^26 words of block tables: fits */
    pkv_engine *fits = NULL;
    assert_int_equal(pkv_engine_create(&p, &fits), PKV_OK);
    pkv_engine_destroy(fits);
    /* A device that is not there. */
    p = hm_params(PKV_BACKEND_KIND_OPENCL);
    p.opencl_device = "no such device anywhere";
    expect_create_fails(p, PKV_ERR_DEVICE, "no OpenCL device matches");
    /* Only one of the two host handles. */
    p = hm_params(PKV_BACKEND_KIND_OPENCL);
    p.opencl_queue = (void *)&p;
    expect_create_fails(p, PKV_ERR_INVALID_ARGUMENT, "together");
    /* A decode variant that does not exist. */
    setenv("PKV_OPENCL_DECODE", "fast", 1);
    p = hm_params(PKV_BACKEND_KIND_OPENCL);
    expect_create_fails(p, PKV_ERR_INVALID_ARGUMENT,
                        "PKV_OPENCL_DECODE=fast: expected auto, cpu, gpu");
    unsetenv("PKV_OPENCL_DECODE");
    setenv("PKV_OPENCL_PREFILL", "wide", 1);
    expect_create_fails(p, PKV_ERR_INVALID_ARGUMENT,
                        "PKV_OPENCL_PREFILL=wide: expected auto, rows, "
                        "tiles, intel or dpas");
    unsetenv("PKV_OPENCL_PREFILL");
}

/* The program-cache files in dir (at most 4). */
static int cache_files(const char *dir, char paths[4][512])
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *ent;
    int n = 0;
    while ((ent = readdir(d)) != NULL)
        if (strstr(ent->d_name, ".clbin") != NULL) {
            assert_true(n < 4);
            snprintf(paths[n++], 512, "%s/%s", dir, ent->d_name);
        }
    closedir(d);
    return n;
}

static size_t read_file(const char *path, unsigned char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

static void create_with_cache(const char *dir, cl_context ctx,
                              cl_command_queue queue, log_capture *l)
{
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_OPENCL);
    p.program_cache_dir = dir;
    p.log = capture_log;
    p.log_user = l;
    p.log_level = PKV_LOG_LEVEL_DEBUG;
    assert_int_equal(pkv_engine_params_set_opencl(&p, ctx, queue), PKV_OK);
    memset(l, 0, sizeof *l);
    ch_host h;
    ch_cmocka_init(&h, &p, 1e-4f);
    int32_t prompt[5] = {1, 2, 3, 4, 5};
    ch_add_prompt(&h, prompt, 5, 3, 0, 0);
    ch_run(&h, 20);
    ch_free(&h);
}

/* Counts the disk-cache hits an engine logs. */
static void count_hits(void *user, int32_t level, const char *message)
{
    (void)level;
    if (strstr(message, "program cache hit") != NULL)
        (*(int *)user)++;
}

/* An engine on pkv's own context with a disk cache, run a few steps: the
 * disk-cache hits it logged. */
static int run_own_context(const char *dir, ch_host *keep)
{
    int hits = 0;
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_OPENCL);
    p.program_cache_dir = dir;
    p.log = count_hits;
    p.log_user = &hits;
    p.log_level = PKV_LOG_LEVEL_DEBUG;
    ch_host h;
    ch_cmocka_init(&h, &p, 1e-4f);
    int32_t prompt[5] = {1, 2, 3, 4, 5};
    ch_add_prompt(&h, prompt, 5, 3, 0, 0);
    ch_run(&h, 20);
    if (keep != NULL)
        *keep = h;
    else
        ch_free(&h);
    return hits;
}

/* A cache directory of a test and its files. */
static void remove_dir(const char *dir)
{
    char path[600];
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *ent; (ent = readdir(d)) != NULL;)
        if (ent->d_name[0] != '.') {
            snprintf(path, sizeof path, "%s/%s", dir, ent->d_name);
            remove(path);
        }
    closedir(d);
    rmdir(dir);
}

/* pkv_opencl_release_programs: the next engine loads its programs again
 * (from the disk cache here), while shared ones need no load; an engine
 * alive across the release runs on. */
static void test_release_programs(void **state)
{
    (void)state;
    char dir[64];
    strcpy(dir, "/tmp/pkv-cache-XXXXXX");
    assert_non_null(mkdtemp(dir));
    pkv_opencl_release_programs(); /* earlier tests' programs */
    assert_int_equal(run_own_context(dir, NULL), 0); /* built, written */
    pkv_opencl_release_programs();
    ch_host alive;
    assert_true(run_own_context(dir, &alive) > 0); /* loaded from disk */
    assert_int_equal(run_own_context(dir, NULL), 0); /* shared */
    pkv_opencl_release_programs();
    int32_t prompt[5] = {5, 4, 3, 2, 1};
    ch_add_prompt(&alive, prompt, 5, 3, 0, 0);
    ch_run(&alive, 20); /* its programs are its own to keep */
    ch_free(&alive);
    pkv_opencl_release_programs();
    remove_dir(dir);
}

static void test_program_cache(void **state)
{
    (void)state;
    char dir[64];
    strcpy(dir, "/tmp/pkv-cache-XXXXXX");
    assert_non_null(mkdtemp(dir));
    cl_context ctx;
    cl_command_queue queue;
    host_queue(&ctx, &queue);
    log_capture l;
    /* The generic and the decode programs, both built at creation: one
     * file each. */
    create_with_cache(dir, ctx, queue, &l);
    char paths[4][512];
    int files = cache_files(dir, paths);
    assert_int_equal(files, 2);
    /* Warm: hits, no warning. */
    create_with_cache(dir, ctx, queue, &l);
    assert_int_equal(l.warnings, 0);
    /* Corrupt every file: a flipped payload byte, then a truncated file,
     * then a bad header. Each is rebuilt (one warning per file), never
     * trusted, and rewritten whole. */
    static unsigned char bin[2][32 << 20];
    size_t n[2];
    for (int i = 0; i < files; i++) {
        n[i] = read_file(paths[i], bin[i], sizeof bin[i]);
        assert_true(n[i] > 64 && n[i] < sizeof bin[i]);
    }
    for (int mode = 0; mode < 3; mode++) {
        for (int i = 0; i < files; i++) {
            bin[i][n[i] / 2] ^= mode == 0 ? 0x5a : 0;
            if (mode == 2)
                write_file(paths[i], "garbage", 7);
            else
                write_file(paths[i], bin[i], mode == 1 ? n[i] / 3 : n[i]);
            bin[i][n[i] / 2] ^= mode == 0 ? 0x5a : 0;
        }
        create_with_cache(dir, ctx, queue, &l);
        assert_int_equal(l.warnings, files);
        /* Rewritten whole: the next engine loads them without a word. */
        create_with_cache(dir, ctx, queue, &l);
        assert_int_equal(l.warnings, 0);
    }
    for (int i = 0; i < files; i++)
        remove(paths[i]);
    rmdir(dir);
    /* A directory that cannot be written costs a rebuild, nothing else. */
    create_with_cache("/nonexistent/pkv-cache", ctx, queue, &l);
    clReleaseCommandQueue(queue);
    clReleaseContext(ctx);
}

/* The cache directory and files only this user can write are used
 * (a crafted binary under a valid header crashes PoCL's deserializer):
 * a directory others may write refuses create, and files are created
 * 0600, whole (temporary name, then rename), and read only when this user
 * alone can have written them. */
static void test_program_cache_trust(void **state)
{
    (void)state;
    char dir[64];
    strcpy(dir, "/tmp/pkv-cache-XXXXXX");
    assert_non_null(mkdtemp(dir));
    cl_context ctx;
    cl_command_queue queue;
    host_queue(&ctx, &queue);
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_OPENCL);
    p.program_cache_dir = dir;
    assert_int_equal(pkv_engine_params_set_opencl(&p, ctx, queue), PKV_OK);
    assert_int_equal(chmod(dir, 0777), 0);
    expect_create_fails(p, PKV_ERR_INVALID_ARGUMENT,
                        "is writable by its group or others (mode 777");
    assert_int_equal(chmod(dir, 0720), 0);
    expect_create_fails(p, PKV_ERR_INVALID_ARGUMENT, "program_cache_dir");
    assert_int_equal(chmod(dir, 0755), 0);

    /* Written 0600, whatever the umask. */
    mode_t old_mask = umask(022);
    log_capture l;
    create_with_cache(dir, ctx, queue, &l);
    umask(old_mask);
    char paths[4][512];
    int files = cache_files(dir, paths);
    assert_int_equal(files, 2);
    for (int i = 0; i < files; i++) {
        struct stat st;
        assert_int_equal(stat(paths[i], &st), 0);
        assert_int_equal(st.st_mode & 0777, 0600);
    }

    /* A file others could have written is not read: a warning, a
     * rebuild, and a file of this user's in its place. */
    assert_int_equal(chmod(paths[0], 0666), 0);
    create_with_cache(dir, ctx, queue, &l);
    assert_int_equal(l.warnings, 1);
    struct stat st;
    assert_int_equal(stat(paths[0], &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);

    /* Nor one behind a link (it could name any file). */
    static unsigned char bin[32 << 20];
    size_t n = read_file(paths[0], bin, sizeof bin);
    char elsewhere[600];
    snprintf(elsewhere, sizeof elsewhere, "%s.elsewhere", paths[0]);
    write_file(elsewhere, bin, n);
    assert_int_equal(chmod(elsewhere, 0600), 0);
    assert_int_equal(remove(paths[0]), 0);
    assert_int_equal(symlink(elsewhere, paths[0]), 0);
    pkv_opencl_release_programs();
    assert_int_equal(run_own_context(dir, NULL), files - 1);
    assert_int_equal(lstat(paths[0], &st), 0);
    assert_true(S_ISREG(st.st_mode)); /* the link replaced by a file */
    remove(elsewhere);

    /* A half-written file under a temporary name (a writer killed, or a
     * crafted one: a valid header and checksum over half the binary) is
     * never read: the engine builds, then writes the file whole. */
    n = read_file(paths[1], bin, sizeof bin);
    assert_true(n > 64);
    uint64_t half = (n - 32) / 2, sum = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < half; i++) {
        sum ^= bin[32 + i];
        sum *= 0x100000001b3ull;
    }
    for (int b = 0; b < 8; b++) {
        bin[16 + b] = (unsigned char)(half >> (8 * b)); /* little-endian */
        bin[24 + b] = (unsigned char)(sum >> (8 * b));
    }
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.%ld.0x1.tmp", paths[1], (long)getpid());
    write_file(tmp, bin, 32 + half);
    assert_int_equal(remove(paths[1]), 0);
    pkv_opencl_release_programs();
    assert_int_equal(run_own_context(dir, NULL), files - 1);
    pkv_opencl_release_programs();
    assert_int_equal(run_own_context(dir, NULL), files);
    remove(tmp);
    remove_dir(dir);
    pkv_opencl_release_programs();
    clReleaseCommandQueue(queue);
    clReleaseContext(ctx);
}

int main(void)
{
    int skipped = ch_opencl_start();
    if (skipped != 0)
        return skipped;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_and_prefix_hit),
        cmocka_unit_test(test_fork_then_diverge),
        cmocka_unit_test(test_preemption),
        cmocka_unit_test(test_mixed_load),
        cmocka_unit_test(test_table_rows_uploaded),
        cmocka_unit_test(test_one_wait_per_layer),
        cmocka_unit_test(test_no_buffer_per_layer),
        cmocka_unit_test(test_interop),
        cmocka_unit_test(test_invalid_cl_mem),
        cmocka_unit_test(test_program_fails_to_build),
        cmocka_unit_test(test_auto_on_a_cpu_device),
        cmocka_unit_test(test_cache_too_large),
        cmocka_unit_test(test_program_cache),
        cmocka_unit_test(test_program_cache_trust),
        cmocka_unit_test(test_release_programs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
