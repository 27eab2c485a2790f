/* SPDX-License-Identifier: MIT */
/* pkv-bench kernels: split-K decode attention (kernels/decode_common.cl)
 * on the OpenCL device, in the variant pkv would choose there or the one
 * PKV_OPENCL_DECODE names (cpu, gpu, intel), against the machine's own
 * memory read bandwidth measured in the same run (a stream, and blocks of
 * the case's head-part size in random order: the ceiling of a paged
 * read), and against the same kernel reading the same arena without a
 * block table (PKV_DECODE_CONTIGUOUS).
 *
 * Own minimal OpenCL harness: the device named by PKV_OPENCL_DEVICE (a
 * substring of the platform or device name), else the first one; kernels
 * built from the source tree (PKV_KERNELS_DIR, PKV_SRC_DIR). The outputs
 * are checked first against tests/dense_ref.c over the cache's values as
 * the library reads them (half.h, quant.h); ctest runs that check
 * (bench_kernels_quick). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "bench.h"
#include "bench_bandwidth.h"
#include "sample.h"

#ifndef PKV_BENCH_OPENCL

int bench_kernels(const bench_options *opt)
{
    (void)opt;
    printf("pkv-bench kernels: built without OpenCL (PKV_WITH_OPENCL=OFF)\n");
    return 0;
}

#else

#include "dense_ref.h" /* tests/ */
#include "half.h"
#include "kv_layout.h"
#include "opencl/decode_plan.h"
#include "opencl/features.h"
#include "quant.h"

#include <CL/cl.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define HQ 32u
#define HKV 8u
#define HEAD_DIM 128u
#define GROUP (HQ / HKV)
#define U4G 32u /* channels of a U4 per-token group */

/* x as a share of ref, for the table ("37%") and for JSON ("0.3712"):
 * "-" and null when ref is 0 (a reference read that ran out of memory). */
static void share(double x, double ref, char text[16], char json[16])
{
    if (ref > 0.0) {
        snprintf(text, 16, "%.0f%%", 100.0 * x / ref);
        snprintf(json, 16, "%.4f", x / ref);
    } else {
        snprintf(text, 16, "-");
        snprintf(json, 16, "null");
    }
}

/* x / ref for the ratio rows ("0.562" and "0.5620"): "-" and null when
 * there is no ref (0: a case that did not run). */
static void ratio(double x, double ref, char text[16], char json[16])
{
    if (ref > 0.0) {
        snprintf(text, 16, "%.3f", x / ref);
        snprintf(json, 16, "%.4f", x / ref);
    } else {
        snprintf(text, 16, "-");
        snprintf(json, 16, "null");
    }
}

/* ---------------------------------------------------------- OpenCL harness */

typedef struct cl_env {
    cl_platform_id platform;
    cl_device_id device;
    cl_context ctx;
    cl_command_queue queue;
    cl_uint compute_units;
    cl_ulong max_alloc;
    char name[256];
    /* The decode variant, as the OpenCL backend chooses it. */
    pkv__decode_kind variant;
    char variant_why[256];
    char variant_opts[256]; /* -D options beyond the geometry */
    const char *variant_file;
    uint32_t lanes;     /* work-group size along dimension 0 */
    uint32_t partition; /* the variant's longest partition; 0: any */
    uint32_t split;     /* work-groups a kv head */
} cl_env;

static int cl_check(cl_int err, const char *what)
{
    if (err != CL_SUCCESS)
        fprintf(stderr, "pkv-bench kernels: %s failed (OpenCL error %d)\n",
                what, (int)err);
    return err != CL_SUCCESS;
}

/* The decode variant for this device, as src/opencl/decode.c picks it
 * (PKV_OPENCL_DECODE or the device's type and extensions). */
