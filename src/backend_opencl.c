/* SPDX-License-Identifier: MIT */
/*
 * The OpenCL backend: the KV cache in device buffers (one arena per layer,
 * kv_layout.h), kernels from the kernels/ files, one in-order queue.
 *
 * Host-memory tensors are borrowed for the call, so append and attend wait
 * for their work before returning, and they go through device buffers
 * kept between calls: no buffer is created per call (a wrap of host
 * memory, CL_MEM_USE_HOST_PTR, would outlive the borrow or cost a
 * clCreateBuffer per layer; a host that wants no copy wraps its memory
 * once itself and passes cl_mem tensors). cl_mem tensors
 * (pkv__opencl_attend_device) are only enqueued.
 *
 * Programs (opencl_program.c): one generic program per device holds every
 * kernel but decode, with geometry and dtype as kernel arguments, so one
 * build serves every engine on the device; the decode kernels are
 * specialised per geometry and built on the first all-decode step.
 */
#include "backend_opencl.h"

#include "error.h"
#include "kv_layout.h"
#include "decode_plan.h"
#include "kv_step.h"
#include "opencl_features.h"
#include "opencl_program.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOCAL_ROWS 16u /* work-group width of the per-row kernels */

/* -------------------------------------------------------------- backend */

struct pkv__backend {
    pkv__backend_config cfg;
    pkv__allocator alloc;
    pkv__cl_target cl; /* device, context, log, program cache */
    cl_command_queue queue;
    cl_program program;
    cl_kernel k_append, k_seal, k_attend, k_copy, k_tiled;
    /* Steps with more rows than sequences: pkv_paged_attention, or with
     * tile_rows > 0 the tiled kernel (chunk tokens staged at a time). */
    uint32_t tile_rows, tile_chunk, num_tiles;
    size_t local_append, local_seal, local_attend, local_copy;
    int unified;         /* CL_DEVICE_HOST_UNIFIED_MEMORY (for the log) */
    char device_name[4 * PKV__CL_NAME_MAX];
    /* pkv__backend_opencl named after the device, for the engine's log. */
    pkv__backend_ops ops;
    char ops_name[4 * PKV__CL_NAME_MAX + 16];

    uint32_t layer_block_bytes;
    uint32_t head_bytes;
    uint32_t k_part_bytes;
    uint32_t stage_floats;
    size_t arena_bytes;
    cl_mem *arenas; /* [num_layers] */
    cl_mem stages;  /* [num_stages][stage_floats] f32, or NULL */

    /* The step, packed (kv_step.h), its device copy and the upload. */
    pkv__step step;
    int have_step;
    int uploaded; /* the step's arrays are on the device */
    uint32_t num_seals;
    uint32_t *step_host;
    size_t step_host_cap; /* uints */
    cl_mem step_mem;
    size_t step_mem_cap; /* uints */
    cl_event upload;

    /* The split-K decode kernels (kernels/decode_common.cl) for steps whose
     * rows are one per sequence: the variant asked for by
     * PKV_OPENCL_DECODE (decode_request, a pkv__decode_kind), specialised
     * by -D on the geometry, built on the first such step. decode_state: 0
     * not built yet, 1 ready, -1 not used (off, or it did not build). */
    int decode_request;
    int decode_state;
    int step_is_decode;
    char cache_dir[1024]; /* cl.cache_dir points here when set */
    cl_uint compute_units;
    cl_program decode_program;
    uint32_t decode_lanes;     /* 1: CPU; 16: Intel; the GPU work-group */
    uint32_t decode_partition; /* the variant's longest partition; 0: any */
    char decode_variant[PKV__ERROR_MAX]; /* what was chosen, and why */
    cl_kernel k_partial, k_reduce;
    cl_mem dec_lens, dec_stages; /* this decode step's arrays */
    size_t dec_cap[2];           /* bytes */
    /* Every step's block tables: rows of table_stride entries (a stride
     * that only grows), written from a host mirror. device_rows knows
     * which table versions the device holds, so that a step uploads only
     * the rows that changed; checked, which ones begin_step checked. */
    cl_mem tables;
    size_t tables_cap; /* bytes */
    uint32_t *table_mirror;
    size_t table_mirror_cap; /* uints */
    uint32_t table_stride;
    pkv__tables_seen device_rows, checked;
    uint64_t table_words; /* uploaded to tables (tests) */
    uint64_t finishes;    /* clFinish calls of host-tensor layers (tests) */
    uint64_t buffers_created; /* clCreateBuffer calls (tests) */
    cl_mem part_acc, part_ml;
    size_t part_cap[2]; /* bytes */
    uint32_t max_context;

    /* Device copies of host tensors where no wrap is possible. */
    cl_mem tensor_mem[4];
    size_t tensor_cap[4];
    /* Swap and stage bytes to and from the host, copied on by kernels. */
    cl_mem transfer;
    size_t transfer_cap;
    /* pkv_block_copy's list of (dst, src) units: units_host's words,
     * written whole to units (both units_cap bytes). */
    cl_mem units;
    uint32_t *units_host;
    size_t units_cap;
};


static pkv_status make_kernel(pkv__backend *b, cl_program prog,
                              const char *name, cl_kernel *out, size_t *local,
                              size_t want)
{
    cl_int err;
    *out = clCreateKernel(prog, name, &err);
    if (err != CL_SUCCESS) {
        *out = NULL;
        char call[96];
        snprintf(call, sizeof call, "clCreateKernel(%s)", name);
        return pkv__cl_fail(err, call);
    }
    size_t max = 0;
    err = clGetKernelWorkGroupInfo(*out, b->cl.device,
                                   CL_KERNEL_WORK_GROUP_SIZE, sizeof max, &max,
                                   NULL);
    *local = err == CL_SUCCESS && max < want && max > 0 ? max : want;
    return PKV_OK;
}

/* The attention kernel of steps with more rows than sequences: the tiled
 * one where PKV_OPENCL_PREFILL (value pf) or the device type asks for it
 * and it fits, else pkv_paged_attention. */
static pkv_status prefill_prepare(pkv__backend *b, const char *pf)
{
    const pkv__backend_config *c = &b->cfg;
    cl_device_type type = 0;
    cl_ulong local_mem = 0;
    clGetDeviceInfo(b->cl.device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    clGetDeviceInfo(b->cl.device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local_mem,
                    &local_mem, NULL);
    b->tile_rows = 0;
    if (pkv__prefill_choose(pf, (type & CL_DEVICE_TYPE_CPU) != 0) !=
        PKV__PREFILL_TILES)
        return PKV_OK;
    size_t max_group = 0;
    pkv_status st = make_kernel(b, b->program, "pkv_paged_attention_tiled",
                                &b->k_tiled, &max_group, 1024);
    uint32_t group = c->num_q_heads / c->num_kv_heads, rows = 0, chunk = 0;
    if (st == PKV_OK &&
        pkv__prefill_tile_shape(group, c->head_dim, c->block_size, local_mem,
                                max_group, &rows, &chunk) == 0) {
        b->tile_rows = rows;
        b->tile_chunk = chunk;
        pkv__cl_log(&b->cl, PKV_LOG_INFO,
                    "opencl: prefill kernel tiled: %u rows x %u query heads "
                    "per work-group, %u tokens staged at a time",
                    (unsigned)rows, (unsigned)group, (unsigned)chunk);
    } else if (st == PKV_OK) {
        pkv__cl_log(&b->cl, PKV_LOG_WARN,
                    "opencl: prefill kernel rows: the tiled kernel does not "
                    "fit the device (%llu bytes of local memory, work-groups "
                    "of %zu)",
                    (unsigned long long)local_mem, max_group);
    }
    return st;
}

/* ------------------------------------------------------- create/destroy */

static void ocl_destroy(pkv__backend *b)
{
    if (b == NULL)
        return;
    if (b->queue != NULL)
        clFinish(b->queue);
    if (b->upload != NULL)
        clReleaseEvent(b->upload);
    for (int i = 0; i < 4; i++)
        if (b->tensor_mem[i] != NULL)
            clReleaseMemObject(b->tensor_mem[i]);
    if (b->step_mem != NULL)
        clReleaseMemObject(b->step_mem);
    if (b->transfer != NULL)
        clReleaseMemObject(b->transfer);
    if (b->units != NULL)
        clReleaseMemObject(b->units);
    pkv__free(&b->alloc, b->units_host, b->units_cap, 1);
    cl_mem decode_mems[] = {b->dec_lens, b->tables, b->dec_stages,
                            b->part_acc, b->part_ml};
    for (size_t i = 0; i < 5; i++)
        if (decode_mems[i] != NULL)
            clReleaseMemObject(decode_mems[i]);
    if (b->k_partial != NULL)
        clReleaseKernel(b->k_partial);
    if (b->k_reduce != NULL)
        clReleaseKernel(b->k_reduce);
    if (b->decode_program != NULL)
        clReleaseProgram(b->decode_program);
    if (b->stages != NULL)
        clReleaseMemObject(b->stages);
    if (b->arenas != NULL) {
        for (uint32_t l = 0; l < b->cfg.num_layers; l++)
            if (b->arenas[l] != NULL)
                clReleaseMemObject(b->arenas[l]);
        pkv__free(&b->alloc, b->arenas, b->cfg.num_layers,
                  sizeof *b->arenas);
    }
    cl_kernel ks[] = {b->k_append, b->k_seal, b->k_attend, b->k_copy,
                      b->k_tiled};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        if (ks[i] != NULL)
            clReleaseKernel(ks[i]);
    if (b->program != NULL)
        clReleaseProgram(b->program);
    if (b->queue != NULL)
        clReleaseCommandQueue(b->queue);
    if (b->cl.context != NULL)
        clReleaseContext(b->cl.context);
    pkv__free(&b->alloc, b->step_host, b->step_host_cap, sizeof(uint32_t));
    pkv__free(&b->alloc, b->table_mirror, b->table_mirror_cap,
              sizeof(uint32_t));
    pkv__tables_seen_release(&b->device_rows, &b->alloc);
    pkv__tables_seen_release(&b->checked, &b->alloc);
    pkv__allocator a = b->alloc;
    pkv__free(&a, b, 1, sizeof *b);
}

/* The host's context and queue: the queue must belong to the context and
 * run in order. */
static pkv_status adopt_host_queue(pkv__backend *b, cl_context ctx,
                                   cl_command_queue queue)
{
    if (ctx == NULL || queue == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "opencl_context and opencl_queue must be given "
                         "together");
    cl_context qctx = NULL;
    cl_int err = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof qctx,
                                       &qctx, NULL);
    if (err != CL_SUCCESS)
        return pkv__cl_fail(err, "clGetCommandQueueInfo(host queue)");
    if (qctx != ctx)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "the host's queue does not belong to its context");
    cl_command_queue_properties props = 0;
    err = clGetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof props,
                                &props, NULL);
    if (err == CL_SUCCESS)
        err = clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE,
                                    sizeof b->cl.device, &b->cl.device, NULL);
    if (err != CL_SUCCESS)
        return pkv__cl_fail(err, "clGetCommandQueueInfo(host queue)");
    if (props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)
        return pkv__fail(PKV_ERR_UNSUPPORTED,
                         "the host's queue is out of order; pkv needs an "
                         "in-order queue");
    clRetainContext(ctx);
    b->cl.context = ctx;
    clRetainCommandQueue(queue);
    b->queue = queue;
    return PKV_OK;
}

