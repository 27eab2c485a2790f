/* SPDX-License-Identifier: MIT */
/*
 * Reading and writing the host's q and out tensors (OpenCL C 1.2): f32, or
 * f16 when the host hands a half-precision cl_mem. Part of the generic
 * program and of every decode program (src/opencl_program.c).
 */

/* Element i of an attend tensor: f32, or f16 when is_f16 (the host's
 * cl_mem tensors may be either; host tensors arrive as f32). */
static inline float4 pkv_load4(__global const float *t, ulong i, uint is_f16)
{
    if (is_f16)
        return vload_half4(0, (__global const half *)t + i);
    return vload4(0, t + i);
}

static inline void pkv_store4(float4 x, __global float *t, ulong i,
                              uint is_f16)
{
    if (is_f16)
        vstore_half4_rte(x, 0, (__global half *)t + i);
    else
        vstore4(x, 0, t + i);
}

