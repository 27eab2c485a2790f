/* SPDX-License-Identifier: MIT */
/*
 * Device buffers of the OpenCL backend: creation (counted), zeroing,
 * growth, host-tensor buffers, kernel launches and waits.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

/* Every buffer the backend creates, counted (pkv__ocl_buffers_created). */
cl_mem pkv__ocl_new_buffer(pkv__backend *b, cl_mem_flags flags, size_t bytes,
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
pkv_status pkv__ocl_new_zeroed(pkv__backend *b, size_t bytes,
                               cl_mem_flags flags, cl_mem *out,
                               const char *what)
{
    cl_int err;
    char call[96];
    *out = pkv__ocl_new_buffer(b, flags, bytes, &err);
    if (err != CL_SUCCESS) {
        *out = NULL;
        snprintf(call, sizeof call, "clCreateBuffer(%s, %zu bytes)", what,
                 bytes);
        return pkv__ocl_fail(err, call);
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
        return pkv__ocl_fail(err, call);
    }
    return PKV_OK;
}

/* ------------------------------------------------------------- the step */

/* Make *mem hold at least `bytes` (contents not kept; a new buffer starts
 * zeroed, see pkv__ocl_new_zeroed). */
pkv_status pkv__ocl_grow_buffer(pkv__backend *b, cl_mem *mem, size_t *cap,
                                size_t bytes, cl_mem_flags flags,
                                const char *what)
{
    if (bytes <= *cap && *mem != NULL)
        return PKV_OK;
    size_t want = *cap ? *cap : 256;
    while (want < bytes)
        want *= 2;
    cl_mem m;
    pkv_status st = pkv__ocl_new_zeroed(b, want, flags, &m, what);
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

pkv_status pkv__ocl_launch(pkv__backend *b, cl_kernel k, const char *name,
                           const karg *args, unsigned n, size_t g0, size_t g1,
                           size_t local)
{
    char call[96];
    for (unsigned i = 0; i < n; i++) {
        cl_int err = clSetKernelArg(k, i, args[i].size, args[i].value);
        if (err != CL_SUCCESS) {
            snprintf(call, sizeof call, "clSetKernelArg(%s, %u)", name, i);
            return pkv__ocl_fail(err, call);
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
        return pkv__ocl_fail(err, call);
    }
    return PKV_OK;
}

/* A host tensor for the kernels: the backend's buffer `slot`, grown as
 * needed, with p's bytes written to it (an input) or to be read from it
 * after the kernels ran (an output). */
pkv_status pkv__ocl_host_in(pkv__backend *b, int slot, const void *p,
                            size_t bytes, int output, cl_mem *out)
{
    cl_int err;
    if (bytes > b->tensor_cap[slot]) {
        cl_mem m = pkv__ocl_new_buffer(b, CL_MEM_READ_WRITE, bytes, &err);
        if (err != CL_SUCCESS)
            return pkv__ocl_fail(err, "clCreateBuffer(tensor)");
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
            return pkv__ocl_fail(err, "clEnqueueWriteBuffer(tensor)");
    }
    return PKV_OK;
}

pkv_status pkv__ocl_finish(pkv__backend *b, const char *what)
{
    b->finishes++;
    cl_int err = clFinish(b->queue);
    if (err != CL_SUCCESS) {
        char call[96];
        snprintf(call, sizeof call, "clFinish(%s)", what);
        return pkv__ocl_fail(err, call);
    }
    return PKV_OK;
}

pkv_status pkv__ocl_make_kernel(pkv__backend *b, cl_program prog,
                                const char *name, cl_kernel *out,
                                size_t *local, size_t want)
{
    cl_int err;
    *out = clCreateKernel(prog, name, &err);
    if (err != CL_SUCCESS) {
        *out = NULL;
        char call[96];
        snprintf(call, sizeof call, "clCreateKernel(%s)", name);
        return pkv__ocl_fail(err, call);
    }
    size_t max = 0;
    err = clGetKernelWorkGroupInfo(*out, b->cl.device,
                                   CL_KERNEL_WORK_GROUP_SIZE, sizeof max, &max,
                                   NULL);
    *local = err == CL_SUCCESS && max < want && max > 0 ? max : want;
    return PKV_OK;
}