/* Block-table rows hold a power of two entries, at least 16; max_blocks
 * is at most 2^24 (max_model_len, engine.c). */
static uint32_t table_stride_for(uint32_t stride, uint32_t max_blocks)
{
    stride = stride ? stride : 16;
    while (stride < max_blocks)
        stride *= 2;
    return stride;
}

/* The most blocks a sequence of the config can hold. */
static uint32_t config_max_blocks(const pkv__backend_config *c)
{
    return (uint32_t)(((uint64_t)c->max_seq_tokens + c->block_size - 1) /
                      c->block_size);
}

/* Sizes against the device's limits, before anything is allocated. */
static pkv_status check_fit(pkv__backend *b)
{
    const pkv__backend_config *c = &b->cfg;
    cl_ulong max_alloc = 0, global = 0;
    clGetDeviceInfo(b->cl.device, CL_DEVICE_MAX_MEM_ALLOC_SIZE,
                    sizeof max_alloc, &max_alloc, NULL);
    clGetDeviceInfo(b->cl.device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global,
                    &global, NULL);
    size_t lbb = pkv__backend_layer_block_bytes(c);
    size_t stage_bytes = pkv__backend_stage_bytes(c);
    if (lbb > UINT32_MAX || stage_bytes / 4 > UINT32_MAX ||
        (uint64_t)lbb * c->num_blocks / c->num_blocks != lbb)
        return pkv__fail(PKV_ERR_UNSUPPORTED,
                         "opencl: a block of %zu bytes or a staging tail of "
                         "%zu bytes is beyond what the kernels address",
                         lbb, stage_bytes);
    uint64_t arena = (uint64_t)lbb * c->num_blocks;
    uint64_t stages = (uint64_t)stage_bytes * c->num_stages;
    uint64_t total = arena * c->num_layers + stages;
    if (arena > max_alloc || stages > max_alloc || total > global)
        return pkv__fail(PKV_ERR_DEVICE_MEMORY,
                         "opencl: %u layers of %u blocks need %llu bytes per "
                         "layer arena (%llu of staging tails), %llu in all; "
                         "the device '%s' allows %llu per buffer and %llu in "
                         "all: lower num_blocks or cache_bytes",
                         (unsigned)c->num_layers, (unsigned)c->num_blocks,
                         (unsigned long long)arena,
                         (unsigned long long)stages,
                         (unsigned long long)total, b->device_name,
                         (unsigned long long)max_alloc,
                         (unsigned long long)global);
    /* The largest step's block tables, rows of a power-of-two stride. Its
     * other arrays (kv_step.h) stay far below the 2^32 words the kernels
     * index: at most 65,536 sequences and 2^20 rows (engine.c) pack into
     * fewer than 2^24 words. */
    uint64_t tables = (uint64_t)c->max_step_seqs *
                      table_stride_for(0, config_max_blocks(c)) *
                      sizeof(uint32_t);
    if (tables > max_alloc)
        return pkv__fail(PKV_ERR_DEVICE_MEMORY,
                         "opencl: the block tables of %u sequences of up to "
                         "%u tokens need %llu bytes; the device '%s' allows "
                         "%llu per buffer: lower max_num_seqs or "
                         "max_model_len",
                         (unsigned)c->max_step_seqs,
                         (unsigned)c->max_seq_tokens,
                         (unsigned long long)tables, b->device_name,
                         (unsigned long long)max_alloc);
    b->layer_block_bytes = (uint32_t)lbb;
    b->arena_bytes = (size_t)arena;
    b->stage_floats = (uint32_t)(stage_bytes / 4);
    b->head_bytes = (uint32_t)(lbb / c->num_kv_heads);
    b->k_part_bytes = (uint32_t)PKV_LAYOUT_PART_BYTES(
        (size_t)c->kv_dtype, (size_t)c->key_quant, (size_t)c->block_size,
        (size_t)c->head_dim);
    return PKV_OK;
}

/* Every buffer the backend creates, counted (pkv__opencl_buffers_created). */
static cl_mem new_buffer(pkv__backend *b, cl_mem_flags flags, size_t bytes,
                         cl_int *err)
{
    b->buffers_created++;
    return clCreateBuffer(b->cl.context, flags, bytes, NULL, err);
}

/* A new buffer of `bytes` zeros. Written through one map of the whole
 * buffer rather than clEnqueueFillBuffer: the pages are committed now,
 * where a failure has a clear place, and a simulator that tracks
 * uninitialized memory (oclgrind) sees one host write of the whole
 * buffer; it forgets what it knew of a buffer at any host write that
 * covers only part of it, so pkv makes none (swap-in and stage-in go
 * through the transfer buffer and pkv_block_copy). */
static pkv_status new_zeroed(pkv__backend *b, size_t bytes,
                             cl_mem_flags flags, cl_mem *out, const char *what)
{
    cl_int err;
    char call[96];
    *out = new_buffer(b, flags, bytes, &err);
    if (err != CL_SUCCESS) {
        *out = NULL;
        snprintf(call, sizeof call, "clCreateBuffer(%s, %zu bytes)", what,
                 bytes);
        return pkv__cl_fail(err, call);
    }
    void *p = clEnqueueMapBuffer(b->queue, *out, CL_TRUE,
                                 CL_MAP_WRITE_INVALIDATE_REGION, 0, bytes, 0,
                                 NULL, NULL, &err);
    if (err == CL_SUCCESS) {
        memset(p, 0, bytes);
        err = clEnqueueUnmapMemObject(b->queue, *out, p, 0, NULL, NULL);
    }
    if (err != CL_SUCCESS) {
        snprintf(call, sizeof call, "zero %s (map, %zu bytes)", what, bytes);
        return pkv__cl_fail(err, call);
    }
    return PKV_OK;
}

