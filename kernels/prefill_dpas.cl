/* SPDX-License-Identifier: MIT */
/*
 * Paged attention over a ragged mixed batch on DG2's matrix engines (XMX):
 * the contract of pkv_paged_attention_tiled (paged_attention_tiled.cl),
 * with the score product Q x K^T and the value product P x V made by
 * intel_sub_group_f16_f16_matrix_mad_k16 (the DPAS instruction of
 * cl_intel_subgroup_matrix_multiply_accumulate): f16 operands, f32
 * accumulation, the online softmax in f32 as the tiled kernel keeps it.
 * Where the extension is absent (Intel's CPU runtime, in the test) the
 * builtin is dpas_emulation.cl's, which executes the same data flow.
 *
 * The program is src/kv_layout.h, src/kv_step.h, pkv_common.cl,
 * tensor_io.cl, paged_attention.cl (its helpers), dpas_emulation.cl, then
 * this file, built per geometry with -cl-std=CL2.0 and these -D options:
 *   PKV_HEAD_DIM    head_dim, a multiple of 16, at most 256
 *   PKV_BLOCK_SIZE  tokens per block
 *   PKV_GROUP       query heads per kv head
 *   PKV_KV_DTYPE    PKV_LAYOUT_F32 .. _U8K_U4V (any: rows are read by
 *                   pkv_kv_row4, dequantised, then rounded to f16)
 *   PKV_KEY_QUANT, PKV_VALUE_QUANT  the groupings (PKV_LAYOUT_PER_CHANNEL
 *                   for f32 and f16 caches)
 *   PKV_U4_GROUP    u4 parts: channels of a per-token group
 *
 * A tile is ROWS consecutive query rows of one sequence (step array
 * PKV_STEP_TILES built with tile_rows = ROWS; the last tile of a sequence
 * may hold fewer). One work-group per (tile, kv head): G sub-groups of 8
 * work-items, sub-group s for query head kvh * G + s. The work-group
 * stages CHUNK (16) tokens at a time in local memory as f16, K rows
 * token-major and V rows channel-major (token pairs adjacent: the VNNI
 * order the value product's B operand wants), tokens outside the tile's
 * range as zeros, so that no product ever meets an unwritten slot. Then
 * each sub-group:
 *   scores: for each 16 channels c, A = its ROWS query rows' channels
 *     (work-item i holds channels 2i, 2i + 1 of each row), B = 8 tokens'
 *     channels (work-item n holds token 2n of the chunk, then in a second
 *     product token 2n + 1): the result gives work-item i the scores of
 *     tokens 2i and 2i + 1 for every row, the pair the value product's A
 *     operand wants from it, so no shuffle is needed between the two;
 *   softmax: masks tokens outside each row's causal range and window,
 *     takes the chunk's row maxima across the sub-group (3 xor shuffles),
 *     rescales once per chunk, rounds the weights to f16 and sums the
 *     rounded weights (l is then the sum of what multiplies V);
 *   values: for each 8 channels, A = the rows' 16 weights, B = 16 tokens x
 *     8 channels of V: accumulator k of work-item n holds channel 8k + n
 *     of every row.
 * All work-items of a sub-group run every product (the builtin requires
 * it): the loops' bounds are the tile's, rows past the tile's end repeat
 * its last row and are not stored.
 *
 * ROWS is 4 at head_dim up to 64, else 2: the accumulators (head_dim *
 * ROWS / 8 floats a work-item) and the softmax's vectors of ROWS then fit
 * in DG2's 128 registers without a spill (4 at head_dim 128 spills 800
 * bytes with IGC 1.0.12504, 8 at 64 1088). The query operands wait in
 * local memory for the same reason. tests/check_dpas.sh checks the builds.
 */
#pragma OPENCL EXTENSION cl_khr_fp16 : enable

#define D PKV_HEAD_DIM
#define BS PKV_BLOCK_SIZE
#define G PKV_GROUP
#define CHUNK 16
#define D2 (D / 2) /* ints (f16 pairs) of a K row */

#if D <= 64
#define ROWS 4
#define RAMP (uint4)(0, 1, 2, 3)
#else
#define ROWS 2
#define RAMP (uint2)(0, 1)
#endif
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define floatR CAT(float, ROWS)
#define intR CAT(int, ROWS)
#define uintR CAT(uint, ROWS)
#define halfR CAT(half, ROWS)
#define ushortR CAT(ushort, ROWS)
#define convert_halfR_rte CAT(CAT(convert_half, ROWS), _rte)
#define convert_floatR CAT(convert_float, ROWS)
#define convert_intR CAT(convert_int, ROWS)
#define as_ushortR CAT(as_ushort, ROWS)
#define vloadR CAT(vload, ROWS)

