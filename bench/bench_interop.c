/* SPDX-License-Identifier: MIT */
/* pkv-bench interop: what pkv_engine_attend costs on the OpenCL backend
 * depending on where the host's tensors live, on a device that shares the
 * host's memory (CL_DEVICE_HOST_UNIFIED_MEMORY: PoCL here, Intel iGPUs):
 *
 *   host_copy       f32 host tensors (PKV_TENSOR_MEMORY_HOST): the backend
 *                   writes q, k, v into its own buffers and reads out
 *                   back;
 *   host_wrapped    the same host memory, which the host wrapped once with
 *                   CL_MEM_USE_HOST_PTR in the engine's context and passes
 *                   as cl_mem tensors (no copy): attend only enqueues, and
 *                   the host maps out once per step to see the results;
 *   cl_mem          cl_mem tensors in the engine's context
 *                   (pkv_engine_get_opencl), as a host whose own kernels
 *                   produce q, k, v on the device: attend only enqueues,
 *                   the host waits with one clFinish per step.
 *
 * One engine per case, the three modes taking turns step by step, so that
 * they see the same cache and the same load. Time per attend call: a step's
 * attend calls (all layers, plus the clFinish for cl_mem) over the layers;
 * median over the steps of each mode. */
#include "bench.h"
#include "sample.h"

#include "pkv/pkv.h"
#include "pkv/pkv_opencl.h"

#include <stdlib.h>
#include <string.h>

#define HQ 32u
#define HKV 8u
#define HEAD_DIM 128u
#define LAYERS 2u
#define BLOCK 16u
#define CHUNK 256u /* max_batch_tokens: prompt rows per step */
#define NUM_MODES 3

static const char *const MODE_NAMES[NUM_MODES] = {"host_copy",
                                                  "host_wrapped", "cl_mem"};

/* The engine's creation log: the backend says "unified memory" there when
 * it found CL_DEVICE_HOST_UNIFIED_MEMORY. */
typedef struct log_capture {
    char device[512];
    int unified;
} log_capture;

static void capture_log(void *user, int32_t level, const char *message)
{
    log_capture *c = user;
    (void)level;
    if (strncmp(message, "opencl: ", 8) == 0) {
        snprintf(c->device, sizeof c->device, "%s", message + 8);
        c->unified = strstr(message, "unified memory") != NULL;
    }
}

/* Per phase (0 prefill, 1 decode) and mode: microseconds per attend call
 * and rows of each measured step. */
typedef struct samples {
    double us[NUM_MODES][512];
    double rows[NUM_MODES][512];
    size_t n[NUM_MODES];
} samples;

typedef struct host_buf {
    float *base; /* aligned to the device's base address alignment */
    size_t bytes;
    cl_mem wrap; /* CL_MEM_USE_HOST_PTR over base, made once */
} host_buf;

static int host_buf_make(host_buf *b, size_t bytes, size_t align,
                         uint64_t *rng)
{
    size_t total = (bytes + align - 1) / align * align;
    b->base = aligned_alloc(align, total);
    b->bytes = bytes;
    b->wrap = NULL;
    if (b->base == NULL)
        return 1;
    for (size_t i = 0; i < total / sizeof(float); i++)
        b->base[i] = (float)(0.5 * host_normal(rng));
    return 0;
}

static pkv_tensor host_tensor(const host_buf *b, uint32_t rows,
                              uint32_t heads)
{
    pkv_tensor t =
        pkv_tensor_host(b->base, 0, PKV_TENSOR_DTYPE_F32, rows, heads,
                        HEAD_DIM);
    return t;
}

typedef struct run_case {
    uint32_t seqs;
    uint32_t prompt;
    uint32_t decode_steps; /* per mode */
    int report_prefill;
} run_case;

typedef struct results {
    double us[2][NUM_MODES];
    double rows[2];
    double ctx;
    size_t calls[2][NUM_MODES];
} results;