pkv_status pkv__opencl_create(const pkv__backend_config *config,
                              const pkv__allocator *alloc,
                              const pkv__opencl_options *o,
                              pkv__backend **out)
{
    *out = NULL;
    pkv_status st = pkv__backend_config_check(config);
    if (st != PKV_OK)
        return st;
    pkv__backend *b = pkv__calloc(alloc, 1, sizeof *b);
    if (b == NULL)
        return pkv__fail(PKV_ERR_OUT_OF_MEMORY, "opencl backend: no memory");
    b->cfg = *config;
    b->alloc = *alloc;
    b->cl.alloc = *alloc;
    b->cl.log = o->log;
    b->cl.log_user = o->log_user;
    b->cl.log_level = o->log_level;
    int own = o->context == NULL && o->queue == NULL;
    b->cl.own_context = own;
    if (o->cache_dir != NULL) {
        snprintf(b->cache_dir, sizeof b->cache_dir, "%s", o->cache_dir);
        b->cl.cache_dir = b->cache_dir;
    }
    const char *dk = getenv("PKV_OPENCL_DECODE");
    b->decode_request = pkv__decode_parse(dk);
    const char *pf = getenv("PKV_OPENCL_PREFILL");
    if (b->decode_request < 0 || pkv__prefill_choose(pf, 0) < 0) {
        pkv_status bad =
            b->decode_request < 0
                ? pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                            "PKV_OPENCL_DECODE=%s: expected auto, cpu, gpu, "
                            "intel or off",
                            dk)
                : pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                            "PKV_OPENCL_PREFILL=%s: expected auto, rows or "
                            "tiles",
                            pf);
        pkv__free(alloc, b, 1, sizeof *b);
        return bad;
    }
    if (own) {
        const char *want = o->device;
        if (want == NULL)
            want = getenv("PKV_OPENCL_DEVICE");
        if (want != NULL && want[0] == '\0')
            want = NULL;
        st = pkv__cl_pick_device(want, &b->cl.device);
    } else {
        st = adopt_host_queue(b, o->context, o->queue);
    }
    if (st == PKV_OK) {
        char dname[PKV__CL_NAME_MAX], driver[PKV__CL_NAME_MAX];
        char pname[PKV__CL_NAME_MAX];
        cl_platform_id plat = NULL;
        clGetDeviceInfo(b->cl.device, CL_DEVICE_PLATFORM, sizeof plat, &plat,
                        NULL);
        pkv__cl_platform_name(plat, pname, sizeof pname);
        pkv__cl_device_string(b->cl.device, CL_DEVICE_NAME, dname,
                              sizeof dname);
        pkv__cl_device_string(b->cl.device, CL_DRIVER_VERSION, driver,
                              sizeof driver);
        snprintf(b->device_name, sizeof b->device_name, "%s / %s (driver %s)",
                 pname, dname, driver);
        cl_bool unified = CL_FALSE;
        clGetDeviceInfo(b->cl.device, CL_DEVICE_HOST_UNIFIED_MEMORY,
                        sizeof unified, &unified, NULL);
        b->unified = unified == CL_TRUE;
        clGetDeviceInfo(b->cl.device, CL_DEVICE_MAX_COMPUTE_UNITS,
                        sizeof b->compute_units, &b->compute_units, NULL);
        st = check_fit(b);
    }
    if (st == PKV_OK)
        st = pkv__tables_seen_init(&b->device_rows, alloc,
                                   config->max_step_seqs);
    if (st == PKV_OK)
        st = pkv__tables_seen_init(&b->checked, alloc, config->max_step_seqs);
    if (st == PKV_OK)
        st = pkv__cl_program(&b->cl, PKV__CL_GENERIC, "", &b->program);
    if (st == PKV_OK && own) {
        cl_int err;
        b->queue = clCreateCommandQueue(b->cl.context, b->cl.device, 0, &err);
        if (err != CL_SUCCESS) {
            b->queue = NULL;
            st = pkv__cl_fail(err, "clCreateCommandQueue");
        }
    }
    if (st == PKV_OK)
        st = make_kernel(b, b->program, "pkv_kv_append", &b->k_append,
                         &b->local_append, LOCAL_ROWS);
    if (st == PKV_OK)
        st = make_kernel(b, b->program, "pkv_kv_seal", &b->k_seal,
                         &b->local_seal, 1);
    if (st == PKV_OK)
        st = make_kernel(b, b->program, "pkv_paged_attention", &b->k_attend,
                         &b->local_attend, LOCAL_ROWS);
    if (st == PKV_OK)
        st = make_kernel(b, b->program, "pkv_block_copy", &b->k_copy,
                         &b->local_copy, 64);
    if (st == PKV_OK)
        st = prefill_prepare(b, pf);

    if (st == PKV_OK) {
        b->arenas = pkv__calloc(alloc, config->num_layers, sizeof *b->arenas);
        if (b->arenas == NULL)
            st = pkv__fail(PKV_ERR_OUT_OF_MEMORY, "opencl backend: no memory");
    }
    for (uint32_t l = 0; st == PKV_OK && l < config->num_layers; l++)
        st = new_zeroed(b, b->arena_bytes, CL_MEM_READ_WRITE, &b->arenas[l],
                        "arena");
    if (st == PKV_OK && config->num_stages > 0)
        st = new_zeroed(b, (size_t)b->stage_floats * 4 * config->num_stages,
                        CL_MEM_READ_WRITE,
                        &b->stages, "staging tails");
    if (st == PKV_OK) {
        /* Allocation is often lazy: make it happen now, where a failure
         * has a clear place. */
        cl_int err = clFinish(b->queue);
        if (err != CL_SUCCESS)
            st = pkv__cl_fail(err, "clFinish(zero the arenas)");
    }
    if (st != PKV_OK) {
        char why[PKV__ERROR_MAX];
        snprintf(why, sizeof why, "%s", pkv_last_error());
        ocl_destroy(b);
        return pkv__fail(st, "%s", why);
    }
    pkv__cl_log(&b->cl, PKV_LOG_DEBUG,
                "opencl: %s%s, %u layer arenas of %zu bytes",
                b->device_name, b->unified ? ", unified memory" : "",
                (unsigned)config->num_layers, b->arena_bytes);
    *out = b;
    return PKV_OK;
}

pkv_status pkv__opencl_device_is_gpu(const pkv__opencl_options *o,
                                     int *is_gpu)
{
    *is_gpu = 0;
    cl_device_id device = NULL;
    pkv_status st = PKV_OK;
    if (o->queue != NULL) {
        cl_int err = clGetCommandQueueInfo(o->queue, CL_QUEUE_DEVICE,
                                           sizeof device, &device, NULL);
        if (err != CL_SUCCESS)
            return pkv__cl_fail(err, "clGetCommandQueueInfo(host queue)");
    } else {
        const char *want = o->device;
        if (want == NULL)
            want = getenv("PKV_OPENCL_DEVICE");
        if (want != NULL && want[0] == '\0')
            want = NULL;
        st = pkv__cl_pick_device(want, &device);
        if (st != PKV_OK)
            return st;
    }
    cl_device_type type = 0;
    cl_int err = clGetDeviceInfo(device, CL_DEVICE_TYPE, sizeof type, &type,
                                 NULL);
    if (err != CL_SUCCESS)
        return pkv__cl_fail(err, "clGetDeviceInfo(CL_DEVICE_TYPE)");
    *is_gpu = (type & CL_DEVICE_TYPE_GPU) != 0;
    return PKV_OK;
}

int pkv__opencl_available(void)
{
    return pkv__cl_any_device();
}

static pkv_status ocl_create(const pkv__backend_config *config,
                             const pkv__allocator *alloc, pkv__backend **out)
{
    pkv__opencl_options o;
    memset(&o, 0, sizeof o);
    return pkv__opencl_create(config, alloc, &o, out);
}

const pkv__backend_ops *pkv__opencl_ops(pkv__backend *b)
{
    b->ops = pkv__backend_opencl;
    snprintf(b->ops_name, sizeof b->ops_name, "opencl (%s)", b->device_name);
    b->ops.name = b->ops_name;
    return &b->ops;
}

int pkv__opencl_is(const pkv__backend_ops *ops)
{
    return ops != NULL && ops->begin_step == pkv__backend_opencl.begin_step;
}

const char *pkv__opencl_decode_variant(const pkv__backend *b)
{
    return b->decode_variant[0] != '\0' ? b->decode_variant : NULL;
}

uint64_t pkv__opencl_table_words(const pkv__backend *b)
{
    return b->table_words;
}

uint64_t pkv__opencl_finishes(const pkv__backend *b)
{
    return b->finishes;
}

uint64_t pkv__opencl_buffers_created(const pkv__backend *b)
{
    return b->buffers_created;
}

void pkv__opencl_handles(const pkv__backend *b, cl_context *context,
                         cl_command_queue *queue)
{
    *context = b->cl.context;
    *queue = b->queue;
}

/* ------------------------------------------------------------- the step */

/* Make *mem hold at least `bytes` (contents not kept; a new buffer starts
 * zeroed, see new_zeroed). */
static pkv_status grow_buffer(pkv__backend *b, cl_mem *mem, size_t *cap,
                              size_t bytes, cl_mem_flags flags,
                              const char *what)
{
    if (bytes <= *cap && *mem != NULL)
        return PKV_OK;
    size_t want = *cap ? *cap : 256;
    while (want < bytes)
        want *= 2;
    cl_mem m;
    pkv_status st = new_zeroed(b, want, flags, &m, what);
    if (st != PKV_OK) {
        if (m != NULL)
            clReleaseMemObject(m);
        return st;
    }
    if (*mem != NULL)
        clReleaseMemObject(*mem);
    *mem = m;
    *cap = want;
    return PKV_OK;
}

static pkv_status grow_step(pkv__backend *b, size_t words)
{
    if (words > b->step_host_cap) {
        size_t cap = b->step_host_cap ? b->step_host_cap : 256;
        while (cap < words)
            cap *= 2;
        uint32_t *grown = pkv__calloc(&b->alloc, cap, sizeof *grown);
        if (grown == NULL)
            return pkv__fail(PKV_ERR_OUT_OF_MEMORY, "step arrays: no memory");
        pkv__free(&b->alloc, b->step_host, b->step_host_cap, sizeof *grown);
        b->step_host = grown;
        b->step_host_cap = cap;
    }
    if (words > b->step_mem_cap) {
        size_t cap = b->step_host_cap;
        cl_int err;
        cl_mem m = new_buffer(b, CL_MEM_READ_ONLY, cap * sizeof(uint32_t),
                              &err);
        if (err != CL_SUCCESS)
            return pkv__cl_fail(err, "clCreateBuffer(step arrays)");
        if (b->step_mem != NULL)
            clReleaseMemObject(b->step_mem);
        b->step_mem = m;
        b->step_mem_cap = cap;
    }
    return PKV_OK;
}

