/* SPDX-License-Identifier: MIT */
/*
 * The DPAS prefill kernel (kernels/prefill_dpas.cl) against the CPU
 * backend, on a device without the matrix engines: its builtin is then
 * kernels/dpas_emulation.cl's, which executes the documented operand
 * layout with sub-group broadcasts. Needs sub-groups of 8
 * (cl_intel_required_subgroup_size), cl_intel_subgroups and cl_khr_fp16:
 * Intel's CPU runtime (tests/run.sh's Intel pass); skipped elsewhere,
 * after the check of which geometries the variant takes
 * (pkv__dpas_takes), which needs no device.
 *
 * Each case: both backends append the same K/V over two steps (a prefill
 * of three sequences, then a mixed step with a decode row), the CPU
 * backend attends, the OpenCL backend, created with
 * PKV_OPENCL_PREFILL=dpas, runs the DPAS kernel over the same cache (its
 * attend with host tensors, or the kernel on f16 device tensors); block
 * tables random and non-contiguous, the blocks wholly behind a window's
 * reach null (block 0), as a windowed group's are.
 *
 * Tolerance, derived per case from its data (printed with what was seen).
 * With u = 2^-11 (f16 rounding) and u32 = 2^-24, and by Cauchy-Schwarz
 * sum |q_i k_i| <= |q|_2 |k|_2:
 * - a score differs from the CPU's by at most ds = scale |q|_2 |k'|_2
 *   (2 d u32 + (u when K is not f16-exact)), k' the cached key: the
 *   products of f16 values are exact in f32, and the two sums of d terms
 *   in different orders are each within (d - 1) u32 sum |q_i k_i|; K is
 *   exact for f16 caches and for f32 caches fed f16 values (this test's),
 *   rounded to f16 (relative u) for quantized ones, whose codes move each
 *   element by at most half a step, (2 kmax / levels) / 2, so that
 *   |k'|_2 <= |k|_2 + sqrt(d) kmax (1 + 2u) / levels;
 * - each weight is rounded to f16 (relative u), and l sums the rounded
 *   weights, so the normalised weights are a convex combination whose
 *   relative error is at most e^(2 ds) (1 + u) / (1 - u) - 1 = e;
 * - so an output differs by at most e max|v_t - out| <= 2 e vmax, plus
 *   u vmax where V is rounded to f16 (quantized caches), plus 1e-5 for the
 *   f32 sums of the value product.
 * The bound takes every rounding at its worst: the f16 and f32 cases see
 * 1/70 to 1/25 of it, the quantized ones 1/160 to 1/75 (the K rounding's
 * worst case, every error aligned with the query, is far from its
 * typical sum). The operand layout is the same for every dtype (only the
 * staging reads differ, through tensor_io.cl's pkv_kv_row4).
 * A wrong operand layout moves outputs by a sizeable fraction of vmax:
 * the two f16 of a pair swapped in the emulation moved them by 4.5, the
 * window's mask dropped by 1.5.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend.h"
#include "check_host_cmocka.h"
#include "half.h"
#include "kv_layout.h"
#include "mem_util.h"
#include "opencl/features.h"
#include "opencl/prefill_dpas.h"
#include "rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEQS 3
#define MAXB 16
#define F16_U (1.0 / 2048.0)
#define F32_U (1.0 / 16777216.0)

typedef struct dcase {
    uint32_t d, hq, hkv, bs, window;
    int32_t dtype, kq, vq;
    int f16_io; /* q and out as f16 cl_mem tensors */
} dcase;

static const dcase cases[] = {
    {64, 8, 2, 16, 0, PKV_KV_DTYPE_F16, 0, 0, 0},
    {64, 4, 4, 8, 11, PKV_KV_DTYPE_F32, 0, 0, 1},
    {128, 6, 2, 16, 0, PKV_KV_DTYPE_U8, PKV_QUANT_GROUP_PER_CHANNEL,
     PKV_QUANT_GROUP_PER_TOKEN, 0},
    {80, 8, 1, 8, 20, PKV_KV_DTYPE_F16, 0, 0, 0},
    {256, 4, 2, 32, 0, PKV_KV_DTYPE_F16, 0, 0, 1},
    {128, 4, 2, 16, 13, PKV_KV_DTYPE_U4, PKV_QUANT_GROUP_PER_CHANNEL,
     PKV_QUANT_GROUP_PER_TOKEN, 0},
    {32, 2, 1, 16, 0, PKV_KV_DTYPE_U8K_U4V, PKV_QUANT_GROUP_PER_TOKEN,
     PKV_QUANT_GROUP_PER_TOKEN, 0},
};

