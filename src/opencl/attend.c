/* SPDX-License-Identifier: MIT */
/*
 * Append and attention of one layer: the kernels, the host-tensor calls
 * (append, attend, append_attend) and cl_mem tensors (attend_device).
 */
#include "internal.h"

#include "features.h"
#include "prefill_dpas.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static pkv_status enqueue_append(pkv__backend *b, uint32_t layer, kt k, kt v)
{
    const pkv__backend_config *c = &b->cfg;
    cl_uint hkv = c->num_kv_heads, d = c->head_dim, bs = c->block_size;
    cl_uint dtype = (cl_uint)c->kv_dtype, lyr = layer;
    cl_uint ntok = b->step.num_tokens, nfreeze = b->num_freezes;
    cl_mem arena = pkv__ocl_arena(b, layer);
    cl_mem step = pkv__ocl_group_of(b, layer)->step_mem;
    for (cl_uint kv = 0; kv < 2 && pkv__backend_quantized(c) && nfreeze; kv++) {
        kt src = kv ? v : k;
        pkv__qformat f = pkv__backend_qformat(c, (int)kv);
        cl_uint pd = (cl_uint)f.dtype, group = (cl_uint)f.group;
        cl_uint u4g = f.u4_group;
        karg a[] = {KA(arena), KA(b->stages), KA(src.mem), KA(src.off),
                    KA(src.f16), KA(step), KA(nfreeze), KA(kv), KA(pd),
                    KA(group), KA(u4g), KA(hkv), KA(d), KA(bs),
                    KA(b->head_bytes),
                    KA(b->k_part_bytes), KA(b->layer_block_bytes),
                    KA(b->stage_floats), KA(lyr)};
        pkv_status st = pkv__ocl_launch(b, b->k_freeze, "pkv_kv_freeze", a,
                                        sizeof a / sizeof a[0], nfreeze, hkv,
                                        b->local_freeze);
        if (st != PKV_OK)
            return st;
    }
    for (cl_uint kv = 0; kv < 2; kv++) {
        kt src = kv ? v : k;
        karg a[] = {KA(arena), KA(b->stages), KA(src.mem), KA(src.off),
                    KA(src.f16), KA(step), KA(ntok), KA(kv),
                    KA(dtype), KA(hkv), KA(d), KA(bs), KA(b->head_bytes),
                    KA(b->k_part_bytes), KA(b->layer_block_bytes),
                    KA(b->stage_floats), KA(lyr)};
        pkv_status st = pkv__ocl_launch(b, b->k_append, "pkv_kv_append", a,
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
    cl_uint u4g = c->u4_group;
    cl_uint flags = q.f16 | out.f16 << 1, lyr = layer, win = window;
    cl_uint ntok = b->step.num_tokens, maxb = b->table_stride;
    cl_float sc = scale == 0.0f ? 1.0f / sqrtf((float)d) : scale;
    cl_mem arena = pkv__ocl_arena(b, layer);
    const pkv__ocl_group *grp = pkv__ocl_group_of(b, layer);
    if (b->prefill_kind == PKV__PREFILL_DPAS && ntok > 0)
        return pkv__ocl_dpas_enqueue(b, layer, q, out, scale, window);
    if (b->prefill_kind == PKV__PREFILL_INTEL && ntok > 0) {
        /* Intel's: a work-group per (tile, kv head, slice of its query
         * heads), the geometry built in. */
        karg a[] = {KA(arena), KA(b->stages), KA(q.mem), KA(q.off),
                    KA(out.mem), KA(out.off), KA(flags), KA(grp->step_mem),
                    KA(grp->tables), KA(maxb), KA(hkv), KA(b->stage_floats),
                    KA(lyr), KA(sc), KA(win)};
        size_t lanes = b->prefill_lanes;
        return pkv__ocl_launch(b, b->k_prefill, "pkv_prefill_intel", a,
                               sizeof a / sizeof a[0], b->num_tiles * lanes,
                               (size_t)hkv * b->prefill_slices, lanes);
    }
    if (b->tile_rows > 0 && ntok > 0) {
        /* The tiled kernel: a work-group per (tile, kv head). */
        cl_uint rows = b->tile_rows, chunk = b->tile_chunk;
        karg a[] = {KA(arena), KA(b->stages), KA(q.mem),
                    KA(q.off), KA(out.mem), KA(out.off), KA(flags),
                    KA(grp->step_mem), KA(grp->tables), KA(rows), KA(chunk),
                    KA(maxb), KA(hq), KA(hkv), KA(d), KA(bs), KA(dtype),
                    KA(kq), KA(vq), KA(u4g), KA(b->head_bytes),
                    KA(b->k_part_bytes),
                    KA(b->layer_block_bytes), KA(b->stage_floats), KA(lyr),
                    KA(sc), KA(win), {(size_t)2 * chunk * d * 4, NULL}};
        size_t lanes = (size_t)rows * (hq / hkv);
        return pkv__ocl_launch(b, b->k_tiled, "pkv_paged_attention_tiled", a,
                               sizeof a / sizeof a[0], b->num_tiles * lanes,
                               hkv, lanes);
    }
    karg a[] = {KA(arena), KA(b->stages), KA(q.mem), KA(q.off),
                KA(out.mem), KA(out.off), KA(flags), KA(grp->step_mem),
                KA(grp->tables), KA(ntok), KA(maxb), KA(hq), KA(hkv), KA(d),
                KA(bs), KA(dtype), KA(kq), KA(vq), KA(u4g), KA(b->head_bytes),
                KA(b->k_part_bytes), KA(b->layer_block_bytes),
                KA(b->stage_floats), KA(lyr), KA(sc), KA(win)};
    return pkv__ocl_launch(b, b->k_attend, "pkv_paged_attention", a,
                           sizeof a / sizeof a[0], ntok, hq, b->local_attend);
}

/* Attention of one layer: the decode kernels when the step is all
 * decodes (and they built), else the generic kernel. */
static pkv_status enqueue_attention(pkv__backend *b, uint32_t layer, kt q,
                                    kt out, float scale, uint32_t window)
{
    if (b->step_is_decode) /* pkv__ocl_need_upload built them */
        return pkv__ocl_enqueue_decode(b, layer, q, out, scale, window);
    return enqueue_attend(b, layer, q, out, scale, window);
}

/* The attention scale the kernels take: finite and >= 0. */
static pkv_status scale_check(float scale)
{
    if (!(scale >= 0.0f) || isinf(scale))
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "attend: scale must be finite and >= 0");
    return PKV_OK;
}

/* The shared check, with the step the backend holds (none before
 * begin_step). */
static pkv_status layer_check(const pkv__backend *b, uint32_t layer,
                              const void *in, const void *out)
{
    return pkv__backend_layer_check(&b->cfg, b->have_step ? &b->step : NULL,
                                    layer, in, out);
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
        if (st == PKV_OK)
            st = scale_check(scale);
    }
    if (st != PKV_OK || b->step.num_tokens == 0)
        return st;
    st = pkv__ocl_need_upload(b);
    if (st != PKV_OK)
        return st;
    const pkv__backend_config *c = &b->cfg;
    size_t kv_bytes = (size_t)b->step.num_tokens * c->num_kv_heads *
                      c->head_dim * sizeof(float);
    size_t q_bytes = (size_t)b->step.num_tokens * c->num_q_heads *
                     c->head_dim * sizeof(float);
    cl_mem m[4] = {NULL, NULL, NULL, NULL}; /* k, v, q, out */
    if (what & DO_APPEND) {
        st = pkv__ocl_host_in(b, 0, k, kv_bytes, 0, &m[0]);
        if (st == PKV_OK)
            st = pkv__ocl_host_in(b, 1, v, kv_bytes, 0, &m[1]);
        if (st == PKV_OK) {
            kt kk = {m[0], 0, 0}, vv = {m[1], 0, 0};
            st = enqueue_append(b, layer, kk, vv);
        }
    }
    int attend = what & DO_ATTEND;
    if (st == PKV_OK && attend) {
        st = pkv__ocl_host_in(b, 2, q, q_bytes, 0, &m[2]);
        if (st == PKV_OK)
            st = pkv__ocl_host_in(b, 3, out, q_bytes, 1, &m[3]);
        if (st == PKV_OK) {
            kt qq = {m[2], 0, 0}, oo = {m[3], 0, 0};
            st = enqueue_attention(b, layer, qq, oo, scale, window);
        }
    }
    if (st == PKV_OK && attend) {
        cl_int err = clEnqueueReadBuffer(b->queue, m[3], CL_TRUE, 0,
                                         q_bytes, out, 0, NULL, NULL);
        if (err != CL_SUCCESS)
            st = pkv__ocl_fail(err, "clEnqueueReadBuffer(out)");
    }
    pkv_status fin = pkv__ocl_finish(b, attend ? "attend" : "append");
    return st != PKV_OK ? st : fin;
}