/* The packed step's words (kv_step.h): the header, then each array;
 * off and lens (both or neither) receive where each array starts and its
 * length. */
static size_t step_layout(const pkv__step *s, uint32_t seals, uint32_t tiles,
                          size_t *off, size_t *lens)
{
    size_t n = s->num_seqs, t = s->num_tokens;
    size_t len[PKV_STEP_HEADER] = {
        n + 1, n, n, t, t, 2 * t, (size_t)seals * PKV_SEAL_WORDS, tiles};
    size_t at = PKV_STEP_HEADER;
    for (int i = 0; i < PKV_STEP_HEADER; i++) {
        if (off != NULL) {
            off[i] = at;
            lens[i] = len[i];
        }
        at += len[i];
    }
    return at;
}

/* The step's block tables into b->tables, as rows of table_stride
 * entries: only the runs of rows whose table version device_rows does not
 * know (in a decode step, the rows of the sequences that crossed into a
 * new block; a step that admits a prompt adds its row). Called after the
 * previous step's uploads finished (upload_step waits for them), so the
 * mirror they read from may change. */
static pkv_status upload_tables(pkv__backend *b)
{
    const pkv__step *s = &b->step;
    uint32_t n = s->num_seqs, maxb = s->max_blocks_per_seq;
    uint32_t bs = b->cfg.block_size;
    uint32_t stride = table_stride_for(b->table_stride, maxb);
    size_t words = (size_t)(n > 0 ? n : 1) * stride;
    cl_mem before = b->tables;
    pkv_status st = grow_buffer(b, &b->tables, &b->tables_cap, words * 4,
                                CL_MEM_READ_ONLY, "block tables");
    if (st != PKV_OK)
        return st;
    if (b->tables != before || stride != b->table_stride)
        pkv__tables_seen_forget(&b->device_rows); /* it holds none */
    size_t cap = b->tables_cap / 4;
    if (b->table_mirror_cap < cap) {
        uint32_t *m = pkv__calloc(&b->alloc, cap, sizeof *m);
        if (m == NULL)
            return pkv__fail(PKV_ERR_OUT_OF_MEMORY, "block tables");
        pkv__free(&b->alloc, b->table_mirror, b->table_mirror_cap,
                  sizeof *m);
        b->table_mirror = m;
        b->table_mirror_cap = cap;
    }
    b->table_stride = stride;
    for (uint32_t i = 0; i < n;) {
        /* The next run of rows [i, j) that must be written. A kernel reads
         * a row's entries below its sequence's block count only, so what
         * follows them in the mirror may be stale. */
        uint32_t j = i;
        for (; j < n; j++) {
            uint32_t nb = (s->context_lens[j] + bs - 1) / bs;
            if (pkv__tables_seen_knows(&b->device_rows, s, j, nb))
                break;
            memcpy(b->table_mirror + (size_t)j * stride, s->block_tables[j],
                   nb * sizeof(uint32_t));
        }
        if (j > i) {
            size_t at = (size_t)i * stride, count = (size_t)(j - i) * stride;
            cl_int err = clEnqueueWriteBuffer(
                b->queue, b->tables, CL_FALSE, at * 4, count * 4,
                b->table_mirror + at, 0, NULL, NULL);
            if (err != CL_SUCCESS) {
                pkv__tables_seen_forget(&b->device_rows);
                return pkv__cl_fail(err, "clEnqueueWriteBuffer(tables)");
            }
            b->table_words += count;
            for (uint32_t r = i; r < j; r++)
                pkv__tables_seen_note(&b->device_rows, s, r,
                                      (s->context_lens[r] + bs - 1) / bs);
        }
        i = j + (j < n);
    }
    return PKV_OK;
}

/* begin_step only takes the step: everything that can fail on the device
 * (growing the step buffers, the upload) waits for the step's first layer
 * call, which a host may repeat after a failure. So the engine's plan,
 * once made, never has to be undone. */
static pkv_status ocl_begin_step(pkv__backend *b, const pkv__step *s)
{
    pkv_status st = pkv__backend_step_check(&b->cfg, s, &b->checked);
    if (st != PKV_OK)
        return st;
    uint32_t n = s->num_seqs, bs = b->cfg.block_size;
    int u8 = b->cfg.kv_dtype == PKV_KV_U8;
    uint32_t seals = 0;
    for (uint32_t i = 0; u8 && i < n; i++) {
        uint32_t ctx = s->context_lens[i];
        uint32_t first = ctx - (s->query_start[i + 1] - s->query_start[i]);
        /* Blocks whose last token is one of this step's rows. */
        seals += ctx / bs - first / bs;
    }
    /* The tiled kernel's tiles: each sequence's rows, tile_rows at a time. */
    uint32_t tiles = 0;
    for (uint32_t i = 0; b->tile_rows > 0 && i < n; i++) {
        uint32_t rows = s->query_start[i + 1] - s->query_start[i];
        tiles += (rows + b->tile_rows - 1) / b->tile_rows;
    }
    /* Only a step beyond the bounds create checked can be refused here. */
    size_t words = step_layout(s, seals, tiles, NULL, NULL);
    if (words > UINT32_MAX)
        return pkv__fail(PKV_ERR_UNSUPPORTED, "step of %zu words", words);
    b->step = *s;
    b->num_seals = seals;
    b->num_tiles = tiles;
    b->have_step = 1;
    b->uploaded = 0;
    return PKV_OK;
}

static void decode_prepare(pkv__backend *b);

/* Pack the step's arrays (kv_step.h) and upload them, once per step, from
 * its first layer call. On failure nothing is marked done: the next layer
 * call (the host's repeat) starts over. */
static pkv_status upload_step(pkv__backend *b)
{
    const pkv__step *s = &b->step;
    /* The previous upload reads step_host: let it finish first. */
    if (b->upload != NULL) {
        cl_int err = clWaitForEvents(1, &b->upload);
        clReleaseEvent(b->upload);
        b->upload = NULL;
        if (err != CL_SUCCESS)
            return pkv__cl_fail(err, "clWaitForEvents(step upload)");
    }
    uint32_t n = s->num_seqs, t = s->num_tokens, bs = b->cfg.block_size;
    int u8 = b->cfg.kv_dtype == PKV_KV_U8;
    size_t off[PKV_STEP_HEADER], lens[PKV_STEP_HEADER];
    size_t at = step_layout(s, b->num_seals, b->num_tiles, off, lens);
    pkv_status st = grow_step(b, at);
    if (st != PKV_OK)
        return st;
    uint32_t *w = b->step_host;
    for (int i = 0; i < PKV_STEP_HEADER; i++)
        w[i] = (uint32_t)off[i];
    if (n > 0) {
        memcpy(w + off[PKV_STEP_QUERY_START], s->query_start,
               lens[PKV_STEP_QUERY_START] * 4);
        memcpy(w + off[PKV_STEP_CONTEXT_LENS], s->context_lens, (size_t)n * 4);
        if (u8)
            memcpy(w + off[PKV_STEP_STAGES], s->stages, (size_t)n * 4);
        else
            memset(w + off[PKV_STEP_STAGES], 0, (size_t)n * 4);
    }
    uint32_t *seal = w + off[PKV_STEP_SEALS];
    uint32_t *tile = w + off[PKV_STEP_TILES];
    for (uint32_t i = 0; i < n; i++) {
        uint32_t q0 = s->query_start[i], q1 = s->query_start[i + 1];
        uint32_t ctx = s->context_lens[i], first = ctx - (q1 - q0);
        const uint32_t *table = s->block_tables[i];
        for (uint32_t r = q0; b->tile_rows > 0 && r < q1; r += b->tile_rows)
            *tile++ = r;
        for (uint32_t r = q0; r < q1; r++) {
            uint32_t tok = first + (r - q0);
            w[off[PKV_STEP_ROW_SEQ] + r] = i;
            /* The last block's rows go to the tail even when this step
             * seals it: the step's rows read that block from there. */
            int in_last = tok / bs == (ctx - 1) / bs;
            w[off[PKV_STEP_ROW_TAIL] + r] =
                u8 && in_last ? s->stages[i] : PKV_STEP_NO_TAIL;
            w[off[PKV_STEP_SLOTS] + 2 * (size_t)r] = (uint32_t)s->slots[r];
            w[off[PKV_STEP_SLOTS] + 2 * (size_t)r + 1] =
                (uint32_t)(s->slots[r] >> 32);
        }
        for (uint32_t j = first / bs; u8 && j < ctx / bs; j++) {
            uint32_t b0 = j * bs;
            uint32_t in_tail = first > b0 ? first - b0 : 0;
            seal[PKV_SEAL_BLOCK] = table[j];
            seal[PKV_SEAL_STAGE] = s->stages[i];
            seal[PKV_SEAL_IN_TAIL] = in_tail;
            seal[PKV_SEAL_FIRST_ROW] = q0 + (b0 + in_tail - first);
            seal[PKV_SEAL_WINDOW] = s->windows != NULL
                                        ? s->windows[q0 + (b0 + bs - 1 - first)]
                                        : PKV_STEP_NO_TAIL;
            seal += PKV_SEAL_WORDS;
        }
    }
    int decode = n > 0 && t == n && b->decode_state >= 0;
    uint32_t longest = 0;
    for (uint32_t i = 0; i < n; i++) {
        decode &= s->query_start[i + 1] - s->query_start[i] == 1;
        longest = s->context_lens[i] > longest ? s->context_lens[i] : longest;
    }
    /* The decode kernels, built on the first decode step; where they do
     * not build, the generic kernel takes the step. */
    if (decode)
        decode_prepare(b);
    decode &= b->decode_state == 1;
    /* The decode kernels take these arrays as separate buffers. The main
     * upload below comes last on the in-order queue: its event covers
     * these writes too. */
    const int which[2] = {PKV_STEP_CONTEXT_LENS, PKV_STEP_STAGES};
    cl_mem *mems[2] = {&b->dec_lens, &b->dec_stages};
    size_t *caps[2] = {&b->dec_cap[0], &b->dec_cap[1]};
    for (int i = 0; decode && st == PKV_OK && i < 2; i++) {
        st = grow_buffer(b, mems[i], caps[i], lens[which[i]] * 4,
                         CL_MEM_READ_ONLY, "decode step arrays");
        cl_int err = st != PKV_OK ? CL_SUCCESS
                                  : clEnqueueWriteBuffer(
                                        b->queue, *mems[i], CL_FALSE, 0,
                                        lens[which[i]] * 4, w + off[which[i]],
                                        0, NULL, NULL);
        if (err != CL_SUCCESS)
            st = pkv__cl_fail(err, "clEnqueueWriteBuffer(decode arrays)");
    }
    if (st == PKV_OK)
        st = upload_tables(b);
    cl_int err = st != PKV_OK ? CL_SUCCESS
                              : clEnqueueWriteBuffer(b->queue, b->step_mem,
                                                     CL_FALSE, 0, at * 4, w,
                                                     0, NULL, &b->upload);
    if (err != CL_SUCCESS) {
        b->upload = NULL;
        st = pkv__cl_fail(err, "clEnqueueWriteBuffer(step arrays)");
    }
    if (st != PKV_OK) {
        /* No event covers the writes enqueued above, which read step_host
         * and the table mirror: let them finish before a repeat changes
         * those. */
        clFinish(b->queue);
        return st;
    }
    b->step_is_decode = decode;
    b->max_context = longest;
    b->uploaded = 1;
    return PKV_OK;
}

