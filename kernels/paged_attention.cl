/* SPDX-License-Identifier: MIT */
/*
 * Paged attention over a ragged mixed batch: prefill chunks (causal within
 * the step) and decode rows together, grouped-query heads, sliding window,
 * f32 accumulation, online softmax updated once per block.
 *
 * One work-item per (query row, query head): it walks the blocks its row
 * can see, computes all the visible scores of a block, rescales once, then
 * adds the block's V rows. Every read of a work-item is a contiguous run:
 * its query row, then each K row and V row of head_dim channels, as 4-wide
 * vector loads; the work-items of one work-group are consecutive rows of
 * the same head, mostly of the same sequence, so they read the same blocks
 * at the same time. The arithmetic is that of the CPU reference
 * (backend_cpu.c): the dot product in four lanes summed as (0 + 2) + (1 +
 * 3), the same rescaling, 1 / l at the end.
 *
 * Masking is by index: a token beyond a row's causal end, before its
 * window, or beyond its sequence's context is never read, so slots that
 * were never written cannot leak NaN into a sum.
 */

#define PKV_MAX_D4 (PKV_LAYOUT_MAX_HEAD_DIM / 4)

/* Row r's query for head qh (into qv), and a zeroed accumulator. */
static inline void pkv_query_row(float4 *qv, float4 *acc,
                                 __global const float *q, ulong q_off,
                                 uint q_f16, uint r, uint hq, uint qh, uint d)
{
    ulong qrow = q_off + ((ulong)r * hq + qh) * d;
    for (uint i = 0; i < d / 4u; i++) {
        qv[i] = pkv_load4(q, qrow + 4u * i, q_f16);
        acc[i] = (float4)(0.0f);
    }
}

/* The f32 K rows of kv head kvh in sequence seq's staging tail (its V rows
 * follow at bs * d); quantized caches only, else stages itself (never
 * read). */
static inline __global const float *
pkv_seq_tail(__global const float *stages, __global const uint *step,
             uint seq, uint dtype, uint stage_floats, uint layer, uint hkv,
             uint kvh, uint bs, uint d)
{
    if (!PKV_LAYOUT_QUANTIZED(dtype))
        return stages;
    return pkv_tail_rows(stages, step[step[PKV_STEP_STAGES] + seq],
                         stage_floats, (ulong)layer * hkv * 2u * bs * d, kvh,
                         bs, d);
}

/* Where kv head kvh of a block keeps its K and V rows: the block's parts,
 * or for the quantized block that holds the context's last token (`last`) the
 * f32 rows of the staging tail, also when this step filled and froze it:
 * a step's rows read the block they write as plain decoding's one row
 * does (src/kv_step.h), and the frozen codes from the next step on. */
typedef struct pkv_block_rows {
    __global const uchar *kp, *vp;
    int kd, vd; /* how kp and vp store their rows (PKV_LAYOUT_*) */
} pkv_block_rows;

static inline pkv_block_rows
pkv_block_source(__global const uchar *arena, uint block, uint kvh, int last,
                 __global const float *tail, uint dtype, uint bs, uint d,
                 uint head_bytes, uint k_part_bytes, uint layer_block_bytes)
{
    pkv_block_rows b;
    b.kp = arena + (ulong)block * layer_block_bytes + (ulong)kvh * head_bytes;
    b.vp = b.kp + k_part_bytes;
    b.kd = PKV_LAYOUT_KEY_DTYPE((int)dtype);
    b.vd = PKV_LAYOUT_VALUE_DTYPE((int)dtype);
    if (PKV_LAYOUT_QUANTIZED(dtype) && last) {
        b.kd = PKV_LAYOUT_F32;
        b.vd = PKV_LAYOUT_F32;
        b.kp = (__global const uchar *)tail;
        b.vp = (__global const uchar *)(tail + (ulong)bs * d);
    }
    return b;
}

/* The online softmax meets a block (or chunk) whose largest score is mb:
 * rescale l and acc to the new max once. */