static int choose_variant(cl_env *e)
{
    char ext[4096] = "";
    cl_device_type type = 0;
    cl_ulong local_mem = 0;
    size_t max_group = 0;
    clGetDeviceInfo(e->device, CL_DEVICE_EXTENSIONS, sizeof ext, ext, NULL);
    clGetDeviceInfo(e->device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    clGetDeviceInfo(e->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local_mem,
                    &local_mem, NULL);
    clGetDeviceInfo(e->device, CL_DEVICE_MAX_WORK_GROUP_SIZE,
                    sizeof max_group, &max_group, NULL);
    int request = pkv__decode_parse(getenv("PKV_OPENCL_DECODE"));
    if (request < 0) {
        fprintf(stderr, "pkv-bench kernels: PKV_OPENCL_DECODE: expected "
                        "auto, cpu, gpu or intel\n");
        return 1;
    }
    int cpu_device = (type & CL_DEVICE_TYPE_CPU) != 0;
    e->variant = pkv__decode_choose(request, cpu_device, ext, HEAD_DIM,
                                    e->variant_why, sizeof e->variant_why);
    /* The largest block size of the sweep decides the partition. */
    pkv__decode_setup su;
    if (e->variant == PKV__DECODE_OFF ||
        pkv__decode_setup_make(e->variant, HEAD_DIM, GROUP, 128, 0,
                               pkv__ocl_intel_gpu(cpu_device, ext),
                               local_mem, max_group, &su) != 0) {
        fprintf(stderr, "pkv-bench kernels: no decode variant (%s)\n",
                e->variant == PKV__DECODE_OFF
                    ? e->variant_why
                    : "the variant does not fit the device");
        return 1;
    }
    e->variant_file = su.file;
    snprintf(e->variant_opts, sizeof e->variant_opts, "%s", su.options);
    e->lanes = su.lanes;
    e->partition = su.partition;
    e->split = su.split;
    return 0;
}

static int cl_open(cl_env *e)
{
    const char *want = getenv("PKV_OPENCL_DEVICE");
    cl_platform_id plats[16];
    cl_uint np = 0;
    if (clGetPlatformIDs(16, plats, &np) != CL_SUCCESS || np == 0) {
        fprintf(stderr, "pkv-bench kernels: no OpenCL platform\n");
        return 1;
    }
    int found = 0;
    for (cl_uint p = 0; p < np && !found; p++) {
        cl_device_id devs[16];
        cl_uint nd = 0;
        char pname[256] = "";
        clGetPlatformInfo(plats[p], CL_PLATFORM_NAME, sizeof pname, pname,
                          NULL);
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 16, devs, &nd) !=
            CL_SUCCESS)
            continue;
        for (cl_uint d = 0; d < nd && !found; d++) {
            char dname[256] = "";
            clGetDeviceInfo(devs[d], CL_DEVICE_NAME, sizeof dname, dname,
                            NULL);
            if (want == NULL || strstr(pname, want) || strstr(dname, want)) {
                e->platform = plats[p];
                e->device = devs[d];
                snprintf(e->name, sizeof e->name, "%.120s / %.120s", pname,
                         dname);
                found = 1;
            }
        }
    }
    if (!found) {
        fprintf(stderr, "pkv-bench kernels: no OpenCL device matches %s\n",
                want != NULL ? want : "(any)");
        return 1;
    }
    cl_int err;
    e->ctx = clCreateContext(NULL, 1, &e->device, NULL, NULL, &err);
    if (cl_check(err, "clCreateContext"))
        return 1;
    e->queue = clCreateCommandQueue(e->ctx, e->device, 0, &err);
    if (cl_check(err, "clCreateCommandQueue"))
        return 1;
    clGetDeviceInfo(e->device, CL_DEVICE_MAX_COMPUTE_UNITS,
                    sizeof e->compute_units, &e->compute_units, NULL);
    clGetDeviceInfo(e->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE,
                    sizeof e->max_alloc, &e->max_alloc, NULL);
    return choose_variant(e);
}

static void cl_close(cl_env *e)
{
    if (e->queue != NULL)
        clReleaseCommandQueue(e->queue);
    if (e->ctx != NULL)
        clReleaseContext(e->ctx);
}

/* Build the device's decode variant for the geometry, reading arena
 * blocks through the block tables, or (contiguous) sequence i's block j at
 * i * max_blocks + j. */
static cl_program build(const cl_env *e, int contiguous, int dtype,
                        uint32_t block_size)
{
    char src[512], opts[1024], geometry[512];
    snprintf(src, sizeof src,
             "%s#include \"tensor_io.cl\"\n#include \"decode_common.cl\"\n"
             "#include \"%s\"\n",
             contiguous ? "#define PKV_DECODE_CONTIGUOUS 1\n" : "",
             e->variant_file);
    pkv__decode_build_options(HEAD_DIM, block_size, GROUP, dtype,
                              PKV_LAYOUT_PER_CHANNEL, PKV_LAYOUT_PER_TOKEN,
                              U4G, e->variant_opts, geometry,
                              sizeof geometry);
    snprintf(opts, sizeof opts, "-I %s -I %s%s", PKV_KERNELS_DIR,
             PKV_SRC_DIR, geometry);
    cl_int err;
    const char *srcs[1] = {src};
    cl_program p = clCreateProgramWithSource(e->ctx, 1, srcs, NULL, &err);
    if (cl_check(err, "clCreateProgramWithSource"))
        return NULL;
    err = clBuildProgram(p, 1, &e->device, opts, NULL, NULL);
    if (err != CL_SUCCESS) {
        char log[8192] = "";
        clGetProgramBuildInfo(p, e->device, CL_PROGRAM_BUILD_LOG, sizeof log,
                              log, NULL);
        fprintf(stderr, "pkv-bench kernels: building %s (%s) failed:\n%s\n",
                e->variant_file, opts, log);
        clReleaseProgram(p);
        return NULL;
    }
    return p;
}

/* ------------------------------------------------------------ the data */

static const char *const DTYPE_NAME[] = {"f32", "f16", "u8", "u4",
                                          "u8k-u4v"};
#define NUM_DTYPES 5
static const char *const VARIANT_NAME[] = {"off", "cpu", "gpu", "intel"};

typedef struct decode_case {
    int dtype;
    uint32_t ctx_max, batch, block_size;
    uint32_t window;
    const uint32_t *ctx; /* [batch], or NULL: every sequence at ctx_max */
} decode_case;

/* Bytes of one kv head's K and V for one block (parameters included). */
static size_t head_bytes(int dtype, uint32_t bs)
{
    return PKV_LAYOUT_HEAD_BYTES((size_t)dtype, (size_t)PKV_LAYOUT_PER_CHANNEL,
                                 (size_t)PKV_LAYOUT_PER_TOKEN, (size_t)U4G,
                                 (size_t)bs, (size_t)HEAD_DIM);
}

static float rand_sym(uint64_t *rng)
{
    return (float)(2.0 * host_uniform(rng) - 1.0);
}

/* The dtype and grouping of a cache's K part (kv 0) or V part (kv 1): keys
 * per channel, values per token (u4: in groups of U4G channels). */
static int part_dtype(int dtype, int kv)
{
    return kv ? PKV_LAYOUT_VALUE_DTYPE(dtype) : PKV_LAYOUT_KEY_DTYPE(dtype);
}

static int part_group(int kv)
{
    return kv ? PKV_LAYOUT_PER_TOKEN : PKV_LAYOUT_PER_CHANNEL;
}

