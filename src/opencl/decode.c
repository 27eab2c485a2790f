/* SPDX-License-Identifier: MIT */
/*
 * The split-K decode kernels (kernels/decode_common.cl) of all-decode
 * steps: the variant for the device, its build, and its launch.
 */
#include "internal.h"

#include "decode_plan.h"
#include "features.h"
#include "kv_layout.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The -D options and program of the decode variant `kind` (not OFF) for
 * this geometry on a device that is an Intel GPU or not (intel_gpu), into
 * opts; sets decode_lanes, decode_partition and decode_split. */
static pkv_status decode_options(pkv__backend *b, pkv__decode_kind kind,
                                 int intel_gpu, char *opts, size_t size,
                                 int *program)
{
    const pkv__backend_config *c = &b->cfg;
    int quantized = pkv__backend_quantized(c);
    uint32_t group = c->num_q_heads / c->num_kv_heads;
    cl_ulong local_mem = 0;
    size_t max_group = 0;
    clGetDeviceInfo(b->cl.device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local_mem,
                    &local_mem, NULL);
    clGetDeviceInfo(b->cl.device, CL_DEVICE_MAX_WORK_GROUP_SIZE,
                    sizeof max_group, &max_group, NULL);
    pkv__decode_setup su;
    int q_channel_values =
        quantized && c->value_quant == PKV_QUANT_GROUP_PER_CHANNEL;
    if (pkv__decode_setup_make(kind, c->head_dim, group, c->block_size,
                               q_channel_values, intel_gpu, local_mem,
                               max_group, &su) != 0)
        return pkv__fail(PKV_ERR_UNSUPPORTED,
                         "the variant does not fit the device: %llu bytes of "
                         "local memory, work-groups of %zu",
                         (unsigned long long)local_mem, max_group);
    b->decode_lanes = su.lanes;
    b->decode_partition = su.partition;
    b->decode_split = su.split;
    *program = kind == PKV__DECODE_GPU     ? PKV__CL_DECODE_GPU
               : kind == PKV__DECODE_INTEL ? PKV__CL_DECODE_INTEL
                                           : PKV__CL_DECODE;
    pkv__decode_build_options(
        c->head_dim, c->block_size, group, (int)c->kv_dtype,
        quantized ? (int)c->key_quant : PKV_LAYOUT_PER_CHANNEL,
        quantized ? (int)c->value_quant : PKV_LAYOUT_PER_CHANNEL,
        c->u4_group != 0 ? c->u4_group : c->head_dim, su.options, opts,
        size);
    return PKV_OK;
}

/* Build the decode program for this geometry (create). A build failure
 * is not an error: the generic kernel serves decode steps too. */