static inline void pkv_rescale(float mb, float *m, float *l, float4 *acc,
                               uint n4)
{
    if (mb > *m) {
        if (*m != -INFINITY) {
            float keep = exp(*m - mb);
            *l *= keep;
            for (uint i = 0; i < n4; i++)
                acc[i] *= keep;
        }
        *m = mb;
    }
}

__kernel void pkv_paged_attention(
    __global const uchar *arena, __global const float *stages,
    __global const float *q, ulong q_off, __global float *out, ulong out_off,
    uint flags, __global const uint *step, __global const uint *tables,
    uint num_tokens, uint max_blocks, uint hq, uint hkv, uint d, uint bs,
    uint dtype, uint key_quant, uint value_quant, uint u4g, uint head_bytes,
    uint k_part_bytes, uint layer_block_bytes, uint stage_floats, uint layer,
    float scale, uint window)
{
    uint r = (uint)get_global_id(0), qh = (uint)get_global_id(1);
    if (r >= num_tokens || qh >= hq)
        return;
    uint q_f16 = flags & 1u, out_f16 = (flags >> 1) & 1u;
    uint seq = step[step[PKV_STEP_ROW_SEQ] + r];
    __global const uint *qs = step + step[PKV_STEP_QUERY_START];
    uint q0 = qs[seq], nq = qs[seq + 1u] - q0;
    uint ctx = step[step[PKV_STEP_CONTEXT_LENS] + seq];
    __global const uint *table = tables + (ulong)seq * max_blocks;
    uint tok = ctx - nq + (r - q0);
    uint lo = window > 0u && tok + 1u > window ? tok + 1u - window : 0u;
    uint kvh = qh / (hq / hkv);
    uint n4 = d / 4u;

    float4 qv[PKV_MAX_D4], acc[PKV_MAX_D4];
    pkv_query_row(qv, acc, q, q_off, q_f16, r, hq, qh, d);
    __global const float *tail = pkv_seq_tail(
        stages, step, seq, dtype, stage_floats, layer, hkv, kvh, bs, d);

    float sc[PKV_LAYOUT_MAX_BLOCK_SIZE];
    float m = -INFINITY, l = 0.0f;
    for (uint j = lo / bs; j * bs <= tok; j++) {
        uint b0 = j * bs;
        uint n = ctx - b0 < bs ? ctx - b0 : bs;
        uint j0 = lo > b0 ? lo - b0 : 0u;
        uint j1 = tok + 1u - b0 < n ? tok + 1u - b0 : n;
        pkv_block_rows br = pkv_block_source(
            arena, table[j], kvh, b0 + bs >= ctx, tail, dtype, bs, d,
            head_bytes, k_part_bytes, layer_block_bytes);
        float mb = -INFINITY;
        for (uint t = j0; t < j1; t++) {
            float4 s4 = (float4)(0.0f);
            for (uint i = 0; i < n4; i++)
                s4 += qv[i] * pkv_kv_row4(br.kp, br.kd, (int)key_quant, u4g,
                                          t, i, d, bs);
            sc[t] = ((s4.x + s4.z) + (s4.y + s4.w)) * scale;
            mb = sc[t] > mb ? sc[t] : mb;
        }
        pkv_rescale(mb, &m, &l, acc, n4);
        for (uint t = j0; t < j1; t++) {
            float p = exp(sc[t] - m);
            l += p;
            for (uint i = 0; i < n4; i++)
                acc[i] += p * pkv_kv_row4(br.vp, br.vd, (int)value_quant,
                                          u4g, t, i, d, bs);
        }
    }
    /* Every row sees at least its own token, so l >= 1. */
    float inv = 1.0f / l;
    ulong orow = out_off + ((ulong)r * hq + qh) * d;
    for (uint i = 0; i < n4; i++)
        pkv_store4(acc[i] * inv, out, orow + 4u * i, out_f16);
}