/* ---------------------------------------------------------- launching */

typedef struct karg {
    size_t size;
    const void *value;
} karg;
#define KA(x) {sizeof(x), &(x)}

static pkv_status launch(pkv__backend *b, cl_kernel k, const char *name,
                         const karg *args, unsigned n, size_t g0, size_t g1,
                         size_t local)
{
    char call[96];
    for (unsigned i = 0; i < n; i++) {
        cl_int err = clSetKernelArg(k, i, args[i].size, args[i].value);
        if (err != CL_SUCCESS) {
            snprintf(call, sizeof call, "clSetKernelArg(%s, %u)", name, i);
            return pkv__cl_fail(err, call);
        }
    }
    if (g0 == 0 || g1 == 0)
        return PKV_OK;
    size_t global[2] = {(g0 + local - 1) / local * local, g1};
    size_t lws[2] = {local, 1};
    cl_int err =
        clEnqueueNDRangeKernel(b->queue, k, 2, NULL, global, lws, 0, NULL,
                               NULL);
    if (err != CL_SUCCESS) {
        snprintf(call, sizeof call, "clEnqueueNDRangeKernel(%s)", name);
        return pkv__cl_fail(err, call);
    }
    return PKV_OK;
}

/* A tensor reference as the kernels take it. */
typedef struct kt {
    cl_mem mem;
    cl_ulong off; /* elements */
    cl_uint f16;
} kt;

static pkv_status enqueue_append(pkv__backend *b, uint32_t layer, kt k, kt v)
{
    const pkv__backend_config *c = &b->cfg;
    cl_uint hkv = c->num_kv_heads, d = c->head_dim, bs = c->block_size;
    cl_uint dtype = (cl_uint)c->kv_dtype, lyr = layer;
    cl_uint ntok = b->step.num_tokens, nseal = b->num_seals;
    cl_mem arena = b->arenas[layer];
    for (cl_uint kv = 0; kv < 2 && c->kv_dtype == PKV_KV_U8 && nseal; kv++) {
        kt src = kv ? v : k;
        cl_uint group = (cl_uint)(kv ? c->value_quant : c->key_quant);
        karg a[] = {KA(arena), KA(b->stages), KA(src.mem), KA(src.off),
                    KA(src.f16), KA(b->step_mem), KA(nseal), KA(kv),
                    KA(group), KA(hkv), KA(d), KA(bs), KA(b->head_bytes),
                    KA(b->k_part_bytes), KA(b->layer_block_bytes),
                    KA(b->stage_floats), KA(lyr)};
        pkv_status st = launch(b, b->k_seal, "pkv_kv_seal", a,
                               sizeof a / sizeof a[0], nseal, hkv,
                               b->local_seal);
        if (st != PKV_OK)
            return st;
    }
    for (cl_uint kv = 0; kv < 2; kv++) {
        kt src = kv ? v : k;
        karg a[] = {KA(arena), KA(b->stages), KA(src.mem), KA(src.off),
                    KA(src.f16), KA(b->step_mem), KA(ntok), KA(kv),
                    KA(dtype), KA(hkv), KA(d), KA(bs), KA(b->head_bytes),
                    KA(b->k_part_bytes), KA(b->layer_block_bytes),
                    KA(b->stage_floats), KA(lyr)};
        pkv_status st = launch(b, b->k_append, "pkv_kv_append", a,
                               sizeof a / sizeof a[0], ntok, hkv,
                               b->local_append);
        if (st != PKV_OK)
            return st;
    }
    return PKV_OK;
}

static pkv_status enqueue_attend(pkv__backend *b, uint32_t layer, kt q,
                                 kt out, float scale, uint32_t window)
{
    const pkv__backend_config *c = &b->cfg;
    cl_uint hq = c->num_q_heads, hkv = c->num_kv_heads, d = c->head_dim;
    cl_uint bs = c->block_size, dtype = (cl_uint)c->kv_dtype;
    cl_uint kq = (cl_uint)c->key_quant, vq = (cl_uint)c->value_quant;
    cl_uint flags = q.f16 | out.f16 << 1, lyr = layer, win = window;
    cl_uint ntok = b->step.num_tokens, maxb = b->table_stride;
    cl_float sc = scale == 0.0f ? 1.0f / sqrtf((float)d) : scale;
    if (b->tile_rows > 0 && ntok > 0) {
        /* The tiled kernel: a work-group per (tile, kv head). */
        cl_uint rows = b->tile_rows, chunk = b->tile_chunk;
        karg a[] = {KA(b->arenas[layer]), KA(b->stages), KA(q.mem),
                    KA(q.off), KA(out.mem), KA(out.off), KA(flags),
                    KA(b->step_mem), KA(b->tables), KA(rows), KA(chunk),
                    KA(maxb), KA(hq), KA(hkv), KA(d), KA(bs), KA(dtype),
                    KA(kq), KA(vq), KA(b->head_bytes), KA(b->k_part_bytes),
                    KA(b->layer_block_bytes), KA(b->stage_floats), KA(lyr),
                    KA(sc), KA(win), {(size_t)2 * chunk * d * 4, NULL}};
        size_t lanes = (size_t)rows * (hq / hkv);
        return launch(b, b->k_tiled, "pkv_paged_attention_tiled", a,
                      sizeof a / sizeof a[0], b->num_tiles * lanes, hkv,
                      lanes);
    }
    karg a[] = {KA(b->arenas[layer]), KA(b->stages), KA(q.mem), KA(q.off),
                KA(out.mem), KA(out.off), KA(flags), KA(b->step_mem),
                KA(b->tables), KA(ntok), KA(maxb), KA(hq), KA(hkv), KA(d),
                KA(bs), KA(dtype), KA(kq), KA(vq), KA(b->head_bytes),
                KA(b->k_part_bytes), KA(b->layer_block_bytes),
                KA(b->stage_floats), KA(lyr), KA(sc), KA(win)};
    return launch(b, b->k_attend, "pkv_paged_attention", a,
                  sizeof a / sizeof a[0], ntok, hq, b->local_attend);
}

/* The -D options and program of the decode variant `kind` (not OFF) for
 * this geometry, into opts; sets decode_lanes and decode_partition. */
