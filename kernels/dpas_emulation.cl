/* SPDX-License-Identifier: MIT */
/*
 * intel_sub_group_f16_f16_matrix_mad_k16 on a device without
 * cl_intel_subgroup_matrix_multiply_accumulate (Intel's CPU runtime, where
 * the DPAS prefill kernel is tested): the builtin's documented data flow,
 * executed with sub-group broadcasts, so that the kernel's operand layout
 * is checked by running it. Where the extension is present (the driver
 * defines the macro) this file adds nothing and the hardware's DPAS runs.
 *
 * What is implemented: the extension's specification (Khronos
 * OpenCL-Docs, extensions/cl_intel_subgroup_matrix_multiply_accumulate,
 * revision 1.1.0), section "Add a new Section 6.13.X - Subgroup Matrix
 * Multiply Accumulate Instructions", for the fp16 functions of devices
 * whose sub-group size is 8, M = 2 and 4 (those the kernel uses),
 * in the order of its "Coding Sample":
 *   - a (intM) is the M x K matrix A, K = 16: component m is row m, and
 *     work-item i contributes 32 bits of it, the two f16 of columns 2i
 *     and 2i + 1 (the sample's work-item i contributes columns 4i .. 4i +
 *     3 of its 8-bit rows, as as_char4 orders them: the lower address,
 *     the low bits on these little-endian devices, first);
 *   - b (int8) is column n of the K x N matrix B for work-item n, N = 8:
 *     component j holds rows 2j and 2j + 1 (the sample pairs b.sj with
 *     the row vector's part from work-item j);
 *   - acc and the result (floatM) are column n of the M x N matrices for
 *     work-item n, component m row m, in f32.
 * Result[m][n] = acc[m][n] + sum over k of A[m][k] * B[k][n]. The
 * specification fixes neither the order of that sum nor its intermediate
 * rounding for floating-point matrices; this one computes each product in
 * f32 (exact: an f16 product has at most 22 significant bits) and adds
 * them in the sample's order, a pair's two products then the running sum,
 * rounding each addition to f32. The hardware may sum in another order
 * or wider: tests allow for any order of f32 additions.
 *
 * Requires cl_khr_fp16 and sub-group broadcasts (OpenCL C 2.0 with
 * sub-groups, or cl_khr_subgroups), and a kernel whose sub-group size is 8
 * (intel_reqd_sub_group_size(8)), as the builtin itself does.
 */
#ifndef cl_intel_subgroup_matrix_multiply_accumulate
#pragma OPENCL EXTENSION cl_khr_fp16 : enable

/* Row m of A (its pairs a[m] across the sub-group) times this
 * work-item's column b of B, plus acc. */
static inline float pkv_dpas_row(int a, int8 b, float acc)
{
    int bc[8];
    vstore8(b, 0, bc);
    float r = acc;
    for (uint j = 0; j < 8u; j++) {
        float2 x = convert_float2(as_half2(sub_group_broadcast(a, j)));
        float2 y = convert_float2(as_half2(bc[j]));
        r = x.x * y.x + x.y * y.y + r;
    }
    return r;
}

#define PKV_DPAS_EMULATE(n)                                                   \
    __attribute__((overloadable)) static inline float##n                      \
    pkv_dpas_f16_k16(int##n a, int8 b, float##n acc)                          \
    {                                                                         \
        int ar[n];                                                            \
        float r[n];                                                           \
        vstore##n(a, 0, ar);                                                  \
        vstore##n(acc, 0, r);                                                 \
        for (uint m = 0; m < n; m++)                                          \
            r[m] = pkv_dpas_row(ar[m], b, r[m]);                              \
        return vload##n(0, r);                                                \
    }
PKV_DPAS_EMULATE(2)
PKV_DPAS_EMULATE(4)
#undef PKV_DPAS_EMULATE

#define intel_sub_group_f16_f16_matrix_mad_k16 pkv_dpas_f16_k16
#endif