static int run(const run_case *c, size_t *align_out, results *res)
{
    log_capture lc;
    memset(&lc, 0, sizeof lc);
    pkv_engine_params p;
    pkv_engine_params_init(&p);
    p.num_layers = LAYERS;
    p.num_q_heads = HQ;
    p.num_kv_heads = HKV;
    p.head_dim = HEAD_DIM;
    p.block_size = BLOCK;
    p.kv_dtype = PKV_KV_DTYPE_F16;
    p.max_model_len = 4096;
    uint32_t max_len = c->prompt + NUM_MODES * c->decode_steps + 64;
    p.num_blocks = c->seqs * ((max_len + BLOCK - 1) / BLOCK + 1) + 1;
    p.max_num_seqs = c->seqs;
    p.max_batch_tokens = CHUNK;
    p.backend = PKV_BACKEND_KIND_OPENCL;
    p.log = capture_log;
    p.log_user = &lc;
    p.log_level = PKV_LOG_LEVEL_DEBUG;
    pkv_engine *e;
    if (pkv_engine_create(&p, &e) != PKV_OK) {
        fprintf(stderr, "interop: %s\n", pkv_last_error());
        return 1;
    }
    cl_context ctx;
    cl_command_queue queue;
    cl_device_id dev;
    cl_bool unified = CL_FALSE;
    cl_uint align_bits = 0;
    if (pkv_engine_get_opencl(e, &ctx, &queue) != PKV_OK ||
        clGetContextInfo(ctx, CL_CONTEXT_DEVICES, sizeof dev, &dev, NULL) !=
            CL_SUCCESS ||
        clGetDeviceInfo(dev, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified,
                        &unified, NULL) != CL_SUCCESS ||
        clGetDeviceInfo(dev, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof align_bits,
                        &align_bits, NULL) != CL_SUCCESS) {
        fprintf(stderr, "interop: cannot query the engine's device\n");
        pkv_engine_destroy(e);
        return 1;
    }
    /* A wrap without a copy wants host memory aligned to the device's
     * base address alignment (128 bytes when it reports none). */
    size_t align = align_bits >= 8 ? align_bits / 8 : 128;
    *align_out = align;
    if (unified != CL_TRUE || !lc.unified) {
        printf("interop: %s has no unified host memory (device %d, log %d): "
               "nothing to compare\n",
               lc.device, unified == CL_TRUE, lc.unified);
        pkv_engine_destroy(e);
        return 0;
    }
    static int said;
    if (!said++)
        printf("device: %s; wrap alignment %zu bytes\n", lc.device, align);

    uint64_t rng = 0x1234567 + c->seqs;
    size_t qb = (size_t)CHUNK * HQ * HEAD_DIM * sizeof(float);
    size_t kb = (size_t)CHUNK * HKV * HEAD_DIM * sizeof(float);
    host_buf hq, hk, hv, ho;
    int rc = host_buf_make(&hq, qb, align, &rng);
    rc |= host_buf_make(&hk, kb, align, &rng);
    rc |= host_buf_make(&hv, kb, align, &rng);
    rc |= host_buf_make(&ho, qb, align, &rng);
    cl_mem mq = NULL, mk = NULL, mv = NULL, mo = NULL;
    cl_int err = CL_SUCCESS;
    if (rc == 0) {
        cl_mem_flags f = CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR;
        mq = clCreateBuffer(ctx, f, qb, hq.base, &err);
        if (err == CL_SUCCESS)
            mk = clCreateBuffer(ctx, f, kb, hk.base, &err);
        if (err == CL_SUCCESS)
            mv = clCreateBuffer(ctx, f, kb, hv.base, &err);
        if (err == CL_SUCCESS)
            mo = clCreateBuffer(ctx, CL_MEM_READ_WRITE, qb, NULL, &err);
        host_buf *hb[4] = {&hq, &hk, &hv, &ho};
        for (int i = 0; i < 4 && err == CL_SUCCESS; i++)
            hb[i]->wrap =
                clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR,
                               hb[i]->bytes, hb[i]->base, &err);
        rc = err != CL_SUCCESS;
    }
    if (rc)
        fprintf(stderr, "interop: buffers (CL error %d)\n", (int)err);
    int32_t *prompt = calloc(c->prompt, sizeof *prompt);
    int32_t *sampled = calloc(CHUNK, sizeof *sampled);
    samples *s = calloc(2, sizeof *s);
    double ctx_sum = 0.0;
    if (!prompt || !sampled || !s)
        rc = 1;
    for (uint32_t i = 0; rc == 0 && i < c->seqs; i++) {
        for (uint32_t t = 0; t < c->prompt; t++)
            prompt[t] = (int32_t)(i * 7919 + t * 31 + 1);
        pkv_seq_params sp;
        pkv_seq_params_init(&sp);
        sp.prompt = prompt;
        sp.prompt_len = c->prompt;
        pkv_seq_id id;
        rc |= pkv_seq_add(e, &sp, &id) != PKV_OK;
    }

    size_t decodes = 0, ctx_n = 0;
    bench_progress("interop: %u sequences of %u prompt tokens, then %u "
                   "decode steps per mode",
                   c->seqs, c->prompt, c->decode_steps);
    for (uint32_t step = 0; rc == 0; step++) {
        if (step > 0 && step % 50 == 0)
            bench_progress("interop: step %u", step);
        const pkv_batch *b;
        if (pkv_engine_step_begin(e, &b) != PKV_OK) {
            rc = 1;
            break;
        }
        uint32_t rows = b->num_tokens;
        int decode = rows == b->num_seqs && b->num_seqs == c->seqs;
        int mode = (int)(step % NUM_MODES);
        pkv_tensor q, k, v, o;
        if (mode == 2) {
            q = pkv_tensor_opencl(mq, 0, PKV_TENSOR_DTYPE_F32, rows, HQ,
                                  HEAD_DIM);
            k = pkv_tensor_opencl(mk, 0, PKV_TENSOR_DTYPE_F32, rows, HKV,
                                  HEAD_DIM);
            v = pkv_tensor_opencl(mv, 0, PKV_TENSOR_DTYPE_F32, rows, HKV,
                                  HEAD_DIM);
            o = pkv_tensor_opencl(mo, 0, PKV_TENSOR_DTYPE_F32, rows, HQ,
                                  HEAD_DIM);
        } else if (mode == 1) {
            q = pkv_tensor_opencl(hq.wrap, 0, PKV_TENSOR_DTYPE_F32, rows, HQ,
                                  HEAD_DIM);
            k = pkv_tensor_opencl(hk.wrap, 0, PKV_TENSOR_DTYPE_F32, rows, HKV,
                                  HEAD_DIM);
            v = pkv_tensor_opencl(hv.wrap, 0, PKV_TENSOR_DTYPE_F32, rows, HKV,
                                  HEAD_DIM);
            o = pkv_tensor_opencl(ho.wrap, 0, PKV_TENSOR_DTYPE_F32, rows, HQ,
                                  HEAD_DIM);
        } else {
            q = host_tensor(&hq, rows, HQ);
            k = host_tensor(&hk, rows, HKV);
            v = host_tensor(&hv, rows, HKV);
            o = host_tensor(&ho, rows, HQ);
        }
        double t0 = 1e6 * bench_now_s();
        for (uint32_t l = 0; rc == 0 && l < LAYERS; l++)
            if (pkv_engine_attend(e, l, &q, &k, &v, &o) != PKV_OK) {
                fprintf(stderr, "interop: attend (%s): %s\n",
                        MODE_NAMES[mode], pkv_engine_last_error(e));
                rc = 1;
            }
        if (rc == 0 && mode == 2 && (err = clFinish(queue)) != CL_SUCCESS) {
            fprintf(stderr, "interop: clFinish: CL error %d\n", (int)err);
            rc = 1;
        }
        if (rc == 0 && mode == 1) {
            /* The wait, and what makes out's bytes the host's to read. */
            void *m = clEnqueueMapBuffer(queue, ho.wrap, CL_TRUE, CL_MAP_READ,
                                         0, ho.bytes, 0, NULL, NULL, &err);
            if (err == CL_SUCCESS)
                err = clEnqueueUnmapMemObject(queue, ho.wrap, m, 0, NULL,
                                              NULL);
            if (err == CL_SUCCESS)
                err = clFinish(queue);
            if (err != CL_SUCCESS) {
                fprintf(stderr, "interop: map out: CL error %d\n", (int)err);
                rc = 1;
            }
        }
        double us = (1e6 * bench_now_s() - t0) / LAYERS;
        /* Steps 0-2 (prefill) and the first decode step of each mode warm
         * up: buffers, and the decode kernels built for this geometry. */
        int phase = decode ? 1 : 0;
        int measured = decode ? decodes >= NUM_MODES
                              : step >= NUM_MODES && rows >= CHUNK / 2;
        samples *ps = &s[phase];
        if (rc == 0 && measured && ps->n[mode] < 512) {
            ps->us[mode][ps->n[mode]] = us;
            ps->rows[mode][ps->n[mode]++] = rows;
        }
        if (decode) {
            decodes++;
            if (decodes > NUM_MODES)
                for (uint32_t i = 0; i < b->num_seqs; i++, ctx_n++)
                    ctx_sum += b->context_lens[i];
        }
        for (uint32_t j = 0; j < b->num_samples; j++)
            sampled[j] = (int32_t)(j * 13 + step % 97 + 1);
        if (rc == 0 &&
            pkv_engine_step_end(e, sampled, NULL, b->num_samples) != PKV_OK) {
            fprintf(stderr, "interop: step_end: %s\n",
                    pkv_engine_last_error(e));
            rc = 1;
        }
        if (decodes >= (size_t)NUM_MODES * (c->decode_steps + 1))
            break;
    }
    if (rc == 0) {
        for (int ph = 0; ph < 2; ph++) {
            double r[512];
            size_t nr = 0;
            for (int m = 0; m < NUM_MODES; m++) {
                for (size_t i = 0; i < s[ph].n[m] && nr < 512; i++)
                    r[nr++] = s[ph].rows[m][i];
                res->calls[ph][m] = s[ph].n[m];
                res->us[ph][m] = bench_median(s[ph].us[m], s[ph].n[m]);
            }
            res->rows[ph] = bench_median(r, nr);
        }
        res->ctx = ctx_n ? ctx_sum / (double)ctx_n : 0.0;
    }
    if (mq)
        clReleaseMemObject(mq);
    if (mk)
        clReleaseMemObject(mk);
    if (mv)
        clReleaseMemObject(mv);
    if (mo)
        clReleaseMemObject(mo);
    host_buf *hb[4] = {&hq, &hk, &hv, &ho};
    for (int i = 0; i < 4; i++)
        if (hb[i]->wrap)
            clReleaseMemObject(hb[i]->wrap);
    free(hq.base);
    free(hk.base);
    free(hv.base);
    free(ho.base);
    free(prompt);
    free(sampled);
    free(s);
    pkv_engine_destroy(e);
    return rc;
}

