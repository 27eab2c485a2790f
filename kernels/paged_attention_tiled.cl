/* SPDX-License-Identifier: MIT */
/*
 * Paged attention over a ragged mixed batch, GPU-shaped: the same
 * contract and arithmetic as pkv_paged_attention (paged_attention.cl, the
 * CPU-shaped kernel, one work-item per row and head), with the work of a
 * whole tile of rows in one work-group. The host picks one of the two per
 * device (src/opencl_features.c; PKV_OPENCL_PREFILL forces one).
 *
 * A tile is up to tile_rows consecutive query rows of one sequence; step
 * array PKV_STEP_TILES lists the first row of each (src/kv_step.h). One
 * work-group per (tile, kv head), local size tile_rows * group: work-item
 * (row i of the tile, query head g of the kv head's group). The KV the
 * tile's rows see goes through local memory a chunk of up to `chunk`
 * tokens of one block at a time: the work-group loads the chunk's K and V
 * rows once, as f32 (u8 dequantised), neighbouring work-items on
 * neighbouring 16-byte pieces of a row; then every work-item scores its
 * row against the chunk, rescales its online softmax once per chunk and
 * adds the chunk's V rows. Tokens outside a row's causal range, window or
 * context are never read by it; the work-group loads tokens from the
 * window start of its first row to its last row's token, all written.
 *
 * kv: local memory for 2 * chunk * d floats (K rows, then V rows); chunk
 * at most PKV_TILE_CHUNK_MAX.
 */

#define PKV_TILE_CHUNK_MAX 16

__kernel void pkv_paged_attention_tiled(
    __global const uchar *arena, __global const float *stages,
    __global const float *q, ulong q_off, __global float *out, ulong out_off,
    uint flags, __global const uint *step, __global const uint *tables,
    uint tile_rows, uint chunk, uint max_blocks, uint hq, uint hkv, uint d,
    uint bs, uint dtype, uint key_quant, uint value_quant, uint u4g,
    uint head_bytes,
    uint k_part_bytes, uint layer_block_bytes, uint stage_floats, uint layer,
    float scale, uint window, __local float4 *kv)
{
    uint tile = (uint)get_group_id(0), kvh = (uint)get_global_id(1);
    uint lid = (uint)get_local_id(0), lanes = (uint)get_local_size(0);
    uint group = hq / hkv, qh = kvh * group + lid % group;
    uint q_f16 = flags & 1u, out_f16 = (flags >> 1) & 1u;
    uint first = step[step[PKV_STEP_TILES] + tile];
    uint seq = step[step[PKV_STEP_ROW_SEQ] + first];
    __global const uint *qs = step + step[PKV_STEP_QUERY_START];
    uint q0 = qs[seq], nq = qs[seq + 1u] - q0;
    uint rows = min(tile_rows, qs[seq + 1u] - first);
    uint ctx = step[step[PKV_STEP_CONTEXT_LENS] + seq];
    __global const uint *table = tables + (ulong)seq * max_blocks;
    /* This work-item's row and token; the tile's first and last token. */
    uint r = first + min(lid / group, rows - 1u);
    int active = lid / group < rows;
    uint tok = ctx - nq + (r - q0);
    uint tile_first = ctx - nq + (first - q0);
    uint tile_last = tile_first + rows - 1u;
    uint lo = window > 0u && tok + 1u > window ? tok + 1u - window : 0u;
    uint tile_lo = window > 0u && tile_first + 1u > window
                       ? tile_first + 1u - window
                       : 0u;
    uint n4 = d / 4u;

    float4 qv[PKV_MAX_D4], acc[PKV_MAX_D4];
    pkv_query_row(qv, acc, q, q_off, q_f16, r, hq, qh, d);
    __global const float *tail = pkv_seq_tail(
        stages, step, seq, dtype, stage_floats, layer, hkv, kvh, bs, d);
    __local float4 *kt = kv, *vt = kv + chunk * n4;

    float sc[PKV_TILE_CHUNK_MAX];
    float m = -INFINITY, l = 0.0f;
    for (uint j = tile_lo / bs; j * bs <= tile_last; j++) {
        uint b0 = j * bs;
        uint n = ctx - b0 < bs ? ctx - b0 : bs;
        pkv_block_rows br = pkv_block_source(
            arena, table[j], kvh, b0 + bs >= ctx, tail, dtype, bs, d,
            head_bytes, k_part_bytes, layer_block_bytes);
        /* Chunks [c0, c0 + cn) of the block's tokens [t_lo, t_hi). */
        uint t_lo = tile_lo > b0 ? tile_lo - b0 : 0u;
        uint t_hi = min(n, tile_last + 1u - b0);
        for (uint c0 = t_lo; c0 < t_hi; c0 += chunk) {
            uint cn = min(chunk, t_hi - c0);
            barrier(CLK_LOCAL_MEM_FENCE); /* the last chunk is consumed */
            for (uint x = lid; x < cn * n4; x += lanes) {
                uint t = c0 + x / n4, i = x % n4;
                kt[x] = pkv_kv_row4(br.kp, br.kd, (int)key_quant, u4g, t,
                                    i, d, bs);
                vt[x] = pkv_kv_row4(br.vp, br.vd, (int)value_quant, u4g, t,
                                    i, d, bs);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            /* This row's tokens of the chunk. */
            uint a = max(c0, lo > b0 ? lo - b0 : 0u);
            uint e = min(c0 + cn, tok + 1u - min(tok + 1u, b0));
            if (!active || a >= e)
                continue;
            float mb = -INFINITY;
            for (uint t = a; t < e; t++) {
                float4 s4 = (float4)(0.0f);
                for (uint i = 0; i < n4; i++)
                    s4 += qv[i] * kt[(t - c0) * n4 + i];
                sc[t - c0] = ((s4.x + s4.z) + (s4.y + s4.w)) * scale;
                mb = sc[t - c0] > mb ? sc[t - c0] : mb;
            }
            pkv_rescale(mb, &m, &l, acc, n4);
            for (uint t = a; t < e; t++) {
                float p = exp(sc[t - c0] - m);
                l += p;
                for (uint i = 0; i < n4; i++)
                    acc[i] += p * vt[(t - c0) * n4 + i];
            }
        }
    }
    if (!active)
        return;
    /* Every row sees at least its own token, so l >= 1. */
    float inv = 1.0f / l;
    ulong orow = out_off + ((ulong)r * hq + qh) * d;
    for (uint i = 0; i < n4; i++)
        pkv_store4(acc[i] * inv, out, orow + 4u * i, out_f16);
}