/* Byte offset of a head's V part (after its K part). */
static size_t v_offset(int dtype, uint32_t bs)
{
    return PKV_LAYOUT_PART_BYTES((size_t)part_dtype(dtype, 0),
                                 (size_t)part_group(0), (size_t)U4G,
                                 (size_t)bs, (size_t)HEAD_DIM);
}

/* Random contents for every block: f32/f16 in [-1, 1]; u8 and u4 random
 * codes with lo in [-1, 0] and scale in [0, 2 / levels], as the quantizer
 * would store for values of that range. */
static void fill_arena(uint8_t *arena, size_t blocks, int dtype, uint32_t bs,
                       uint64_t *rng)
{
    size_t hb = head_bytes(dtype, bs);
    for (size_t h = 0; h < blocks * HKV; h++) {
        uint8_t *head = arena + h * hb;
        for (int kv = 0; kv < 2; kv++) {
            uint8_t *part = head + (kv ? v_offset(dtype, bs) : 0);
            int pd = part_dtype(dtype, kv);
            size_t n = (size_t)bs * HEAD_DIM;
            if (pd == PKV_LAYOUT_F32) {
                float *x = (float *)(void *)part;
                for (size_t i = 0; i < n; i += 2) {
                    uint64_t r = host_rand(rng);
                    x[i] = (float)(r >> 40) * 0x1p-23f - 1.0f;
                    x[i + 1] = (float)(r & 0xffffff) * 0x1p-23f - 1.0f;
                }
            } else if (pd == PKV_LAYOUT_F16) {
                /* Random sign and mantissa, exponent 2^-3 to 2^-1. */
                uint16_t *x = (uint16_t *)(void *)part;
                for (size_t i = 0; i < n; i += 4) {
                    uint64_t r = host_rand(rng);
                    for (size_t k = 0; k < 4; k++) {
                        uint16_t b = (uint16_t)(r >> (16 * k));
                        x[i + k] = (uint16_t)((b & 0x83ffu) |
                                              ((12u + b % 3u) << 10));
                    }
                }
            } else {
                size_t code_bytes =
                    PKV_LAYOUT_Q_CODE_BYTES((size_t)pd, (size_t)bs,
                                            (size_t)HEAD_DIM);
                for (size_t i = 0; i < code_bytes; i += 8) {
                    uint64_t r = host_rand(rng);
                    memcpy(part + i, &r, 8);
                }
                size_t groups = PKV_LAYOUT_Q_GROUPS(
                    (size_t)pd, (size_t)part_group(kv), (size_t)U4G,
                    (size_t)bs, (size_t)HEAD_DIM);
                float levels = (float)PKV_LAYOUT_Q_LEVELS(pd);
                uint16_t *lo = (uint16_t *)(void *)(part + code_bytes);
                for (size_t g = 0; g < groups; g++) {
                    lo[g] = pkv__f32_to_f16(-(float)host_uniform(rng));
                    lo[groups + g] = pkv__f32_to_f16(
                        (float)host_uniform(rng) * (2.0f / levels));
                }
            }
        }
    }
}

/* A head's K part (kv 0) or V part (kv 1) of a full block as f32,
 * [token][channel], as the kernels read it: the library's own f16
 * conversion and dequantisation (lo + code * scale in f32). */
static void part_values(const uint8_t *head, int dtype, uint32_t bs, int kv,
                        float *dst)
{
    const uint8_t *part = head + (kv ? v_offset(dtype, bs) : 0);
    int pd = part_dtype(dtype, kv);
    uint32_t n = bs * HEAD_DIM;
    if (pd == PKV_LAYOUT_F32) {
        memcpy(dst, part, n * sizeof *dst);
    } else if (pd == PKV_LAYOUT_F16) {
        pkv__f16_to_f32_n((const uint16_t *)(const void *)part, dst, n);
    } else {
        pkv__qformat f = {pd, part_group(kv), U4G};
        pkv__dequant_part(part, bs, HEAD_DIM, &f, dst);
    }
}

/* The C reference of one decode row: the sequence's K and V gathered
 * through its block table into contiguous f32 rows, then
 * tests/dense_ref.c's f64 attention. The quantized block holding the
 * context's last token reads the staging tail, also when it is full (the
 * step that fills a block reads it from there). 0, or -1 out of
 * memory. */
static int reference(const uint8_t *arena, const float *stages,
                     const uint32_t *table, const decode_case *c,
                     uint32_t max_blocks, uint32_t seq, const float *q,
                     float scale, float *out)
{
    uint32_t bs = c->block_size;
    uint32_t ctx = c->ctx != NULL ? c->ctx[seq] : c->ctx_max;
    size_t hb = head_bytes(c->dtype, bs), row = (size_t)HKV * HEAD_DIM;
    float *k = malloc(ctx * row * sizeof *k);
    float *v = malloc(ctx * row * sizeof *v);
    float *block = malloc((size_t)bs * HEAD_DIM * sizeof *block);
    double *o = malloc((size_t)HQ * HEAD_DIM * sizeof *o);
    int rc = -1;
    if (!k || !v || !block || !o)
        goto done;
    for (uint32_t j = 0; j * bs < ctx; j++) {
        uint32_t n = ctx - j * bs < bs ? ctx - j * bs : bs;
        int tail = PKV_LAYOUT_QUANTIZED(c->dtype) && (j + 1) * bs >= ctx;
        for (uint32_t kh = 0; kh < HKV; kh++) {
            const uint8_t *head =
                arena +
                ((size_t)table[(size_t)seq * max_blocks + j] * HKV + kh) * hb;
            const float *stage =
                stages + ((size_t)seq * HKV + kh) * 2 * bs * HEAD_DIM;
            for (int kv = 0; kv < 2; kv++) {
                const float *src = stage + (size_t)kv * bs * HEAD_DIM;
                if (!tail) {
                    part_values(head, c->dtype, bs, kv, block);
                    src = block;
                }
                float *dst = kv ? v : k;
                for (uint32_t t = 0; t < n; t++)
                    memcpy(dst + ((size_t)(j * bs + t) * HKV + kh) * HEAD_DIM,
                           src + (size_t)t * HEAD_DIM,
                           HEAD_DIM * sizeof *dst);
            }
        }
    }
    uint32_t last = 0; /* the one query row, the context's last token */
    dense_ref_attention(q + (size_t)seq * HQ * HEAD_DIM, k, v, 1, ctx, HQ,
                        HKV, HEAD_DIM, scale, c->window, &last, 1, o);
    for (size_t i = 0; i < (size_t)HQ * HEAD_DIM; i++)
        out[(size_t)seq * HQ * HEAD_DIM + i] = (float)o[i];
    rc = 0;
done:
    free(k);
    free(v);
    free(block);
    free(o);
    return rc;
}