static void report(const bench_options *opt, const char *kind,
                   uint32_t seqs, double ctx, double rows, const double *us,
                   const size_t *calls)
{
    /* f32 tensors: q and out have HQ heads, k and v HKV. */
    double tensor_bytes = rows * (2.0 * HQ + 2.0 * HKV) * HEAD_DIM * 4.0;
    for (int m = 0; m < NUM_MODES; m++) {
        double moved = m == 0 ? tensor_bytes : 0.0;
        printf("%-8s %5u %6.0f %5.0f  %-15s %6zu %10.1f %9.2f %12.0f\n", kind,
               seqs, ctx, rows, MODE_NAMES[m], calls[m], us[m],
               us[0] > 0 ? us[m] / us[0] : 0.0, moved);
        if (opt->json)
            fprintf(opt->json,
                    "{\"bench\":\"interop\",\"case\":\"%s\",\"mode\":\"%s\","
                    "\"seqs\":%u,\"ctx\":%.0f,\"rows\":%.0f,\"calls\":%zu,"
                    "\"us_per_attend\":%.1f,\"over_host_copy\":%.3f,"
                    "\"tensor_bytes\":%.0f,\"bytes_moved\":%.0f}\n",
                    kind, MODE_NAMES[m], seqs, ctx, rows, calls[m], us[m],
                    us[0] > 0 ? us[m] / us[0] : 0.0, tensor_bytes, moved);
    }
}