void pkv__ocl_decode_prepare(pkv__backend *b)
{
    const pkv__backend_config *c = &b->cfg;
    char extensions[4096], why[256], opts[512];
    pkv__ocl_device_string(b->cl.device, CL_DEVICE_EXTENSIONS, extensions,
                          sizeof extensions);
    cl_device_type type = 0;
    clGetDeviceInfo(b->cl.device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    int cpu_device = (type & CL_DEVICE_TYPE_CPU) != 0;
    pkv__decode_kind kind =
        pkv__decode_choose(b->decode_request, cpu_device, extensions,
                           c->head_dim, why, sizeof why);
    pkv_status st = PKV_OK;
    if (kind == PKV__DECODE_OFF) {
        snprintf(b->decode_variant, sizeof b->decode_variant,
                 "off: the generic paged-attention kernel (%s)", why);
        pkv__ocl_log(&b->cl,
                     b->decode_request == PKV__DECODE_OFF ? PKV_LOG_LEVEL_INFO
                                                          : PKV_LOG_LEVEL_WARN,
                     "opencl: decode kernel %s", b->decode_variant);
        b->decode_state = -1;
        return;
    }
    int program = PKV__CL_DECODE;
    st = decode_options(b, kind, pkv__ocl_intel_gpu(cpu_device, extensions),
                        opts, sizeof opts, &program);
    size_t local = 0;
    if (st == PKV_OK)
        st = pkv__ocl_program(&b->cl, program, opts, &b->decode_program);
    size_t want = kind == PKV__DECODE_CPU ? c->num_kv_heads : b->decode_lanes;
    if (st == PKV_OK)
        st = pkv__ocl_make_kernel(b, b->decode_program, "pkv_decode_partial",
                                  &b->k_partial, &local, want);
    /* The CPU variant puts a sequence's kv heads in one work-group, the
     * others a fixed number of lanes per (partition, head). */
    if (st == PKV_OK && local < want)
        st = pkv__fail(PKV_ERR_UNSUPPORTED,
                       "the kernel's work-groups hold %zu items, %zu needed",
                       local, want);
    if (st == PKV_OK)
        st = pkv__ocl_make_kernel(b, b->decode_program, "pkv_decode_reduce",
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
        pkv__ocl_log(&b->cl, PKV_LOG_LEVEL_INFO, "opencl: decode kernel %s;%s",
                     b->decode_variant, opts);
        return;
    }
    snprintf(b->decode_variant, sizeof b->decode_variant,
             "off: the generic paged-attention kernel (the %s decode "
             "variant is unavailable: %s)",
             name[kind], pkv_last_error());
    pkv__ocl_log(&b->cl, PKV_LOG_LEVEL_WARN, "opencl: decode kernel %s",
                 b->decode_variant);
    b->decode_state = -1;
}

/* The split-K decode of an all-decode step: the variant's partial kernel
 * over (partition, kv head, sequence), then the reduction when there is
 * more than one partition. */
pkv_status pkv__ocl_enqueue_decode(pkv__backend *b, uint32_t layer, kt q,
                                   kt out, float scale, uint32_t window)
{
    const pkv__backend_config *c = &b->cfg;
    cl_uint n = b->step.num_seqs, hq = c->num_q_heads, hkv = c->num_kv_heads;
    /* The plan counts work-groups a partition: a kv head has
     * decode_split of them. */
    pkv__decode_plan plan = pkv__decode_plan_make(
        n, hkv * b->decode_split, b->max_context, window, c->block_size,
        b->compute_units, b->decode_partition);
    cl_uint parts = plan.num_partitions, psize = plan.partition_size;
    if (parts > 1) {
        size_t rows = (size_t)n * hq * parts;
        pkv_status st = pkv__ocl_grow_buffer(
            b, &b->part_acc, &b->part_cap[0], rows * c->head_dim * 4,
            CL_MEM_READ_WRITE, "decode partitions");
        if (st == PKV_OK)
            st = pkv__ocl_grow_buffer(b, &b->part_ml, &b->part_cap[1],
                                      rows * 2 * 4, CL_MEM_READ_WRITE,
                                      "decode partitions");
        if (st != PKV_OK)
            return st;
    }
    cl_uint layer_off = layer * hkv * 2u * c->block_size * c->head_dim;
    cl_uint maxb = b->table_stride, win = window;
    cl_uint flags = q.f16 | out.f16 << 1;
    cl_float sc = scale == 0.0f ? 1.0f / sqrtf((float)c->head_dim) : scale;
    cl_mem acc = parts > 1 ? b->part_acc : NULL;
    cl_mem ml = parts > 1 ? b->part_ml : NULL;
    cl_mem arena = pkv__ocl_arena(b, layer);
    cl_mem tables = pkv__ocl_group_of(b, layer)->tables;
    karg a[] = {KA(arena), KA(b->stages), KA(b->stage_floats),
                KA(layer_off), KA(b->dec_stages), KA(q.mem), KA(q.off),
                KA(b->dec_lens), KA(tables), KA(maxb), KA(hkv), KA(sc),
                KA(win), KA(psize), KA(out.mem), KA(out.off), KA(flags),
                KA(acc), KA(ml)};
    pkv_status st = pkv__ocl_launch(b, b->k_partial, "pkv_decode_partial", a,
                                    sizeof a / sizeof a[0], 0, 0, 1);
    if (st != PKV_OK)
        return st;
    size_t lanes = b->decode_lanes;
    size_t global[3] = {parts * lanes, (size_t)hkv * b->decode_split, n};
    size_t local[3] = {lanes, lanes == 1 ? hkv : 1, 1};
    cl_int err = clEnqueueNDRangeKernel(b->queue, b->k_partial, 3, NULL,
                                        global, local, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return pkv__ocl_fail(err, "clEnqueueNDRangeKernel(pkv_decode_partial)");
    if (parts == 1)
        return PKV_OK;
    karg r[] = {KA(acc), KA(ml), KA(parts), KA(out.mem), KA(out.off),
                KA(flags)};
    st = pkv__ocl_launch(b, b->k_reduce, "pkv_decode_reduce", r,
                         sizeof r / sizeof r[0], 0, 0, 1);
    if (st != PKV_OK)
        return st;
    size_t rglobal[3] = {c->head_dim / 4, hq, n};
    err = clEnqueueNDRangeKernel(b->queue, b->k_reduce, 3, NULL, rglobal,
                                 NULL, 0, NULL, NULL);
    return err == CL_SUCCESS
               ? PKV_OK
               : pkv__ocl_fail(err,
                               "clEnqueueNDRangeKernel(pkv_decode_reduce)");
}