/* ------------------------------------------------------------- a run */

typedef struct decode_gpu {
    /* [0] reads through the block tables, [1] the contiguous baseline */
    cl_kernel partial[2], reduce[2];
    cl_mem arena, stages, stage_ids, q, lens, table, out, part_acc, part_ml;
    pkv__decode_plan plan;
    uint32_t max_blocks;
} decode_gpu;

static int set_args(decode_gpu *g, int which, const decode_case *c,
                    float scale)
{
    cl_kernel partial = g->partial[which], reduce = g->reduce[which];
    cl_uint stage_floats = 2u * HKV * c->block_size * HEAD_DIM, zero = 0;
    cl_uint hkv = HKV, window = c->window;
    cl_uint psize = g->plan.partition_size, nparts = g->plan.num_partitions;
    cl_ulong off = 0;
    cl_int err = 0;
    err |= clSetKernelArg(partial, 0, sizeof(cl_mem), &g->arena);
    err |= clSetKernelArg(partial, 1, sizeof(cl_mem), &g->stages);
    err |= clSetKernelArg(partial, 2, sizeof(cl_uint), &stage_floats);
    err |= clSetKernelArg(partial, 3, sizeof(cl_uint), &zero);
    err |= clSetKernelArg(partial, 4, sizeof(cl_mem), &g->stage_ids);
    err |= clSetKernelArg(partial, 5, sizeof(cl_mem), &g->q);
    err |= clSetKernelArg(partial, 6, sizeof off, &off);
    err |= clSetKernelArg(partial, 7, sizeof(cl_mem), &g->lens);
    err |= clSetKernelArg(partial, 8, sizeof(cl_mem), &g->table);
    err |= clSetKernelArg(partial, 9, sizeof(cl_uint), &g->max_blocks);
    err |= clSetKernelArg(partial, 10, sizeof(cl_uint), &hkv);
    err |= clSetKernelArg(partial, 11, sizeof(float), &scale);
    err |= clSetKernelArg(partial, 12, sizeof(cl_uint), &window);
    err |= clSetKernelArg(partial, 13, sizeof(cl_uint), &psize);
    err |= clSetKernelArg(partial, 14, sizeof(cl_mem), &g->out);
    err |= clSetKernelArg(partial, 15, sizeof off, &off);
    err |= clSetKernelArg(partial, 16, sizeof(cl_uint), &zero);
    err |= clSetKernelArg(partial, 17, sizeof(cl_mem), &g->part_acc);
    err |= clSetKernelArg(partial, 18, sizeof(cl_mem), &g->part_ml);
    err |= clSetKernelArg(reduce, 0, sizeof(cl_mem), &g->part_acc);
    err |= clSetKernelArg(reduce, 1, sizeof(cl_mem), &g->part_ml);
    err |= clSetKernelArg(reduce, 2, sizeof(cl_uint), &nparts);
    err |= clSetKernelArg(reduce, 3, sizeof(cl_mem), &g->out);
    err |= clSetKernelArg(reduce, 4, sizeof off, &off);
    err |= clSetKernelArg(reduce, 5, sizeof(cl_uint), &zero);
    return cl_check(err, "clSetKernelArg");
}

static int enqueue(const cl_env *e, decode_gpu *g, int which, uint32_t batch)
{
    size_t lanes = e->lanes;
    size_t gp[3] = {g->plan.num_partitions * lanes, (size_t)HKV * e->split,
                    batch};
    size_t lp[3] = {lanes, lanes == 1 ? HKV : 1, 1};
    cl_int err = clEnqueueNDRangeKernel(e->queue, g->partial[which], 3, NULL,
                                        gp, lp, 0, NULL, NULL);
    if (err == CL_SUCCESS && g->plan.num_partitions > 1) {
        size_t gr[3] = {HEAD_DIM / 4, HQ, batch};
        err = clEnqueueNDRangeKernel(e->queue, g->reduce[which], 3, NULL, gr,
                                     NULL, 0, NULL, NULL);
    }
    if (err == CL_SUCCESS)
        err = clFinish(e->queue);
    return cl_check(err, "decode kernels");
}

/* CPU seconds the process has used, every thread. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Median seconds of one decode step over reps runs (after a warm-up) of
 * the paged kernel (seconds[0]) and of the contiguous one (seconds[1]),
 * and the median CPU seconds the process spent on a paged step (on a CPU
 * device: the kernel's cost without the time other processes took from
 * it). The two take turns, step by step, in alternating order, so both
 * medians sample the same load: on a shared machine, timing one after the
 * other moved their ratio by 0.1-0.6 between runs. */