/* The groupings (ignored by f32 and f16 parts: the host passes
 * PKV_LAYOUT_PER_CHANNEL for them) and the part sizes. */
#define KQ PKV_KEY_QUANT
#define VQ PKV_VALUE_QUANT
#define K_PART_BYTES                                                        \
    PKV_LAYOUT_PART_BYTES(PKV_LAYOUT_KEY_DTYPE(PKV_KV_DTYPE), KQ,           \
                          PKV_U4_GROUP, BS, D)
#define HEAD_BYTES \
    PKV_LAYOUT_HEAD_BYTES(PKV_KV_DTYPE, KQ, VQ, PKV_U4_GROUP, BS, D)

/* The f16 pair (x, y) as the builtins take it: x in the low 16 bits (the
 * lower address, as as_int(half2) packs it). */
static inline intR pkv_pack(halfR x, halfR y)
{
    return convert_intR(as_ushortR(x)) | (convert_intR(as_ushortR(y)) << 16);
}

/* Component r of x (r < ROWS): a run-time index, without an array. */
static inline float pkv_row(floatR x, uint r)
{
#if ROWS == 4
    return r < 2u ? (r == 0u ? x.s0 : x.s1) : (r == 2u ? x.s2 : x.s3);
#else
    return r == 0u ? x.s0 : x.s1;
#endif
}

/* The largest, and the sum, of each component across the sub-group. */
static inline floatR pkv_sg_max(floatR x)
{
    x = fmax(x, intel_sub_group_shuffle_xor(x, 4u));
    x = fmax(x, intel_sub_group_shuffle_xor(x, 2u));
    return fmax(x, intel_sub_group_shuffle_xor(x, 1u));
}

static inline floatR pkv_sg_sum(floatR x)
{
    x += intel_sub_group_shuffle_xor(x, 4u);
    x += intel_sub_group_shuffle_xor(x, 2u);
    return x + intel_sub_group_shuffle_xor(x, 1u);
}

