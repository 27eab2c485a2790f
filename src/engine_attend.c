/* SPDX-License-Identifier: MIT */
/* pkv_engine_attend: one layer of the step, its tensors checked, host
 * tensors converted and scanned for values the cache cannot store, then
 * the backend's append and attention. */
#include "engine.h"
#include "struct_sizes.h"

#include "half.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* Check one attend tensor against its expected shape. */
static pkv_status check_tensor(pkv_engine *e, const char *name,
                               const pkv_tensor *t, uint32_t rows,
                               uint32_t heads)
{
    if (t == NULL)
        return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                "%s is NULL", name);
    char why[128];
    if (pkv__struct_size_bad(t->struct_size, PKV__TENSOR_MIN_SIZE, sizeof *t,
                             name, "pkv_tensor_host", why, sizeof why))
        return pkv__engine_fail(e->message, PKV_ERR_STRUCT_SIZE, "%s", why);
    if (t->dtype != PKV_TENSOR_DTYPE_F32 && t->dtype != PKV_TENSOR_DTYPE_F16)
        return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                "%s->dtype is %d; not a pkv_tensor_dtype",
                                name, (int)t->dtype);
    int device_ok = e->device.ops->attend_device != NULL;
    if (t->memory != PKV_TENSOR_MEMORY_HOST &&
        !(t->memory == PKV_TENSOR_MEMORY_OPENCL && device_ok))
        return pkv__engine_fail(
            e->message,
            t->memory == PKV_TENSOR_MEMORY_OPENCL ? PKV_ERR_UNSUPPORTED
                                                  : PKV_ERR_INVALID_ARGUMENT,
            "%s->memory is %d; the %s backend takes %s", name, (int)t->memory,
            e->device.ops->name,
            device_ok ? "PKV_TENSOR_MEMORY_HOST or PKV_TENSOR_MEMORY_OPENCL"
                      : "host memory only");
    if (t->rows != rows || t->heads != heads ||
        t->head_dim != e->params.head_dim)
        return pkv__engine_fail(
            e->message, PKV_ERR_INVALID_ARGUMENT,
            "%s is [%u][%u][%u]; this step needs [%u][%u][%u]", name,
            (unsigned)t->rows, (unsigned)t->heads, (unsigned)t->head_dim,
            (unsigned)rows, (unsigned)heads, (unsigned)e->params.head_dim);
    if (rows > 0 && t->data == NULL)
        return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                "%s->data is NULL", name);
    /* Host elements are read and written in place: they must be aligned.
     * (cl_mem offsets are checked by the OpenCL backend.) */
    size_t esize = t->dtype == PKV_TENSOR_DTYPE_F32 ? 4 : 2;
    if (t->memory == PKV_TENSOR_MEMORY_HOST &&
        ((uintptr_t)t->data + t->offset) % esize != 0)
        return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                "%s->data + offset is not aligned to its "
                                "%zu-byte elements",
                                name, esize);
    return PKV_OK;
}

/* The tensor's elements as f32: the tensor itself, or a conversion into
 * dst. */
static const float *as_f32(const pkv_tensor *t, float *dst, size_t count)
{
    const uint8_t *base = (const uint8_t *)t->data + t->offset;
    if (t->dtype == PKV_TENSOR_DTYPE_F32)
        return (const float *)(const void *)base;
    pkv__f16_to_f32_n((const uint16_t *)(const void *)base, dst,
                      (uint32_t)count);
    return dst;
}

/* Mark the rows of k or v that hold a value the cache cannot store (NaN,
 * infinity, or beyond the f16 range for f16 and u8 caches). */
static int mark_bad_rows(const pkv_engine *e, const float *x, uint32_t rows,
                         size_t row_size)
{
    /* FLT_MAX, not INFINITY: |inf| <= INFINITY would pass as finite. */
    float limit = e->params.kv_dtype == PKV_KV_DTYPE_F32 ? FLT_MAX : 65504.0f;
    int any = 0;
    for (uint32_t r = 0; r < rows; r++) {
        const float *row = x + r * row_size;
        for (size_t i = 0; i < row_size; i++)
            if (!(fabsf(row[i]) <= limit)) {
                e->step.row_bad[r] = 1;
                any = 1;
                break;
            }
    }
    return any;
}