pkv_status pkv__ocl_append(pkv__backend *b, uint32_t layer, const float *k,
                           const float *v)
{
    return host_layer(b, DO_APPEND, layer, k, v, NULL, NULL, 0.0f, 0);
}

pkv_status pkv__ocl_attend(pkv__backend *b, uint32_t layer, const float *q,
                           float *out, float scale, uint32_t window)
{
    return host_layer(b, DO_ATTEND, layer, NULL, NULL, q, out, scale, window);
}

pkv_status pkv__ocl_append_attend(pkv__backend *b, uint32_t layer,
                                  const float *k, const float *v,
                                  const float *q, float *out, float scale,
                                  uint32_t window)
{
    return host_layer(b, DO_APPEND | DO_ATTEND, layer, k, v, q, out, scale,
                      window);
}

/* ------------------------------------------------------ device tensors */

/* A cl_mem tensor (pkv_tensor.data is the cl_mem) for the kernels, after
 * checking its buffer: the engine's context, room for the step's rows
 * from an offset aligned to 4 elements. */
static pkv_status device_tensor_check(const pkv__backend *b, const char *name,
                                      const pkv_tensor *t, uint32_t heads,
                                      kt *out)
{
    cl_mem mem = (cl_mem)t->data;
    if (mem == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "%s: cl_mem is NULL",
                         name);
    cl_context ctx = NULL;
    size_t size = 0;
    char call[96];
    snprintf(call, sizeof call, "clGetMemObjectInfo(%s)", name);
    cl_int err =
        clGetMemObjectInfo(mem, CL_MEM_CONTEXT, sizeof ctx, &ctx, NULL);
    if (err == CL_SUCCESS)
        err = clGetMemObjectInfo(mem, CL_MEM_SIZE, sizeof size, &size, NULL);
    if (err != CL_SUCCESS)
        return pkv__ocl_fail(err, call);
    if (ctx != b->cl.context)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "%s: the cl_mem belongs to another context than "
                         "the engine's (pkv_engine_get_opencl)",
                         name);
    size_t elem = t->dtype == PKV_TENSOR_DTYPE_F16 ? 2 : 4;
    uint64_t need = (uint64_t)b->step.num_tokens * heads * b->cfg.head_dim *
                    elem;
    if (t->offset % (4 * elem) != 0 || t->offset > size ||
        size - t->offset < need)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "%s: %zu-byte buffer, offset %llu: needs %llu bytes "
                         "from an offset that is a multiple of %zu",
                         name, size, (unsigned long long)t->offset,
                         (unsigned long long)need, 4 * elem);
    out->mem = mem;
    out->off = t->offset / elem;
    out->f16 = t->dtype == PKV_TENSOR_DTYPE_F16;
    return PKV_OK;
}

pkv_status pkv__ocl_attend_device(pkv__backend *b, uint32_t layer,
                                  const pkv_tensor *q, const pkv_tensor *k,
                                  const pkv_tensor *v, const pkv_tensor *out,
                                  float scale, uint32_t window)
{
    pkv_status st = layer_check(b, layer, q, out);
    if (st != PKV_OK || b->step.num_tokens == 0)
        return st;
    st = scale_check(scale);
    if (st != PKV_OK)
        return st;
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
        st = pkv__ocl_need_upload(b);
    if (st == PKV_OK)
        st = enqueue_append(b, layer, tk, tv);
    if (st == PKV_OK)
        st = enqueue_attention(b, layer, tq, to, scale, window);
    return st;
}