int bench_interop(const bench_options *opt)
{
    /* The 16-sequence case's prompts run in CHUNK-row steps: its prefill
     * is the prefill-heavy case. */
    const run_case full[] = {{16, 1024, 60, 1}};
    const run_case quick[] = {{16, 1024, 12, 1}};
    const run_case *cases = opt->quick ? quick : full;
    size_t count = 1;
    if (opt->plot != NULL)
        printf("--plot: interop has nothing to plot\n");
    printf("interop: pkv_engine_attend on the OpenCL backend, Hq %u, Hkv %u, "
           "head_dim %u, f16 KV, block %u, %u layers, f32 tensors; "
           "us per attend call, median (modes take turns step by step)\n",
           HQ, HKV, HEAD_DIM, BLOCK, LAYERS);
    int header = 0;
    for (size_t i = 0; i < count; i++) {
        results r;
        size_t align = 0;
        memset(&r, 0, sizeof r);
        if (run(&cases[i], &align, &r) != 0)
            return 1;
        if (r.calls[1][0] == 0)
            return 0; /* not a unified-memory device: said so */
        if (!header++)
            printf("%-8s %5s %6s %5s  %-15s %6s %10s %9s %12s\n", "case",
                   "seqs", "ctx", "rows", "mode", "calls", "us/attend",
                   "/copy", "bytes moved");
        if (cases[i].report_prefill)
            report(opt, "prefill", cases[i].seqs, cases[i].prompt / 2.0,
                   r.rows[0], r.us[0], r.calls[0]);
        report(opt, "decode", cases[i].seqs, r.ctx, r.rows[1], r.us[1],
               r.calls[1]);
    }
    return 0;
}