__attribute__((intel_reqd_sub_group_size(8)))
__attribute__((reqd_work_group_size(8 * G, 1, 1)))
__kernel void pkv_prefill_dpas(
    __global const uchar *arena, __global const float *stages,
    __global const float *q, ulong q_off, __global float *out, ulong out_off,
    uint flags, __global const uint *step, __global const uint *tables,
    uint max_blocks, uint hkv, uint layer_block_bytes, uint stage_floats,
    uint layer, float scale, uint window)
{
    /* K rows [token][channel], V rows [channel][token], f16. */
    __local uint kt[CHUNK * D2], vt[D * CHUNK / 2];
    __local int qt[G * D / 2 * ROWS];
    uint tile = (uint)get_group_id(0), kvh = (uint)get_group_id(1);
    uint lid = (uint)get_local_id(0);
    uint lane = lid % 8u, qh = kvh * G + lid / 8u, hq = hkv * G;
    uint q_f16 = flags & 1u, out_f16 = (flags >> 1) & 1u;
    uint first = step[step[PKV_STEP_TILES] + tile];
    uint seq = step[step[PKV_STEP_ROW_SEQ] + first];
    __global const uint *qs = step + step[PKV_STEP_QUERY_START];
    uint q0 = qs[seq], nq = qs[seq + 1u] - q0;
    uint rows = min((uint)ROWS, qs[seq + 1u] - first);
    uint ctx = step[step[PKV_STEP_CONTEXT_LENS] + seq];
    __global const uint *table = tables + (ulong)seq * max_blocks;
    uint tile_first = ctx - nq + (first - q0);
    uint tile_last = tile_first + rows - 1u;
    uint tile_lo = window > 0u && tile_first + 1u > window
                       ? tile_first + 1u - window
                       : 0u;
    /* Each row's token and window start, component m for row m (rows
     * past the tile's end repeat its last). */
    uintR tok = (uintR)(tile_first) + min(RAMP, (uintR)(rows - 1u));
    uintR lo = window > 0u ? select((uintR)(0u), tok + 1u - window,
                                    tok + 1u > (uintR)(window))
                           : (uintR)(0u);
    __global const float *tail =
        pkv_seq_tail(stages, step, seq, PKV_KV_DTYPE, stage_floats, layer,
                     hkv, kvh, BS, D);

    /* The A operands of the score product, f16 in local memory (in
     * registers they and the accumulators would not fit in 128 of
     * them): this work-item's operand c is vloadR(c * 8 + lane, qa),
     * channels 16c + 2 lane and + 1 of each row. */
    __local int *qa = qt + (lid / 8u) * (D / 2u) * ROWS;
    for (uint c = 0; c < D / 16u; c++) {
        for (uint r = 0; r < ROWS; r++) {
            ulong at = q_off + ((ulong)(first + min(r, rows - 1u)) * hq + qh) *
                                   D + 16u * c + 2u * lane;
            float2 x = q_f16 ? vload_half2(0, (__global const half *)q + at)
                             : vload2(0, q + at);
            qa[(c * 8u + lane) * ROWS + r] = as_int(convert_half2_rte(x));
        }
    }

    floatR acc[D / 8];
    for (uint k = 0; k < D / 8u; k++)
        acc[k] = (floatR)(0.0f);
    floatR m = (floatR)(-INFINITY), l = (floatR)(0.0f);
    for (uint c0 = tile_lo; c0 <= tile_last; c0 += CHUNK) {
        barrier(CLK_LOCAL_MEM_FENCE); /* the last chunk is consumed */
        __local half *kh = (__local half *)kt, *vh = (__local half *)vt;
        for (uint x = lid; x < CHUNK * D / 4u; x += 8u * G) {
            uint t = x / (D / 4u), i = x % (D / 4u), tk = c0 + t;
            float4 kx = (float4)(0.0f), vx = (float4)(0.0f);
            if (tk <= tile_last) {
                uint j = tk / BS;
                pkv_block_rows br = pkv_block_source(
                    arena, table[j], kvh, j * BS + BS >= ctx, tail,
                    PKV_KV_DTYPE, BS, D, HEAD_BYTES, K_PART_BYTES,
                    layer_block_bytes);
                kx = pkv_kv_row4(br.kp, br.kd, KQ, PKV_U4_GROUP, tk % BS, i,
                                 D, BS);
                vx = pkv_kv_row4(br.vp, br.vd, VQ, PKV_U4_GROUP, tk % BS, i,
                                 D, BS);
            }
            vstore_half4_rte(kx, 0, kh + t * D + 4u * i);
            vstore_half_rte(vx.x, (4u * i) * CHUNK + t, vh);
            vstore_half_rte(vx.y, (4u * i + 1u) * CHUNK + t, vh);
            vstore_half_rte(vx.z, (4u * i + 2u) * CHUNK + t, vh);
            vstore_half_rte(vx.w, (4u * i + 3u) * CHUNK + t, vh);
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* Scores of tokens c0 + 2 lane (se) and c0 + 2 lane + 1 (so). */
        floatR se = (floatR)(0.0f), so = (floatR)(0.0f);
        for (uint c = 0; c < D / 16u; c++) {
            int8 ke = as_int8(vload8(0, kt + (2u * lane) * D2 + 8u * c));
            int8 ko = as_int8(vload8(0, kt + (2u * lane + 1u) * D2 + 8u * c));
            intR a = vloadR(c * 8u + lane, qa);
            se = intel_sub_group_f16_f16_matrix_mad_k16(a, ke, se);
            so = intel_sub_group_f16_f16_matrix_mad_k16(a, ko, so);
        }
        uintR te = (uintR)(c0 + 2u * lane), to = te + 1u;
        se = select((floatR)(-INFINITY), se * scale, te >= lo && te <= tok);
        so = select((floatR)(-INFINITY), so * scale, to >= lo && to <= tok);
        /* A row with no token in the chunk keeps m = -inf: subtract 0
         * then, so that its weights are exp(-inf) = 0, not NaN. */
        floatR mn = fmax(m, pkv_sg_max(fmax(se, so)));
        floatR mu = select(mn, (floatR)(0.0f), mn == (floatR)(-INFINITY));
        floatR keep = exp(m - mu);
        m = mn;
        halfR pe = convert_halfR_rte(exp(se - mu));
        halfR po = convert_halfR_rte(exp(so - mu));
        l = l * keep + convert_floatR(pe) + convert_floatR(po);
        intR pa = pkv_pack(pe, po);
        for (uint k = 0; k < D / 8u; k++) {
            int8 vb = as_int8(vload8(0, vt + (8u * k + lane) * (CHUNK / 2u)));
            acc[k] = intel_sub_group_f16_f16_matrix_mad_k16(pa, vb,
                                                           acc[k] * keep);
        }
    }

    /* Every row sees at least its own token, so l >= 1: the token at the
     * row's max weighs exp(0) = 1, exact in f16. */
    floatR inv = 1.0f / pkv_sg_sum(l);
    for (uint r = 0; r < ROWS && r < rows; r++) {
        ulong at = out_off + ((ulong)(first + r) * hq + qh) * D + lane;
        for (uint k = 0; k < D / 8u; k++) {
            float o = pkv_row(acc[k] * inv, r);
            if (out_f16)
                vstore_half_rte(o, at + 8u * k, (__global half *)out);
            else
                out[at + 8u * k] = o;
        }
    }
}