static pkv_status decode_options(pkv__backend *b, pkv__decode_kind kind,
                                 char *opts, size_t size, int *program)
{
    const pkv__backend_config *c = &b->cfg;
    int u8 = c->kv_dtype == PKV_KV_U8;
    uint32_t group = c->num_q_heads / c->num_kv_heads;
    cl_ulong local_mem = 0;
    size_t max_group = 0;
    clGetDeviceInfo(b->cl.device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local_mem,
                    &local_mem, NULL);
    clGetDeviceInfo(b->cl.device, CL_DEVICE_MAX_WORK_GROUP_SIZE,
                    sizeof max_group, &max_group, NULL);
    pkv__decode_setup su;
    int u8_channel_values = u8 && c->value_quant == PKV_QUANT_PER_CHANNEL;
    if (pkv__decode_setup_make(kind, c->head_dim, group, c->block_size,
                               u8_channel_values, local_mem, max_group,
                               &su) != 0)
        return pkv__fail(PKV_ERR_UNSUPPORTED,
                         "the variant does not fit the device: %llu bytes of "
                         "local memory, work-groups of %zu",
                         (unsigned long long)local_mem, max_group);
    b->decode_lanes = su.lanes;
    b->decode_partition = su.partition;
    *program = kind == PKV__DECODE_GPU     ? PKV__CL_DECODE_GPU
               : kind == PKV__DECODE_INTEL ? PKV__CL_DECODE_INTEL
                                           : PKV__CL_DECODE;
    snprintf(opts, size,
             " -DPKV_HEAD_DIM=%u -DPKV_BLOCK_SIZE=%u -DPKV_GROUP=%u "
             "-DPKV_KV_DTYPE=%d -DPKV_KEY_QUANT=%d -DPKV_VALUE_QUANT=%d%s",
             (unsigned)c->head_dim, (unsigned)c->block_size, (unsigned)group,
             (int)c->kv_dtype,
             u8 ? (int)c->key_quant : PKV_LAYOUT_PER_CHANNEL,
             u8 ? (int)c->value_quant : PKV_LAYOUT_PER_CHANNEL, su.options);
    return PKV_OK;
}

/* Build the decode program for this geometry on its first use. A build
 * failure is not an error: the generic kernel serves decode steps too. */
static void decode_prepare(pkv__backend *b)
{
    if (b->decode_state != 0)
        return;
    const pkv__backend_config *c = &b->cfg;
    char extensions[4096], why[256], opts[512];
    pkv__cl_device_string(b->cl.device, CL_DEVICE_EXTENSIONS, extensions,
                          sizeof extensions);
    cl_device_type type = 0;
    clGetDeviceInfo(b->cl.device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    pkv__decode_kind kind = pkv__decode_choose(
        b->decode_request, (type & CL_DEVICE_TYPE_CPU) != 0, extensions,
        c->head_dim, why, sizeof why);
    pkv_status st = PKV_OK;
    if (kind == PKV__DECODE_OFF) {
        snprintf(b->decode_variant, sizeof b->decode_variant,
                 "off: the generic paged-attention kernel (%s)", why);
        pkv__cl_log(&b->cl,
                    b->decode_request == PKV__DECODE_OFF ? PKV_LOG_INFO
                                                         : PKV_LOG_WARN,
                    "opencl: decode kernel %s", b->decode_variant);
        b->decode_state = -1;
        return;
    }
    int program = PKV__CL_DECODE;
    st = decode_options(b, kind, opts, sizeof opts, &program);
    size_t local = 0;
    if (st == PKV_OK)
        st = pkv__cl_program(&b->cl, program, opts, &b->decode_program);
    size_t want = kind == PKV__DECODE_CPU ? c->num_kv_heads : b->decode_lanes;
    if (st == PKV_OK)
        st = make_kernel(b, b->decode_program, "pkv_decode_partial",
                         &b->k_partial, &local, want);
    /* The CPU variant puts a sequence's kv heads in one work-group, the
     * others a fixed number of lanes per (partition, head). */
    if (st == PKV_OK && local < want)
        st = pkv__fail(PKV_ERR_UNSUPPORTED,
                       "the kernel's work-groups hold %zu items, %zu needed",
                       local, want);
    if (st == PKV_OK)
        st = make_kernel(b, b->decode_program, "pkv_decode_reduce",
                         &b->k_reduce, &local, 1);
    static const char *const name[] = {"off", "cpu", "gpu", "intel"};
    static const char *const what[] = {
        "",
        "one work-item per (partition, kv head), a sequence's kv heads in "
        "one work-group",
        "a work-group per (partition, kv head), lanes over channels and "
        "tokens, local-memory reductions",
        "a work-group of 16-lane subgroups per (partition, kv head): a lane "
        "per token for the scores, lanes over channels for the values"};
    if (st == PKV_OK) {
        b->decode_state = 1;
        snprintf(b->decode_variant, sizeof b->decode_variant, "%s: %s (%s)",
                 name[kind], what[kind], why);
        pkv__cl_log(&b->cl, PKV_LOG_INFO, "opencl: decode kernel %s;%s",
                    b->decode_variant, opts);
        return;
    }
    snprintf(b->decode_variant, sizeof b->decode_variant,
             "off: the generic paged-attention kernel (the %s decode "
             "variant is unavailable: %s)",
             name[kind], pkv_last_error());
    pkv__cl_log(&b->cl, PKV_LOG_WARN, "opencl: decode kernel %s",
                b->decode_variant);
    b->decode_state = -1;
}

/* The split-K decode of an all-decode step: the variant's partial kernel
 * over (partition, kv head, sequence), then the reduction when there is
 * more than one partition. */
static pkv_status enqueue_decode(pkv__backend *b, uint32_t layer, kt q,
                                 kt out, float scale, uint32_t window)
{
    const pkv__backend_config *c = &b->cfg;
    cl_uint n = b->step.num_seqs, hq = c->num_q_heads, hkv = c->num_kv_heads;
    pkv__decode_plan plan = pkv__decode_plan_make(
        n, hkv, b->max_context, window, c->block_size, b->compute_units,
        b->decode_partition);
    cl_uint parts = plan.num_partitions, psize = plan.partition_size;
    if (parts > 1) {
        size_t rows = (size_t)n * hq * parts;
        pkv_status st = grow_buffer(b, &b->part_acc, &b->part_cap[0],
                                    rows * c->head_dim * 4, CL_MEM_READ_WRITE,
                                    "decode partitions");
        if (st == PKV_OK)
            st = grow_buffer(b, &b->part_ml, &b->part_cap[1], rows * 2 * 4,
                             CL_MEM_READ_WRITE, "decode partitions");
        if (st != PKV_OK)
            return st;
    }
    cl_uint layer_off = layer * hkv * 2u * c->block_size * c->head_dim;
    cl_uint maxb = b->table_stride, win = window;
    cl_uint flags = q.f16 | out.f16 << 1;
    cl_float sc = scale == 0.0f ? 1.0f / sqrtf((float)c->head_dim) : scale;
    cl_mem acc = parts > 1 ? b->part_acc : NULL;
    cl_mem ml = parts > 1 ? b->part_ml : NULL;
    karg a[] = {KA(b->arenas[layer]), KA(b->stages), KA(b->stage_floats),
                KA(layer_off), KA(b->dec_stages), KA(q.mem), KA(q.off),
                KA(b->dec_lens), KA(b->tables), KA(maxb), KA(hkv), KA(sc),
                KA(win), KA(psize), KA(out.mem), KA(out.off), KA(flags),
                KA(acc), KA(ml)};
    pkv_status st = launch(b, b->k_partial, "pkv_decode_partial", a,
                           sizeof a / sizeof a[0], 0, 0, 1);
    if (st != PKV_OK)
        return st;
    size_t lanes = b->decode_lanes;
    size_t global[3] = {parts * lanes, hkv, n};
    size_t local[3] = {lanes, lanes == 1 ? hkv : 1, 1};
    cl_int err = clEnqueueNDRangeKernel(b->queue, b->k_partial, 3, NULL,
                                        global, local, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return pkv__cl_fail(err, "clEnqueueNDRangeKernel(pkv_decode_partial)");
    if (parts == 1)
        return PKV_OK;
    karg r[] = {KA(acc), KA(ml), KA(parts), KA(out.mem), KA(out.off),
                KA(flags)};
    st = launch(b, b->k_reduce, "pkv_decode_reduce", r,
                sizeof r / sizeof r[0], 0, 0, 1);
    if (st != PKV_OK)
        return st;
    size_t rglobal[3] = {c->head_dim / 4, hq, n};
    err = clEnqueueNDRangeKernel(b->queue, b->k_reduce, 3, NULL, rglobal,
                                 NULL, 0, NULL, NULL);
    return err == CL_SUCCESS
               ? PKV_OK
               : pkv__cl_fail(err, "clEnqueueNDRangeKernel(pkv_decode_reduce)");
}

/* Attention of one layer: the decode kernels when the step is all
 * decodes (and they built), else the generic kernel. */
static pkv_status enqueue_attention(pkv__backend *b, uint32_t layer, kt q,
                                    kt out, float scale, uint32_t window)
{
    if (b->step_is_decode) /* upload_step built the decode kernels */
        return enqueue_decode(b, layer, q, out, scale, window);
    return enqueue_attend(b, layer, q, out, scale, window);
}

/* The shared check, with the step the backend holds (none before
 * begin_step). */
static pkv_status layer_check(const pkv__backend *b, uint32_t layer,
                              const void *in, const void *out)
{
    return pkv__backend_layer_check(&b->cfg, b->have_step ? &b->step : NULL,
                                    layer, in, out);
}

/* Every layer call with rows starts here: the step's arrays on the device. */
static pkv_status need_upload(pkv__backend *b)
{
    return b->uploaded ? PKV_OK : upload_step(b);
}

/* A host tensor for the kernels: the backend's buffer `slot`, grown as
 * needed, with p's bytes written to it (an input) or to be read from it
 * after the kernels ran (an output). */
static pkv_status host_in(pkv__backend *b, int slot, const void *p,
                          size_t bytes, int output, cl_mem *out)
{
    cl_int err;
    if (bytes > b->tensor_cap[slot]) {
        cl_mem m = new_buffer(b, CL_MEM_READ_WRITE, bytes, &err);
        if (err != CL_SUCCESS)
            return pkv__cl_fail(err, "clCreateBuffer(tensor)");
        if (b->tensor_mem[slot] != NULL)
            clReleaseMemObject(b->tensor_mem[slot]);
        b->tensor_mem[slot] = m;
        b->tensor_cap[slot] = bytes;
    }
    *out = b->tensor_mem[slot];
    if (!output) {
        err = clEnqueueWriteBuffer(b->queue, *out, CL_FALSE, 0, bytes, p, 0,
                                   NULL, NULL);
        if (err != CL_SUCCESS)
            return pkv__cl_fail(err, "clEnqueueWriteBuffer(tensor)");
    }
    return PKV_OK;
}

static pkv_status finish(pkv__backend *b, const char *what)
{
    b->finishes++;
    cl_int err = clFinish(b->queue);
    if (err != CL_SUCCESS) {
        char call[96];
        snprintf(call, sizeof call, "clFinish(%s)", what);
        return pkv__cl_fail(err, call);
    }
    return PKV_OK;
}

/* One layer's host-tensor calls: append (k and v), attention (q and
 * out), or both, in that order, with one wait for the device at the end:
 * the tensors are borrowed for the call only. */
enum { DO_APPEND = 1, DO_ATTEND = 2 };
static pkv_status host_layer(pkv__backend *b, int what, uint32_t layer,
                             const float *k, const float *v, const float *q,
                             float *out, float scale, uint32_t window)
{
    pkv_status st = PKV_OK;
    if (what & DO_APPEND)
        st = layer_check(b, layer, k, v);
    if (st == PKV_OK && (what & DO_ATTEND)) {
        st = layer_check(b, layer, q, out);
        if (st == PKV_OK && (!(scale >= 0.0f) || isinf(scale)))
            st = pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                           "attend: scale must be finite and >= 0");
    }
    if (st != PKV_OK || b->step.num_tokens == 0)
        return st;
    st = need_upload(b);
    if (st != PKV_OK)
        return st;
    const pkv__backend_config *c = &b->cfg;
    size_t kv_bytes = (size_t)b->step.num_tokens * c->num_kv_heads *
                      c->head_dim * sizeof(float);
    size_t q_bytes = (size_t)b->step.num_tokens * c->num_q_heads *
                     c->head_dim * sizeof(float);
    cl_mem m[4] = {NULL, NULL, NULL, NULL}; /* k, v, q, out */
    if (what & DO_APPEND) {
        st = host_in(b, 0, k, kv_bytes, 0, &m[0]);
        if (st == PKV_OK)
            st = host_in(b, 1, v, kv_bytes, 0, &m[1]);
        if (st == PKV_OK) {
            kt kk = {m[0], 0, 0}, vv = {m[1], 0, 0};
            st = enqueue_append(b, layer, kk, vv);
        }
    }
    int attend = what & DO_ATTEND;
    if (st == PKV_OK && attend) {
        st = host_in(b, 2, q, q_bytes, 0, &m[2]);
        if (st == PKV_OK)
            st = host_in(b, 3, out, q_bytes, 1, &m[3]);
        if (st == PKV_OK) {
            kt qq = {m[2], 0, 0}, oo = {m[3], 0, 0};
            st = enqueue_attention(b, layer, qq, oo, scale, window);
        }
    }
    if (st == PKV_OK && attend) {
        cl_int err = clEnqueueReadBuffer(b->queue, m[3], CL_TRUE, 0,
                                         q_bytes, out, 0, NULL, NULL);
        if (err != CL_SUCCESS)
            st = pkv__cl_fail(err, "clEnqueueReadBuffer(out)");
    }
    pkv_status fin = finish(b, attend ? "attend" : "append");
    return st != PKV_OK ? st : fin;
}

static pkv_status ocl_append(pkv__backend *b, uint32_t layer, const float *k,
                             const float *v)
{
    return host_layer(b, DO_APPEND, layer, k, v, NULL, NULL, 0.0f, 0);
}

static pkv_status ocl_attend(pkv__backend *b, uint32_t layer, const float *q,
                             float *out, float scale, uint32_t window)
{
    return host_layer(b, DO_ATTEND, layer, NULL, NULL, q, out, scale,
                      window);
}

static pkv_status ocl_append_attend(pkv__backend *b, uint32_t layer,
                                    const float *k, const float *v,
                                    const float *q, float *out, float scale,
                                    uint32_t window)
{
    return host_layer(b, DO_APPEND | DO_ATTEND, layer, k, v, q, out, scale,
                      window);
}

/* ------------------------------------------------------ device tensors */

static pkv_status device_tensor_check(const pkv__backend *b, const char *name,
                                      const pkv__device_tensor *t,
                                      uint32_t heads, kt *out)
{
    if (t->mem == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "%s: cl_mem is NULL",
                         name);
    cl_context ctx = NULL;
    size_t size = 0;
    char call[96];
    snprintf(call, sizeof call, "clGetMemObjectInfo(%s)", name);
    cl_int err =
        clGetMemObjectInfo(t->mem, CL_MEM_CONTEXT, sizeof ctx, &ctx, NULL);
    if (err == CL_SUCCESS)
        err = clGetMemObjectInfo(t->mem, CL_MEM_SIZE, sizeof size, &size,
                                 NULL);
    if (err != CL_SUCCESS)
        return pkv__cl_fail(err, call);
    if (ctx != b->cl.context)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "%s: the cl_mem belongs to another context than "
                         "the engine's (pkv_engine_get_opencl)",
                         name);
    size_t elem = t->dtype == PKV_TENSOR_F16 ? 2 : 4;
    uint64_t need = (uint64_t)b->step.num_tokens * heads * b->cfg.head_dim *
                    elem;
    if (t->offset % (4 * elem) != 0 || t->offset > size ||
        size - t->offset < need)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "%s: %zu-byte buffer, offset %llu: needs %llu bytes "
                         "from an offset that is a multiple of %zu",
                         name, size, (unsigned long long)t->offset,
                         (unsigned long long)need, 4 * elem);
    out->mem = t->mem;
    out->off = t->offset / elem;
    out->f16 = t->dtype == PKV_TENSOR_F16;
    return PKV_OK;
}