static int time_decode(const cl_env *e, decode_gpu *g, uint32_t batch,
                       int reps, double seconds[2], double *cpu)
{
    double t[2][32], c[32];
    if (enqueue(e, g, 0, batch) || enqueue(e, g, 1, batch))
        return 1;
    for (int r = 0; r < reps; r++) {
        for (int turn = 0; turn < 2; turn++) {
            int which = turn ^ (r & 1);
            double t0 = bench_now_s(), c0 = cpu_now();
            if (enqueue(e, g, which, batch))
                return 1;
            t[which][r] = bench_now_s() - t0;
            if (which == 0)
                c[r] = cpu_now() - c0;
        }
    }
    for (int which = 0; which < 2; which++)
        seconds[which] = bench_median(t[which], (size_t)reps);
    *cpu = bench_median(c, (size_t)reps);
    return 0;
}

static void release_gpu(decode_gpu *g)
{
    cl_mem *m[] = {&g->arena, &g->stages, &g->stage_ids, &g->q,
                   &g->lens,  &g->table,  &g->out,       &g->part_acc,
                   &g->part_ml};
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
        if (*m[i] != NULL)
            clReleaseMemObject(*m[i]);
    for (int which = 0; which < 2; which++) {
        if (g->partial[which] != NULL)
            clReleaseKernel(g->partial[which]);
        if (g->reduce[which] != NULL)
            clReleaseKernel(g->reduce[which]);
    }
}

static cl_mem make_buffer(const cl_env *e, size_t bytes, const void *host)
{
    cl_int err;
    cl_mem m = clCreateBuffer(
        e->ctx, CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0),
        bytes > 0 ? bytes : 16, (void *)(uintptr_t)host, &err);
    return err == CL_SUCCESS ? m : NULL;
}

typedef struct decode_result {
    double seconds, contiguous_seconds, cpu_seconds, max_error;
    size_t kv_bytes;
    int skipped;
} decode_result;

/* Set up the case on the device, time it paged and contiguous (reps > 0),
 * or check it against the C reference (reps == 0). */
static int run_case(const cl_env *e, const decode_case *c, int reps,
                    int resident, decode_result *res)
{
    memset(res, 0, sizeof *res);
    uint32_t bs = c->block_size, batch = c->batch;
    uint32_t max_blocks = (c->ctx_max + bs - 1) / bs;
    size_t blocks = (size_t)batch * max_blocks;
    size_t arena_bytes = blocks * HKV * head_bytes(c->dtype, bs);
    if (arena_bytes > e->max_alloc) {
        res->skipped = 1;
        return 0;
    }
    uint64_t rng = 1234567u + (uint64_t)c->dtype * 7919u + c->ctx_max + batch;
    uint8_t *arena = malloc(arena_bytes);
    size_t stage_floats = (size_t)2 * HKV * bs * HEAD_DIM;
    float *stages = malloc(batch * stage_floats * sizeof(float));
    uint32_t *table = malloc(blocks * sizeof *table);
    uint32_t *lens = malloc(batch * sizeof *lens);
    uint32_t *ids = malloc(batch * sizeof *ids);
    float *q = malloc((size_t)batch * HQ * HEAD_DIM * sizeof *q);
    float *out = malloc((size_t)batch * HQ * HEAD_DIM * sizeof *out);
    float *ref = malloc((size_t)batch * HQ * HEAD_DIM * sizeof *ref);
    decode_gpu g;
    memset(&g, 0, sizeof g);
    int rc = 1;
    if (!arena || !stages || !table || !lens || !ids || !q || !out || !ref)
        goto done;
    fill_arena(arena, blocks, c->dtype, bs, &rng);
    for (size_t i = 0; i < batch * stage_floats; i++)
        stages[i] = rand_sym(&rng);
    for (uint32_t i = 0; i < batch * HQ * HEAD_DIM; i++)
        q[i] = rand_sym(&rng);
    /* Random non-contiguous block tables: a shuffle of every block. */
    for (size_t i = 0; i < blocks; i++)
        table[i] = (uint32_t)i;
    for (size_t i = blocks; i > 1; i--) {
        size_t j = host_rand(&rng) % i;
        uint32_t tmp = table[i - 1];
        table[i - 1] = table[j];
        table[j] = tmp;
    }
    /* --resident: 8 blocks that every table cycles through stay in cache,
     * so the paged kernel runs at its compute floor. */
    for (size_t i = 0; resident && i < blocks; i++)
        table[i] = table[i % 8];
    uint32_t longest = 0;
    for (uint32_t i = 0; i < batch; i++) {
        lens[i] = c->ctx != NULL ? c->ctx[i] : c->ctx_max;
        longest = lens[i] > longest ? lens[i] : longest;
        ids[i] = i;
        res->kv_bytes += (size_t)lens[i] * HKV * head_bytes(c->dtype, bs) / bs;
    }
    g.plan = pkv__decode_plan_make(batch, HKV, longest, c->window, bs,
                                   e->compute_units, e->partition);
    g.max_blocks = max_blocks;
    size_t rows = (size_t)batch * HQ;
    size_t parts = rows * g.plan.num_partitions;
    g.arena = make_buffer(e, arena_bytes, arena);
    g.stages = make_buffer(e, batch * stage_floats * sizeof(float), stages);
    g.stage_ids = make_buffer(e, batch * sizeof *ids, ids);
    g.q = make_buffer(e, rows * HEAD_DIM * sizeof *q, q);
    g.lens = make_buffer(e, batch * sizeof *lens, lens);
    g.table = make_buffer(e, blocks * sizeof *table, table);
    g.out = make_buffer(e, rows * HEAD_DIM * sizeof *out, NULL);
    g.part_acc = make_buffer(e, parts * HEAD_DIM * sizeof(float), NULL);
    g.part_ml = make_buffer(e, parts * 2 * sizeof(float), NULL);
    if (!g.arena || !g.stages || !g.stage_ids || !g.q || !g.lens ||
        !g.table || !g.out || !g.part_acc || !g.part_ml) {
        fprintf(stderr, "pkv-bench kernels: clCreateBuffer failed\n");
        goto done;
    }
    float scale = 1.0f / sqrtf((float)HEAD_DIM);
    /* The paged kernel, and for timing the contiguous one as well. */
    for (int which = 0; which < (reps > 0 ? 2 : 1); which++) {
        cl_program p = build(e, which, c->dtype, bs);
        if (p == NULL)
            goto done;
        cl_int err1, err2;
        g.partial[which] = clCreateKernel(p, "pkv_decode_partial", &err1);
        g.reduce[which] = clCreateKernel(p, "pkv_decode_reduce", &err2);
        clReleaseProgram(p);
        if (cl_check(err1 | err2, "clCreateKernel") ||
            set_args(&g, which, c, scale))
            goto done;
    }
    if (reps > 0) {
        double s[2];
        if (time_decode(e, &g, batch, reps, s, &res->cpu_seconds))
            goto done;
        res->seconds = s[0];
        res->contiguous_seconds = s[1];
    } else {
        if (enqueue(e, &g, 0, batch) ||
            cl_check(clEnqueueReadBuffer(e->queue, g.out, CL_TRUE, 0,
                                         rows * HEAD_DIM * sizeof *out, out,
                                         0, NULL, NULL),
                     "clEnqueueReadBuffer"))
            goto done;
        for (uint32_t i = 0; i < batch; i++)
            if (reference(arena, stages, table, c, max_blocks, i, q, scale,
                          ref) != 0)
                goto done;
        for (size_t i = 0; i < rows * HEAD_DIM; i++) {
            double d = fabs((double)out[i] - (double)ref[i]);
            res->max_error = d > res->max_error || d != d ? d
                                                           : res->max_error;
        }
    }
    rc = 0;
done:
    release_gpu(&g);
    free(arena);
    free(stages);
    free(table);
    free(lens);
    free(ids);
    free(q);
    free(out);
    free(ref);
    return rc;
}

