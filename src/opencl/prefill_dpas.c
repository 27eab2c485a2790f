/* SPDX-License-Identifier: MIT */
/*
 * The prefill variant on Intel's matrix engines (prefill_dpas.h).
 */
#include "prefill_dpas.h"

#include "features.h"
#include "kv_layout.h"

#include <math.h>
#include <stdio.h>

#define SUB_GROUP 8u /* the builtin's sub-group size on DG2 */

uint32_t pkv__dpas_rows(uint32_t head_dim)
{
    return head_dim <= 64 ? 4u : 2u;
}

uint64_t pkv__dpas_local_bytes(uint32_t head_dim, uint32_t group)
{
    /* K and V of 16 tokens in f16, and each sub-group's query rows. */
    return (uint64_t)64u * head_dim +
           (uint64_t)2u * group * head_dim * pkv__dpas_rows(head_dim);
}

int pkv__dpas_takes(uint32_t head_dim, uint32_t group, size_t max_group,
                    uint64_t local_mem, char *why, size_t why_size)
{
    if (head_dim % 16 != 0 || head_dim > 256)
        snprintf(why, why_size,
                 "head_dim %u is not a multiple of 16 up to 256",
                 (unsigned)head_dim);
    else if ((size_t)SUB_GROUP * group > max_group)
        snprintf(why, why_size, "%u query heads a kv head need work-groups "
                 "of %u, the device allows %zu",
                 (unsigned)group, (unsigned)(SUB_GROUP * group), max_group);
    else if (pkv__dpas_local_bytes(head_dim, group) > local_mem)
        snprintf(why, why_size, "%llu bytes of local memory needed, the "
                 "device has %llu",
                 (unsigned long long)pkv__dpas_local_bytes(head_dim, group),
                 (unsigned long long)local_mem);
    else
        return 1;
    return 0;
}

pkv_status pkv__ocl_dpas_build(pkv__backend *b)
{
    const pkv__backend_config *c = &b->cfg;
    int quantized = pkv__backend_quantized(c);
    uint32_t group = c->num_q_heads / c->num_kv_heads;
    char opts[512];
    pkv__decode_build_options(
        c->head_dim, c->block_size, group, (int)c->kv_dtype,
        quantized ? (int)c->key_quant : PKV_LAYOUT_PER_CHANNEL,
        quantized ? (int)c->value_quant : PKV_LAYOUT_PER_CHANNEL,
        c->u4_group != 0 ? c->u4_group : c->head_dim, " -cl-std=CL2.0",
        opts, sizeof opts);
    size_t local = 0, want = (size_t)SUB_GROUP * group;
    pkv_status st = pkv__ocl_program(&b->cl, PKV__CL_PREFILL_DPAS, opts,
                                     &b->prefill_program);
    if (st == PKV_OK)
        st = pkv__ocl_make_kernel(b, b->prefill_program, "pkv_prefill_dpas",
                                  &b->k_prefill, &local, want);
    if (st == PKV_OK && local < want)
        st = pkv__fail(PKV_ERR_UNSUPPORTED,
                       "the DPAS prefill kernel's work-groups hold %zu "
                       "items, %zu needed",
                       local, want);
    if (st != PKV_OK)
        return st;
    b->tile_rows = pkv__dpas_rows(c->head_dim);
    b->prefill_lanes = (uint32_t)want;
    pkv__ocl_log(&b->cl, PKV_LOG_LEVEL_INFO,
                 "opencl: prefill kernel dpas: %u rows x %u query heads per "
                 "work-group;%s",
                 (unsigned)b->tile_rows, (unsigned)group, opts);
    return PKV_OK;
}

pkv_status pkv__ocl_dpas_enqueue(pkv__backend *b, uint32_t layer, kt q,
                                 kt out, float scale, uint32_t window)
{
    const pkv__backend_config *c = &b->cfg;
    cl_uint hkv = c->num_kv_heads;
    cl_uint flags = q.f16 | out.f16 << 1, lyr = layer, win = window;
    cl_uint maxb = b->table_stride;
    cl_float sc = scale == 0.0f ? 1.0f / sqrtf((float)c->head_dim) : scale;
    cl_mem arena = pkv__ocl_arena(b, layer);
    const pkv__ocl_group *grp = pkv__ocl_group_of(b, layer);
    karg a[] = {KA(arena),         KA(b->stages),
                KA(q.mem),         KA(q.off),
                KA(out.mem),       KA(out.off),
                KA(flags),         KA(grp->step_mem),
                KA(grp->tables),   KA(maxb),
                KA(hkv),           KA(b->layer_block_bytes),
                KA(b->stage_floats), KA(lyr),
                KA(sc),            KA(win)};
    size_t lanes = b->prefill_lanes;
    return pkv__ocl_launch(b, b->k_prefill, "pkv_prefill_dpas", a,
                           sizeof a / sizeof a[0], b->num_tiles * lanes, hkv,
                           lanes);
}