/* Tokens before each step and rows of it, per sequence. */
static const uint32_t step_prior[2][SEQS] = {{0, 0, 0}, {21, 9, 40}};
static const uint32_t step_rows[2][SEQS] = {{21, 9, 40}, {7, 1, 13}};

static void check_ok(pkv_status st, const char *what)
{
    if (st != PKV_OK)
        fail_msg("%s: %s (%s)", what, pkv_status_name(st), pkv_last_error());
}

/* n normal values rounded to f16 (exact in an f16 or f32 cache), and
 * their largest magnitude into *max. */
static float *f16_normals(uint64_t *rng, size_t n, double *max)
{
    float *x = malloc((n + 1) * sizeof *x);
    assert_non_null(x);
    test_normal_fill(rng, x, n);
    for (size_t i = 0; i < n; i++) {
        x[i] = pkv__f16_to_f32(pkv__f32_to_f16(x[i]));
        *max = fabs(x[i]) > *max ? fabs(x[i]) : *max;
    }
    return x;
}

static cl_mem device_copy(pkv__backend *b, const void *p, size_t bytes)
{
    cl_int err;
    cl_mem m = clCreateBuffer(b->cl.context,
                              CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes,
                              (void *)p, &err);
    assert_int_equal(err, CL_SUCCESS);
    return m;
}

/* The DPAS kernel's output for host queries q (n floats): through f16
 * device tensors when f16_io, else the backend's attend. */
static void dpas_attend(pkv__backend *b, const float *q, float *out,
                        size_t n, int f16_io, uint32_t window)
{
    if (!f16_io) {
        check_ok(pkv__backend_opencl.attend(b, 0, q, out, 0.0f, window),
                 "ocl attend");
        return;
    }
    size_t elem = f16_io ? 2 : 4;
    uint16_t *h = malloc(n * 2 + 2);
    assert_non_null(h);
    pkv__f32_to_f16_n(q, h, (uint32_t)n);
    cl_mem qm = device_copy(b, f16_io ? (const void *)h : (const void *)q,
                            n * elem);
    cl_mem om = device_copy(b, f16_io ? (const void *)h : (const void *)q,
                            n * elem);
    kt tq = {qm, 0, (cl_uint)f16_io}, to = {om, 0, (cl_uint)f16_io};
    check_ok(pkv__ocl_dpas_enqueue(b, 0, tq, to, 0.0f, window),
             "dpas enqueue");
    void *dst = f16_io ? (void *)h : (void *)out;
    assert_int_equal(clEnqueueReadBuffer(b->queue, om, CL_TRUE, 0, n * elem,
                                         dst, 0, NULL, NULL),
                     CL_SUCCESS);
    if (f16_io)
        pkv__f16_to_f32_n(h, out, (uint32_t)n);
    clReleaseMemObject(qm);
    clReleaseMemObject(om);
    free(h);
}

/* The largest |x|_2 of n rows of d values. */
static double max_norm(const float *x, size_t n, uint32_t d)
{
    double best = 0;
    for (size_t r = 0; r < n; r++) {
        double s = 0;
        for (uint32_t i = 0; i < d; i++)
            s += (double)x[r * d + i] * x[r * d + i];
        best = sqrt(s) > best ? sqrt(s) : best;
    }
    return best;
}

/* The tolerance of the header: qn and kn the largest query and key
 * norms, kmax and vmax the largest |k| and |v| appended. */
static double tolerance(const dcase *c, double qn, double kn, double kmax,
                        double vmax)
{
    int quantized = PKV_LAYOUT_QUANTIZED(c->dtype);
    double levels = PKV_LAYOUT_Q_LEVELS(PKV_LAYOUT_KEY_DTYPE(c->dtype));
    if (quantized)
        kn += sqrt((double)c->d) * kmax * (1.0 + 2.0 * F16_U) / levels;
    double ds = qn * kn / sqrt((double)c->d) *
                (2.0 * c->d * F32_U + (quantized ? F16_U : 0.0));
    double e = exp(2.0 * ds) * (1.0 + F16_U) / (1.0 - F16_U) - 1.0;
    return 2.0 * e * vmax + (quantized ? F16_U * vmax : 0.0) + 1e-5;
}