/* ------------------------------------------------------------ the report */

/* Correctness: every dtype against the plain C reference, with ragged
 * contexts, a quantized tail block, split partitions and a sliding
 * window. */
static int check_all(const cl_env *e, const bench_options *opt)
{
    static const uint32_t lens[5] = {1000, 37, 517, 1, 4096};
    int rc = 0;
    for (int dt = 0; dt < NUM_DTYPES; dt++) {
        for (uint32_t w = 0; w <= 300; w += 300) {
            decode_case c = {dt, 4096, 5, 16, w, lens};
            decode_result r;
            if (run_case(e, &c, 0, opt->resident, &r))
                return 1;
            /* f32 accumulation over up to 4096 tokens in a different order
             * than the double reference; outputs are O(1). */
            int ok = r.max_error < 1e-4;
            printf("check %-7s window %3u: max |kernel - C reference| = "
                   "%.2e %s\n",
                   DTYPE_NAME[dt], (unsigned)w, r.max_error,
                   ok ? "ok" : "FAILED (tolerance 1e-4)");
            if (opt->json != NULL)
                fprintf(opt->json,
                        "{\"bench\":\"decode_check\",\"variant\":\"%s\","
                        "\"kv\":\"%s\",\"window\":%u,\"max_error\":%.3e,"
                        "\"ok\":%s}\n",
                        VARIANT_NAME[e->variant], DTYPE_NAME[dt], (unsigned)w,
                        r.max_error,
                        ok ? "true" : "false");
            rc |= !ok;
        }
    }
    return rc;
}

/* The case of dtype dt at c's context, batch and block size that ran, or
 * NULL. */
static const decode_result *same_shape(const decode_case *cases,
                                       const decode_result *results, int n,
                                       const decode_case *c, int dt)
{
    for (int i = 0; i < n; i++)
        if (cases[i].dtype == dt && cases[i].ctx_max == c->ctx_max &&
            cases[i].batch == c->batch &&
            cases[i].block_size == c->block_size && results[i].seconds > 0.0)
            return &results[i];
    return NULL;
}

/* The ratio rows: u8, u4 and u8k-u4v against u8 and f16 of the same
 * context, batch and block size, in bytes per token, median time per step
 * and median CPU time per step. */