pkv_status pkv__opencl_attend_device(pkv__backend *b, uint32_t layer,
                                     const pkv__device_tensor *q,
                                     const pkv__device_tensor *k,
                                     const pkv__device_tensor *v,
                                     const pkv__device_tensor *out,
                                     float scale, uint32_t window)
{
    pkv_status st = layer_check(b, layer, q, out);
    if (st != PKV_OK || b->step.num_tokens == 0)
        return st;
    if (!(scale >= 0.0f) || isinf(scale))
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "attend: scale must be finite and >= 0");
    kt tq, tk, tv, to;
    uint32_t hq = b->cfg.num_q_heads, hkv = b->cfg.num_kv_heads;
    st = device_tensor_check(b, "q", q, hq, &tq);
    if (st == PKV_OK)
        st = device_tensor_check(b, "k", k, hkv, &tk);
    if (st == PKV_OK)
        st = device_tensor_check(b, "v", v, hkv, &tv);
    if (st == PKV_OK)
        st = device_tensor_check(b, "out", out, hq, &to);
    if (st == PKV_OK)
        st = need_upload(b);
    if (st == PKV_OK)
        st = enqueue_append(b, layer, tk, tv);
    if (st == PKV_OK)
        st = enqueue_attention(b, layer, tq, to, scale, window);
    return st;
}

/* --------------------------------------------------------- copies, swap */

/* Room for n (dst, src) pairs in units_host and units. */
static pkv_status units_reserve(pkv__backend *b, uint32_t n)
{
    size_t bytes = (size_t)n * 2 * sizeof(uint32_t);
    if (bytes <= b->units_cap && b->units != NULL)
        return PKV_OK;
    size_t cap = b->units_cap ? b->units_cap : 256;
    while (cap < bytes)
        cap *= 2;
    uint32_t *host = pkv__calloc(&b->alloc, cap, 1);
    if (host == NULL)
        return pkv__fail(PKV_ERR_OUT_OF_MEMORY, "copy list: no memory");
    cl_mem m;
    pkv_status st = new_zeroed(b, cap, CL_MEM_READ_ONLY, &m, "copy list");
    if (st != PKV_OK) {
        if (m != NULL)
            clReleaseMemObject(m);
        pkv__free(&b->alloc, host, cap, 1);
        return st;
    }
    if (b->units != NULL)
        clReleaseMemObject(b->units);
    pkv__free(&b->alloc, b->units_host, b->units_cap, 1);
    b->units = m;
    b->units_host = host;
    b->units_cap = cap;
    return PKV_OK;
}

/* units_host (filled by the caller) to the device, once for the launches
 * that follow. Whole: a simulator such as oclgrind forgets what it knew
 * of a buffer at a write of part of it. Blocking, since the next list is
 * written into the same host words. */
static pkv_status put_units(pkv__backend *b)
{
    cl_int err = clEnqueueWriteBuffer(b->queue, b->units, CL_TRUE, 0,
                                      b->units_cap, b->units_host, 0, NULL,
                                      NULL);
    if (err != CL_SUCCESS)
        return pkv__cl_fail(err, "clEnqueueWriteBuffer(copy list)");
    return PKV_OK;
}