pkv_status pkv_engine_attend(pkv_engine *e, uint32_t layer,
                             const pkv_tensor *q, const pkv_tensor *k,
                             const pkv_tensor *v, const pkv_tensor *out)
{
    if (e == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "engine is NULL");
    if (!e->step.in_step)
        return pkv__engine_fail(e->message, PKV_ERR_BAD_STATE,
                                "attend outside a step: call step_begin");
    if (layer >= e->params.num_layers || e->step.layer_done[layer])
        return pkv__engine_fail(e->message, layer >= e->params.num_layers
                                       ? PKV_ERR_INVALID_ARGUMENT
                                       : PKV_ERR_BAD_STATE,
                                "layer %u %s", (unsigned)layer,
                                layer >= e->params.num_layers
                                    ? "is out of range"
                                    : "was already attended in this step");
    uint32_t rows = e->step.batch.num_tokens;
    uint32_t hq = e->params.num_q_heads, hkv = e->params.num_kv_heads;
    pkv_status st = check_tensor(e, "q", q, rows, hq);
    if (st == PKV_OK)
        st = check_tensor(e, "k", k, rows, hkv);
    if (st == PKV_OK)
        st = check_tensor(e, "v", v, rows, hkv);
    if (st == PKV_OK)
        st = check_tensor(e, "out", out, rows, hq);
    if (st != PKV_OK)
        return st;
    int device = q->memory == PKV_TENSOR_MEMORY_OPENCL;
    if (k->memory != q->memory || v->memory != q->memory ||
        out->memory != q->memory)
        return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                "q, k, v and out must all be host memory or "
                                "all cl_mem");
    if (rows == 0) {
        e->step.layer_done[layer] = 1;
        e->step.layers_left--;
        return PKV_OK;
    }
    /* cl_mem tensors: enqueued on the engine's queue, not waited for, and
     * not scanned for non-finite values (pkv_opencl.h). */
    if (device) {
        st = e->device.ops->attend_device(e->device.backend, layer, q, k, v,
                                          out, e->params.scale,
                                          e->layer_windows[layer]);
        if (st != PKV_OK)
            return pkv__engine_fail(e->message, st, "layer %u: %s",
                                    (unsigned)layer, pkv_last_error());
        e->step.layer_done[layer] = 1;
        e->step.layers_left--;
        return PKV_OK;
    }

    /* In size_t from the first factor: rows (up to 2^20) times hq (up to
     * 4096) alone can wrap 32 bits. */
    size_t d = e->params.head_dim;
    size_t q_count = (size_t)rows * hq * d, kv_count = (size_t)rows * hkv * d;
    size_t needed = 2 * q_count + 2 * kv_count;
    void *scratch;
    if (pkv__grow(&e->alloc, e->step.scratch, &e->step.scratch_capacity, 0,
                  needed, sizeof *e->step.scratch, &scratch) != PKV_OK)
        return pkv__engine_fail(e->message, PKV_ERR_OUT_OF_MEMORY,
                                "attend scratch of %zu floats", needed);
    e->step.scratch = scratch;
    float *q_buf = e->step.scratch, *out_buf = q_buf + q_count;
    float *k_buf = out_buf + q_count, *v_buf = k_buf + kv_count;
    const float *qf = as_f32(q, q_buf, q_count);
    const float *kf = as_f32(k, k_buf, kv_count);
    const float *vf = as_f32(v, v_buf, kv_count);

    /* A sequence whose K or V cannot be stored fails alone: its rows are
     * replaced by zeros (written only to its own, private slots of this
     * step), and it ends at step_end without registering any prefix. */
    memset(e->step.row_bad, 0, rows);
    int bad = mark_bad_rows(e, kf, rows, (size_t)hkv * d);
    bad |= mark_bad_rows(e, vf, rows, (size_t)hkv * d);
    if (bad) {
        if (kf != k_buf)
            kf = memcpy(k_buf, kf, kv_count * sizeof *k_buf);
        if (vf != v_buf)
            vf = memcpy(v_buf, vf, kv_count * sizeof *v_buf);
        for (uint32_t i = 0; i < e->step.batch.num_seqs; i++)
            for (uint32_t r = e->step.query_start[i];
                 r < e->step.query_start[i + 1]; r++) {
                if (!e->step.row_bad[r])
                    continue;
                e->step.seq_bad[i] = 1;
                break;
            }
        for (uint32_t i = 0; i < e->step.batch.num_seqs; i++) {
            if (!e->step.seq_bad[i])
                continue;
            size_t first = (size_t)e->step.query_start[i] * hkv * d;
            size_t count =
                (size_t)(e->step.query_start[i + 1] - e->step.query_start[i]) *
                hkv * d;
            memset(k_buf + first, 0, count * sizeof *k_buf);
            memset(v_buf + first, 0, count * sizeof *v_buf);
        }
    }

    float *out_f32 = (float *)(void *)((uint8_t *)out->data + out->offset);
    /* out may alias q (in place, or overlapping): the backend then writes
     * to scratch, copied to out once q has been read. */
    uintptr_t o0 = (uintptr_t)out_f32, q0 = (uintptr_t)qf;
    size_t span = q_count * sizeof(float);
    int alias =
        out->dtype == PKV_TENSOR_DTYPE_F32 && o0 < q0 + span && q0 < o0 + span;
    float *of =
        out->dtype == PKV_TENSOR_DTYPE_F32 && !alias ? out_f32 : out_buf;
    if (e->device.ops->append_attend != NULL) {
        st = e->device.ops->append_attend(e->device.backend, layer, kf, vf, qf,
                                          of, e->params.scale,
                                          e->layer_windows[layer]);
    } else {
        st = e->device.ops->append(e->device.backend, layer, kf, vf);
        if (st == PKV_OK)
            st =
                e->device.ops->attend(e->device.backend, layer, qf, of,
                                      e->params.scale, e->layer_windows[layer]);
    }
    if (st != PKV_OK)
        return pkv__engine_fail(e->message, st, "layer %u: %s", (unsigned)layer,
                                pkv_last_error());
    if (out->dtype == PKV_TENSOR_DTYPE_F16) {
        uint16_t *h = (uint16_t *)(void *)((uint8_t *)out->data + out->offset);
        pkv__f32_to_f16_n(out_buf, h, (uint32_t)q_count);
    } else if (alias) {
        memmove(out_f32, out_buf, span);
    }
    e->step.layer_done[layer] = 1;
    e->step.layers_left--;
    return PKV_OK;
}