static void print_ratios(const cl_env *e, const bench_options *opt,
                         const decode_case *cases,
                         const decode_result *results, int n)
{
    static const int refs[2] = {PKV_LAYOUT_U8, PKV_LAYOUT_F16};
    printf("\nQuantized KV against u8 and against f16, same ctx, batch and "
           "block (x / ref:\nunder 1 is fewer bytes, less time):\n");
    printf("%-7s %5s %5s %4s  %7s %7s %7s  %7s %7s %7s\n", "kv", "ctx",
           "batch", "bs", "B/tok", "ms", "CPU ms", "B/tok", "ms", "CPU ms");
    printf("%-7s %5s %5s %4s  %23s  %23s\n", "", "", "", "", "/ u8 ",
           "/ f16 ");
    for (int i = 0; i < n; i++) {
        const decode_case *c = &cases[i];
        const decode_result *r = &results[i];
        if (!PKV_LAYOUT_QUANTIZED(c->dtype) || r->seconds <= 0.0)
            continue;
        char text[2][3][16], json[2][3][16];
        int any = 0;
        for (int k = 0; k < 2; k++) {
            const decode_result *ref =
                refs[k] == c->dtype
                    ? NULL
                    : same_shape(cases, results, n, c, refs[k]);
            any |= ref != NULL;
            double bytes = (double)head_bytes(c->dtype, c->block_size);
            double ref_bytes =
                ref ? (double)head_bytes(refs[k], c->block_size) : 0.0;
            ratio(bytes, ref_bytes, text[k][0], json[k][0]);
            ratio(r->seconds, ref ? ref->seconds : 0.0, text[k][1],
                  json[k][1]);
            ratio(r->cpu_seconds, ref ? ref->cpu_seconds : 0.0, text[k][2],
                  json[k][2]);
        }
        if (!any)
            continue;
        printf("%-7s %5u %5u %4u  %7s %7s %7s  %7s %7s %7s\n",
               DTYPE_NAME[c->dtype], (unsigned)c->ctx_max, (unsigned)c->batch,
               (unsigned)c->block_size, text[0][0], text[0][1], text[0][2],
               text[1][0], text[1][1], text[1][2]);
        if (opt->json != NULL)
            fprintf(opt->json,
                    "{\"bench\":\"decode_ratio\",\"variant\":\"%s\","
                    "\"device\":\"%s\",\"kv\":\"%s\",\"ctx\":%u,"
                    "\"batch\":%u,\"block_size\":%u,"
                    "\"bytes_over_u8\":%s,\"seconds_over_u8\":%s,"
                    "\"cpu_seconds_over_u8\":%s,\"bytes_over_f16\":%s,"
                    "\"seconds_over_f16\":%s,\"cpu_seconds_over_f16\":%s}\n",
                    VARIANT_NAME[e->variant], e->name, DTYPE_NAME[c->dtype],
                    (unsigned)c->ctx_max, (unsigned)c->batch,
                    (unsigned)c->block_size, json[0][0], json[0][1],
                    json[0][2], json[1][0], json[1][1], json[1][2]);
    }
}

