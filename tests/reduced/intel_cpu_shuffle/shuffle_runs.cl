/* SPDX-License-Identifier: MIT */
/*
 * Reduced from kernels/decode_intel.cl (block_values on a staging tail in
 * runs of 16 tokens): the case that Intel's OpenCL runtime for CPUs
 * computes wrong (README.md beside this file has the findings and the
 * commands).
 *
 * One sub-group of 16 lanes, lane l owning channels 2 l, 2 l + 1 of 32.
 * out[g][c] = sum over tokens t < 16 of w[t][g] v[t][c]: lane l holds the
 * weights of token l (wl) and token j's weights reach every lane by
 * intel_sub_group_shuffle(wl[g], j), j = 0..15, a constant. The value
 * rows are f32 or, in a call the host never takes (sel != 0), u4 codes:
 * the u4 call has to be there for the f32 one to go wrong.
 *
 * Options (-D):
 *   EMULATE_SUBGROUP  the sub-group is the work-group and the shuffle goes
 *                     through local memory between barriers: for runtimes
 *                     without sub-groups (oclgrind, PoCL). A barrier that
 *                     some lane misses is an error under oclgrind, so this
 *                     also checks that every lane reaches every shuffle.
 *   ONE_CALL          no u4 call: the f32 path alone, the same
 *                     computation for the host's sel = 0, which Intel's
 *                     CPU runtime then gets right.
 */
#define D 32 /* channels of a row */
#define G 2  /* weights a token */
#define F32 0
#define U4 3

#ifdef EMULATE_SUBGROUP
#define LANE() ((uint)get_local_id(0))
#define SG_ID() 0u
#define SCRATCH , local float *x
#define PASS_SCRATCH , x
/* Lane j's v, to every lane. */
static float shuffle(local float *x, float v, uint j)
{
    x[LANE()] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    float r = x[j];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}
#define SHUFFLE(v, j) shuffle(x, v, j)
#else
#pragma OPENCL EXTENSION cl_intel_subgroups : enable
#define LANE() get_sub_group_local_id()
#define SG_ID() get_sub_group_id()
#define SCRATCH
#define PASS_SCRATCH
#define SHUFFLE(v, j) intel_sub_group_shuffle(v, j)
#endif

/* Bytes of n channels of a row stored as dtype (pkv's row_bytes: a
 * three-way selection here computes right). */
static size_t row_bytes(int dtype, size_t n)
{
    return dtype == U4 ? n / 2 : dtype == 2 ? n : dtype == 1 ? 2 * n : 4 * n;
}

/* The lane's two channels of a row. */
static float2 v_pair(global const uchar *row, int dtype)
{
    if (dtype == U4) {
        uchar b = row[LANE()];
        return convert_float2((uchar2)(b & 15, b >> 4));
    }
    return vload2(LANE(), (global const float *)row);
}

/* Token j of the run: its weights from lane j, times its row. */
#define TOKEN(j)                                                              \
    do {                                                                      \
        float2 r = v_pair(run + (size_t)(j) * row_bytes(dtype, D), dtype);    \
        for (int g = 0; g < G; g++)                                           \
            acc[g] = fma((float2)SHUFFLE(wl[g], (uint)(j)), r, acc[g]);       \
    } while (0)

/* Tokens [0, e) of rows v stored as dtype, in runs of 16 (e a multiple of
 * 16), weighted by w[token][g], into acc. */
static void block_values(global const uchar *v, int dtype, int e,
                         global const float *w, float2 *acc SCRATCH)
{
    uint lane = LANE();
    /* The sub-group's slice of the row (sub-group 0: offset 0). */
    global const uchar *rows = v + row_bytes(dtype, 2 * SG_ID());
    for (int c = 0; c + 16 <= e; c += 16) {
        global const uchar *run = rows + (size_t)c * row_bytes(dtype, D);
        float wl[G];
        for (int g = 0; g < G; g++)
            wl[g] = w[((uint)c + lane) * G + g];
        TOKEN(0);
        TOKEN(1);
        TOKEN(2);
        TOKEN(3);
        TOKEN(4);
        TOKEN(5);
        TOKEN(6);
        TOKEN(7);
        TOKEN(8);
        TOKEN(9);
        TOKEN(10);
        TOKEN(11);
        TOKEN(12);
        TOKEN(13);
        TOKEN(14);
        TOKEN(15);
    }
}

/* rows: [n][D] f32; codes: [n][D / 2] u4 (read only when sel != 0); w:
 * [n][G]; out: [G][D]; info[0]: the sub-group size the kernel ran with.
 * One work-group of 16. */
#ifndef EMULATE_SUBGROUP
__attribute__((intel_reqd_sub_group_size(16)))
#endif
__attribute__((reqd_work_group_size(16, 1, 1)))
kernel void shuffle_runs(global const uchar *rows, global const uchar *codes,
                         global const float *w, uint n, uint sel,
                         global float *out, global uint *info)
{
#ifdef EMULATE_SUBGROUP
    local float x[16];
#endif
    float2 acc[G];
    for (int g = 0; g < G; g++)
        acc[g] = 0.0f;
#ifdef ONE_CALL
    block_values(rows, F32, (int)n, w, acc PASS_SCRATCH);
#else
    if (sel == 0)
        block_values(rows, F32, (int)n, w, acc PASS_SCRATCH);
    else
        block_values(codes, U4, (int)n, w, acc PASS_SCRATCH);
#endif
    for (int g = 0; g < G; g++)
        vstore2(acc[g], 0, out + g * D + 2 * LANE());
    if (get_local_id(0) == 0)
#ifdef EMULATE_SUBGROUP
        info[0] = (uint)get_local_size(0);
#else
        info[0] = get_sub_group_size();
#endif
}