/* For each of the first n pairs of the list put_units sent, copy unit
 * src + src_add of src to unit dst + dst_add of dst: one launch. */
static pkv_status copy_units(pkv__backend *b, cl_mem dst, cl_uint dst_add,
                             cl_mem src, cl_uint src_add, uint32_t n,
                             size_t unit_bytes)
{
    cl_uint words4 = (cl_uint)(unit_bytes / 16);
    karg a[] = {KA(dst), KA(dst_add), KA(src), KA(src_add), KA(b->units),
                KA(words4)};
    return launch(b, b->k_copy, "pkv_block_copy", a, 6, words4, n,
                  b->local_copy);
}

/* The pairs that copy something into units_host; *n_out of them. 1 if
 * they are independent (no unit written twice, or written and read), so
 * that one launch may run them in any order; 0 if one must wait for
 * another (a chain a -> b, b -> c), and the caller runs them one by one. */
static int list_pairs(pkv__backend *b, const pkv__block_copy *pairs,
                      uint32_t n, uint32_t *n_out)
{
    uint32_t k = 0;
    int independent = 1;
    for (uint32_t i = 0; i < n; i++) {
        if (pairs[i].src == pairs[i].dst)
            continue;
        for (uint32_t j = 0; j < k; j++)
            if (b->units_host[2 * j] == pairs[i].dst ||
                b->units_host[2 * j] == pairs[i].src ||
                b->units_host[2 * j + 1] == pairs[i].dst)
                independent = 0;
        b->units_host[2 * k] = pairs[i].dst;
        b->units_host[2 * k + 1] = pairs[i].src;
        k++;
    }
    *n_out = k;
    return independent;
}

/* Copy the pairs within one buffer per layer (layers > 1: arenas) or one
 * buffer (stages): one launch per buffer, or, for dependent pairs, one per
 * pair in order. */
static pkv_status copy_pairs(pkv__backend *b, cl_mem *bufs, uint32_t layers,
                             const pkv__block_copy *pairs, uint32_t n,
                             size_t unit_bytes)
{
    pkv_status st = units_reserve(b, n);
    if (st != PKV_OK)
        return st;
    uint32_t k;
    if (list_pairs(b, pairs, n, &k)) {
        if (k > 0)
            st = put_units(b);
        for (uint32_t l = 0; st == PKV_OK && k > 0 && l < layers; l++)
            st = copy_units(b, bufs[l], 0, bufs[l], 0, k, unit_bytes);
        return st;
    }
    for (uint32_t i = 0; st == PKV_OK && i < n; i++) {
        if (pairs[i].src == pairs[i].dst)
            continue;
        b->units_host[0] = pairs[i].dst;
        b->units_host[1] = pairs[i].src;
        st = put_units(b);
        for (uint32_t l = 0; st == PKV_OK && l < layers; l++)
            st = copy_units(b, bufs[l], 0, bufs[l], 0, 1, unit_bytes);
    }
    return st;
}

static pkv_status ocl_copy_blocks(pkv__backend *b,
                                  const pkv__block_copy *pairs, uint32_t n)
{
    pkv_status st = pkv__backend_pairs_check(&b->cfg, pairs, n, 1);
    if (st != PKV_OK)
        return st;
    return copy_pairs(b, b->arenas, b->cfg.num_layers, pairs, n,
                      b->layer_block_bytes);
}

static pkv_status ocl_copy_stages(pkv__backend *b,
                                  const pkv__block_copy *pairs, uint32_t n)
{
    pkv_status st = pkv__backend_pairs_check(&b->cfg, pairs, n, 0);
    if (st != PKV_OK)
        return st;
    return copy_pairs(b, &b->stages, 1, pairs, n, (size_t)b->stage_floats * 4);
}

/* The transfer buffer holds at least `bytes`. */
static pkv_status transfer_reserve(pkv__backend *b, size_t bytes)
{
    return grow_buffer(b, &b->transfer, &b->transfer_cap, bytes,
                       CL_MEM_READ_WRITE, "transfer");
}

/* Host bytes into the transfer buffer, whole, from its start; the caller
 * then copies them on with pkv_block_copy. */
static pkv_status to_transfer(pkv__backend *b, const void *host, size_t bytes)
{
    pkv_status st = transfer_reserve(b, bytes);
    if (st != PKV_OK)
        return st;
    cl_int err = clEnqueueWriteBuffer(b->queue, b->transfer, CL_FALSE, 0,
                                      bytes, host, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return pkv__cl_fail(err, "clEnqueueWriteBuffer(transfer)");
    return PKV_OK;
}

/* The host layout of a swap is block after block, each layer after layer:
 * block i's layer l is transfer unit i * layers + l. Units of the list:
 * the blocks on one side, i * layers on the other; each layer's launch
 * adds l to the transfer side. */
static void list_swap(pkv__backend *b, const uint32_t *blocks, uint32_t n,
                      int to_arena)
{
    uint32_t layers = b->cfg.num_layers;
    for (uint32_t i = 0; i < n; i++) {
        b->units_host[2 * i + (to_arena ? 0 : 1)] = blocks[i];
        b->units_host[2 * i + (to_arena ? 1 : 0)] = i * layers;
    }
}

/* Every block's layers gathered into the transfer buffer, one launch per
 * layer, then one read of it all. */
static pkv_status ocl_swap_out(pkv__backend *b, const uint32_t *blocks,
                               uint32_t n, void *host)
{
    pkv_status st = pkv__backend_ids_check(&b->cfg, blocks, n, 0);
    if (st != PKV_OK || n == 0)
        return st;
    uint32_t layers = b->cfg.num_layers;
    size_t bytes = (size_t)n * layers * b->layer_block_bytes;
    st = transfer_reserve(b, bytes);
    if (st == PKV_OK)
        st = units_reserve(b, n);
    if (st != PKV_OK)
        return st;
    list_swap(b, blocks, n, 0);
    st = put_units(b);
    for (uint32_t l = 0; st == PKV_OK && l < layers; l++)
        st = copy_units(b, b->transfer, l, b->arenas[l], 0, n,
                        b->layer_block_bytes);
    if (st == PKV_OK) {
        cl_int err = clEnqueueReadBuffer(b->queue, b->transfer, CL_TRUE, 0,
                                         bytes, host, 0, NULL, NULL);
        if (err != CL_SUCCESS)
            st = pkv__cl_fail(err, "clEnqueueReadBuffer(swap out)");
    }
    pkv_status fin = finish(b, "swap out");
    return st != PKV_OK ? st : fin;
}

/* Every block's layers in one host write, then one launch per layer from
 * the transfer buffer into the arena. */
static pkv_status ocl_swap_in(pkv__backend *b, const void *host,
                              const uint32_t *blocks, uint32_t n)
{
    pkv_status st = pkv__backend_ids_check(&b->cfg, blocks, n, 1);
    if (st != PKV_OK || n == 0)
        return st;
    uint32_t layers = b->cfg.num_layers;
    st = units_reserve(b, n);
    if (st == PKV_OK)
        st = to_transfer(b, host, (size_t)n * layers * b->layer_block_bytes);
    if (st == PKV_OK) {
        list_swap(b, blocks, n, 1);
        st = put_units(b);
    }
    for (uint32_t l = 0; st == PKV_OK && l < layers; l++)
        st = copy_units(b, b->arenas[l], 0, b->transfer, l, n,
                        b->layer_block_bytes);
    pkv_status fin = finish(b, "swap in");
    return st != PKV_OK ? st : fin;
}

static pkv_status stage_check(const pkv__backend *b, uint32_t stage)
{
    if (stage >= b->cfg.num_stages)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "staging tail %u of %u",
                         (unsigned)stage, (unsigned)b->cfg.num_stages);
    return PKV_OK;
}

static pkv_status ocl_stage_out(pkv__backend *b, uint32_t stage, void *host)
{
    pkv_status st = stage_check(b, stage);
    if (st != PKV_OK)
        return st;
    size_t bytes = (size_t)b->stage_floats * 4;
    cl_int err = clEnqueueReadBuffer(b->queue, b->stages, CL_TRUE,
                                     stage * bytes, bytes, host, 0, NULL,
                                     NULL);
    if (err != CL_SUCCESS)
        return pkv__cl_fail(err, "clEnqueueReadBuffer(stage out)");
    return PKV_OK;
}

static pkv_status ocl_stage_in(pkv__backend *b, const void *host,
                               uint32_t stage)
{
    pkv_status st = stage_check(b, stage);
    size_t bytes = (size_t)b->stage_floats * 4;
    if (st == PKV_OK)
        st = units_reserve(b, 1);
    if (st == PKV_OK)
        st = to_transfer(b, host, bytes);
    if (st == PKV_OK) {
        b->units_host[0] = stage;
        b->units_host[1] = 0;
        st = put_units(b);
    }
    if (st == PKV_OK)
        st = copy_units(b, b->stages, 0, b->transfer, 0, 1, bytes);
    pkv_status fin = finish(b, "stage in");
    return st != PKV_OK ? st : fin;
}

const pkv__backend_ops pkv__backend_opencl = {
    "opencl",        ocl_create,      ocl_destroy,     ocl_begin_step,
    ocl_append,      ocl_attend,      ocl_copy_blocks, ocl_copy_stages,
    ocl_swap_out,    ocl_swap_in,     ocl_stage_out,   ocl_stage_in,
    ocl_append_attend,
};