int bench_kernels(const bench_options *opt)
{
    cl_env e;
    memset(&e, 0, sizeof e);
    if (cl_open(&e)) {
        cl_close(&e);
        return 1;
    }
    static const int dtypes[NUM_DTYPES] = {
        PKV_LAYOUT_U8, PKV_LAYOUT_U4, PKV_LAYOUT_U8K_U4V, PKV_LAYOUT_F16,
        PKV_LAYOUT_F32};
    static const uint32_t ctxs[4] = {512, 2048, 4096, 8192};
    static const uint32_t batches[4] = {1, 16, 32, 64};
    static const uint32_t sweep[4] = {16, 32, 64, 128};
    decode_case cases[96];
    int n = 0;
    /* The dtypes of a shape back to back, so that the ratio rows compare
     * steps timed under about the same load. */
    for (int ci = 0; ci < 4; ci++)
        for (int bi = 0; bi < 4; bi++)
            for (int di = 0; di < NUM_DTYPES; di++) {
                int dt = dtypes[di];
                if (opt->quick && !(ctxs[ci] == 4096 && batches[bi] == 16 &&
                                    dt != PKV_LAYOUT_F32))
                    continue;
                decode_case c = {dt, ctxs[ci], batches[bi], 16, 0, NULL};
                cases[n++] = c;
            }
    for (int si = 1; si < 4; si++) {
        if (opt->quick && sweep[si] != 64)
            continue;
        decode_case c = {PKV_LAYOUT_U8, 4096, 16, sweep[si], 0, NULL};
        cases[n++] = c;
    }

    /* The two references, before any kernel runs: the stream, and the
     * shuffled blocks of every head-part size the cases read. */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = ncpu > 0 ? (int)ncpu : 1;
    size_t part_bytes[16];
    double part_gbps[16];
    int parts = 0;
    double bw = 0.0;
    void *buf = bench_bw_buffer();
    if (buf != NULL) {
        bw = bench_read_gbps(buf, threads, (size_t)1 << 20, 0);
        for (int i = 0; i < n; i++) {
            size_t hb = head_bytes(cases[i].dtype, cases[i].block_size);
            int k = 0;
            while (k < parts && part_bytes[k] != hb)
                k++;
            if (k == parts && parts < 16) {
                part_bytes[parts] = hb;
                part_gbps[parts++] = bench_read_gbps(buf, threads, hb, 1);
            }
        }
        free(buf);
    }
    size_t llc = bench_llc_bytes();
    printf("Decode attention, Hq %u, Hkv %u, head_dim %u; device: %s "
           "(%u compute units)\ndecode variant: %s (%s)\n",
           HQ, HKV, HEAD_DIM, e.name, (unsigned)e.compute_units,
           e.variant_file, e.variant_why);
    printf("memory read bandwidth: %.1f GB/s (C, %d pthreads, vectorized "
           "sum over 1 GiB, best of 5)\n",
           bw, threads);
    if (opt->resident)
        printf("--resident: every block table cycles through the same 8 "
               "blocks (KV in cache)\n");
    for (int k = 0; k < parts; k++) {
        char of_bw[16], json[16];
        share(part_gbps[k], bw, of_bw, json);
        printf("block read, %zu-byte head parts in random order: %.1f GB/s "
               "(%s)\n",
               part_bytes[k], part_gbps[k], of_bw);
    }
    printf("\n");
    bench_progress("kernels: checking every dtype against the C reference");
    int rc = check_all(&e, opt);

    FILE *plot = bench_plot_open(opt, "kernels");
    printf("%-7s %5s %5s %4s %6s %9s %8s %7s %7s %8s %8s %5s %s\n", "kv",
           "ctx", "batch", "bs", "B/tok", "ms", "KV GB/s", "of bw", "of blk",
           "paged/", "CPU ms", "parts", "");
    printf("%-7s %5s %5s %4s %6s %9s %8s %7s %7s %8s %8s %5s %s\n", "", "",
           "", "", "", "(median)", "", "", "", "contig", "", "", "");
    decode_result results[96];
    memset(results, 0, sizeof results);
    for (int i = 0; i < n && rc == 0; i++) {
        const decode_case *c = &cases[i];
        decode_result r;
        size_t bpt = HKV * head_bytes(c->dtype, c->block_size) /
                     c->block_size;
        int reps = opt->quick ? 5 : 7;
        bench_progress("kernels: case %d of %d", i + 1, n);
        if (run_case(&e, c, reps, opt->resident, &r)) {
            rc = 1;
            break;
        }
        results[i] = r;
        if (r.skipped) {
            printf("%-7s %5u %5u %4u %6zu  skipped: KV exceeds "
                   "CL_DEVICE_MAX_MEM_ALLOC_SIZE (%.0f MiB)\n",
                   DTYPE_NAME[c->dtype], (unsigned)c->ctx_max,
                   (unsigned)c->batch, (unsigned)c->block_size, bpt,
                   (double)e.max_alloc / 1048576.0);
            continue;
        }
        pkv__decode_plan plan =
            pkv__decode_plan_make(c->batch, HKV, c->ctx_max, 0,
                                  c->block_size, e.compute_units, e.partition);
        double gbps = (double)r.kv_bytes / r.seconds / 1e9;
        double ratio = r.seconds / r.contiguous_seconds;
        int resident = r.kv_bytes <= llc;
        double blk = 0.0;
        for (int k = 0; k < parts; k++)
            if (part_bytes[k] == head_bytes(c->dtype, c->block_size))
                blk = part_gbps[k];
        char of_bw[16], of_blk[16], json_bw[16], json_blk[16];
        share(gbps, bw, of_bw, json_bw);
        share(gbps, blk, of_blk, json_blk);
        printf("%-7s %5u %5u %4u %6zu %9.2f %8.2f %7s %7s %8.3f "
               "%8.2f %5u %s\n",
               DTYPE_NAME[c->dtype], (unsigned)c->ctx_max, (unsigned)c->batch,
               (unsigned)c->block_size, bpt, r.seconds * 1e3, gbps, of_bw,
               of_blk, ratio, r.cpu_seconds * 1e3,
               (unsigned)plan.num_partitions,
               resident ? "cache-resident" : "");
        if (plot != NULL)
            fprintf(plot, "\"%s %u x%u bs%u\" %.2f %.3f\n",
                    DTYPE_NAME[c->dtype], (unsigned)c->ctx_max,
                    (unsigned)c->batch, (unsigned)c->block_size,
                    bw > 0.0 ? 100.0 * gbps / bw : 0.0, ratio);
        if (opt->json != NULL)
            fprintf(opt->json,
                    "{\"bench\":\"decode\",\"variant\":\"%s\","
                    "\"device\":\"%s\",\"kv\":\"%s\",\"ctx\":%u,"
                    "\"batch\":%u,\"block_size\":%u,\"seconds\":%.6e,"
                    "\"kv_gbps\":%.3f,\"mem_read_gbps\":%.3f,"
                    "\"fraction_of_bandwidth\":%s,"
                    "\"block_read_gbps\":%.3f,"
                    "\"fraction_of_block_read\":%s,"
                    "\"paged_over_contiguous\":%.4f,\"bytes_per_token\":%zu,"
                    "\"cache_resident\":%s,\"tables_resident\":%s,"
                    "\"partitions\":%u,"
                    "\"cpu_seconds\":%.6e}\n",
                    VARIANT_NAME[e.variant], e.name, DTYPE_NAME[c->dtype],
                    (unsigned)c->ctx_max, (unsigned)c->batch,
                    (unsigned)c->block_size, r.seconds, gbps, bw, json_bw,
                    blk, json_blk, ratio, bpt,
                    resident ? "true" : "false",
                    opt->resident ? "true" : "false",
                    (unsigned)plan.num_partitions, r.cpu_seconds);
        fflush(stdout);
    }
    bench_plot_close(
        opt, plot, "kernels",
        "set style data histograms\n"
        "set style fill solid 0.8\n"
        "set xtics rotate by -60\n"
        "set bmargin 8\n"
        "set ylabel '% of measured read bandwidth'\n"
        "set y2label 'paged / contiguous time'\n"
        "set y2tics\n"
        "set yrange [0:*]\n"
        "set y2range [0:*]\n"
        "plot data using 2:xtic(1) title 'KV GB/s, % of bandwidth', "
        "'' using 0:3 axes x1y2 with points pt 7 "
        "title 'paged / contiguous'");
    printf("\nB/tok: KV bytes per token over all %u kv heads (K + V, "
           "quantization parameters\nincluded); u8 and u4 keys per channel, "
           "values per token (u4: a lo and scale\nper %u channels of a "
           "token). of blk: share of the block read of the case's\n"
           "head-part size. CPU ms: process CPU time per step (all threads; "
           "on a CPU\ndevice the kernel's own cost, whatever other processes "
           "take).\n",
           HKV, U4G);
    if (rc == 0)
        print_ratios(&e, opt, cases, results, n);
    cl_close(&e);
    return rc;
}

#endif