static void run_case(const dcase *c, uint64_t seed)
{
    pkv__backend_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.num_layers = 1;
    cfg.num_q_heads = c->hq;
    cfg.num_kv_heads = c->hkv;
    cfg.head_dim = c->d;
    cfg.block_size = c->bs;
    cfg.num_blocks = SEQS * MAXB + 1;
    cfg.kv_dtype = c->dtype;
    cfg.key_quant = c->kq;
    cfg.value_quant = c->vq;
    cfg.u4_group = c->d % 32 == 0 ? 32 : 16;
    cfg.num_stages = PKV_LAYOUT_QUANTIZED(c->dtype) ? SEQS : 0;
    /* One group of layers with the case's window: its tables may then
     * hold null blocks. */
    static const uint32_t layer_map[1] = {0};
    cfg.num_groups = 1;
    cfg.num_arenas = 1;
    cfg.layer_group = layer_map;
    cfg.layer_arena = layer_map;
    cfg.group_windows = &c->window;
    pkv__allocator alloc = plain_allocator();
    pkv__backend *cpu = NULL, *ocl = NULL;
    check_ok(pkv__backend_cpu.create(&cfg, &alloc, &cpu), "cpu create");
    setenv("PKV_OPENCL_PREFILL", "dpas", 1);
    pkv_status created = pkv__backend_opencl.create(&cfg, &alloc, &ocl);
    unsetenv("PKV_OPENCL_PREFILL");
    check_ok(created, "ocl create");
    /* Asked for, the DPAS kernel is what the backend built, its tiles the
     * step's. */
    assert_int_equal(ocl->prefill_kind, PKV__PREFILL_DPAS);
    assert_int_equal(ocl->tile_rows, pkv__dpas_rows(c->d));

    uint64_t rng = seed;
    /* Blocks 1.. in a random order: tables[i] for sequence i. */
    uint32_t perm[SEQS * MAXB], tables[SEQS][MAXB];
    for (uint32_t i = 0; i < SEQS * MAXB; i++)
        perm[i] = i + 1;
    for (uint32_t i = SEQS * MAXB - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(test_rand(&rng) % (i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    memcpy(tables, perm, sizeof tables);
    double kmax = 0, vmax = 0, kn = 0, worst = 0, tol_min = INFINITY;
    for (int st = 0; st < 2; st++) {
        uint32_t qs[SEQS + 1], ctx[SEQS], stages[SEQS] = {0, 1, 2};
        uint32_t step_tables[SEQS][MAXB];
        const uint32_t *rows_of[SEQS];
        uint64_t slots[128];
        uint32_t t = 0;
        for (uint32_t i = 0; i < SEQS; i++) {
            uint32_t prior = step_prior[st][i], n = step_rows[st][i];
            qs[i] = t;
            ctx[i] = prior + n;
            /* Null where no row of the step reaches: wholly behind the
             * window of the sequence's first row. */
            uint32_t lo = c->window > 0 && prior + 1 > c->window
                              ? prior + 1 - c->window
                              : 0;
            for (uint32_t j = 0; j < MAXB; j++)
                step_tables[i][j] = j < lo / c->bs ? 0 : tables[i][j];
            rows_of[i] = step_tables[i];
            for (uint32_t r = 0; r < n; r++, t++)
                slots[t] = (uint64_t)tables[i][(prior + r) / c->bs] * c->bs +
                           (prior + r) % c->bs;
        }
        qs[SEQS] = t;
        pkv__step s;
        memset(&s, 0, sizeof s);
        s.num_seqs = SEQS;
        s.num_tokens = t;
        s.query_start = qs;
        s.context_lens = ctx;
        s.block_tables = rows_of;
        s.max_blocks_per_seq = MAXB;
        s.slots = slots;
        s.stages = PKV_LAYOUT_QUANTIZED(c->dtype) ? stages : NULL;
        check_ok(pkv__backend_cpu.begin_step(cpu, &s), "cpu begin_step");
        check_ok(pkv__backend_opencl.begin_step(ocl, &s), "ocl begin_step");
        size_t kvn = (size_t)t * c->hkv * c->d, qn = (size_t)t * c->hq * c->d;
        float *k = f16_normals(&rng, kvn, &kmax);
        float *v = f16_normals(&rng, kvn, &vmax);
        double qmax = 0;
        float *q = f16_normals(&rng, qn, &qmax);
        float *o1 = calloc(qn + 1, sizeof *o1), *o2 = calloc(qn + 1, 4);
        assert_true(o1 != NULL && o2 != NULL);
        check_ok(pkv__backend_cpu.append(cpu, 0, k, v), "cpu append");
        check_ok(pkv__backend_opencl.append(ocl, 0, k, v), "ocl append");
        check_ok(pkv__backend_cpu.attend(cpu, 0, q, o1, 0.0f, c->window),
                 "cpu attend");
        dpas_attend(ocl, q, o2, qn, c->f16_io, c->window);
        double kn_step = max_norm(k, (size_t)t * c->hkv, c->d);
        kn = kn_step > kn ? kn_step : kn;
        double tol = tolerance(c, max_norm(q, (size_t)t * c->hq, c->d), kn,
                               kmax, vmax),
               diff = 0;
        for (size_t i = 0; i < qn; i++) {
            /* f16 outputs: their own rounding too, at most u times the
             * kernel's f32 output, itself within tol of the CPU's. */
            double e = fabs((double)o1[i] - (double)o2[i]) -
                       (c->f16_io ? F16_U * (fabs((double)o1[i]) + tol)
                                  : 0.0);
            if (!(e <= diff))
                diff = e; /* NaN sticks */
        }
        if (!(diff <= tol))
            fail_msg("d %u dtype %d step %d: outputs differ by %g "
                     "(tolerance %g)",
                     (unsigned)c->d, (int)c->dtype, st, diff, tol);
        worst = diff > worst ? diff : worst;
        tol_min = tol < tol_min ? tol : tol_min;
        free(k);
        free(v);
        free(q);
        free(o1);
        free(o2);
    }
    print_message("dpas d=%u hq=%u hkv=%u bs=%u window=%u dtype=%d "
                  "f16_io=%d: max |diff| %.3g (tolerance >= %.3g)\n",
                  (unsigned)c->d, (unsigned)c->hq, (unsigned)c->hkv,
                  (unsigned)c->bs, (unsigned)c->window, (int)c->dtype,
                  c->f16_io, worst, tol_min);
    pkv__backend_cpu.destroy(cpu);
    pkv__backend_opencl.destroy(ocl);
}

/* Which geometries and device limits take the variant (no device
 * needed). */
static void test_takes(void **state)
{
    (void)state;
    char why[256];
    assert_true(pkv__dpas_takes(128, 4, 1024, 65536, why, sizeof why));
    assert_true(pkv__dpas_takes(256, 8, 1024, 65536, why, sizeof why));
    /* head_dim not a multiple of 16, or above 256. */
    assert_false(pkv__dpas_takes(72, 4, 1024, 65536, why, sizeof why));
    assert_false(pkv__dpas_takes(512, 4, 1024, 65536, why, sizeof why));
    /* A work-group of 8 x group, and its local memory. */
    assert_false(pkv__dpas_takes(128, 32, 128, 65536, why, sizeof why));
    uint64_t need = pkv__dpas_local_bytes(256, 8);
    assert_int_equal(need, 64 * 256 + 2 * 8 * 256 * 2);
    assert_true(pkv__dpas_takes(256, 8, 1024, need, why, sizeof why));
    assert_false(pkv__dpas_takes(256, 8, 1024, need - 1, why, sizeof why));
    assert_int_equal(pkv__dpas_rows(64), 4);
    assert_int_equal(pkv__dpas_rows(80), 2);
}

static void test_against_cpu(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i], 0x5eed + i);
}

/* Whether the device pkv picks has what the emulated kernel needs: a
 * required sub-group size (8: the kernel asks for it, and a build that
 * cannot honour it fails), Intel's sub-group shuffles and f16. */
static int device_fits(void)
{
    cl_device_id d;
    char ext[8192];
    if (pkv__ocl_pick_device(pkv__ocl_wanted_device(NULL), &d) != PKV_OK)
        return 0;
    pkv__ocl_device_string(d, CL_DEVICE_EXTENSIONS, ext, sizeof ext);
    return strstr(ext, "cl_intel_required_subgroup_size") != NULL &&
           strstr(ext, "cl_intel_subgroups") != NULL &&
           strstr(ext, "cl_khr_fp16") != NULL;
}

int main(void)
{
    const struct CMUnitTest choice[] = {
        cmocka_unit_test(test_takes),
    };
    int failed = cmocka_run_group_tests(choice, NULL, NULL);
    if (failed != 0)
        return failed;
    int skipped = ch_opencl_start();
    if (skipped != 0)
        return skipped;
    if (!device_fits()) {
        print_message("the device lacks sub-groups of 8, Intel's sub-group "
                      "shuffles or f16 (Intel's CPU runtime has them): the "
                      "emulated kernel is skipped\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
