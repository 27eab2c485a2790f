/* SPDX-License-Identifier: MIT */
/*
 * Split-K paged decode attention: what every decode variant shares. A
 * decode program is src/kv_layout.h, tensor_io.cl, this file, then one
 * variant: paged_decode.cl (CPU-shaped), decode_gpu.cl (the portable
 * GPU-shaped variant) or decode_intel.cl (Intel subgroups). The host picks
 * the variant per device (src/opencl_features.c).
 *
 * Build options (-D), all required unless marked optional:
 *   PKV_HEAD_DIM    head_dim, a multiple of 4
 *   PKV_BLOCK_SIZE  tokens per block
 *   PKV_GROUP       query heads per kv head (num_q_heads / num_kv_heads)
 *   PKV_KV_DTYPE    PKV_LAYOUT_F32 (0), _F16 (1) or _U8 (2)
 *   PKV_KEY_QUANT, PKV_VALUE_QUANT
 *                   u8 only: PKV_LAYOUT_PER_CHANNEL (1) or _PER_TOKEN (2)
 *   PKV_DECODE_CONTIGUOUS optional, set by decode_contiguous.cl only.
 *   Each variant adds its own (see its file).
 *
 * Kernel 1, in each variant file: partial attention over one context
 * partition, one query row per sequence (all-decode steps), every query
 * head of a kv-head group sharing each KV read.
 *
 *   kernel void pkv_decode_partial(
 *     global const uchar *arena,   this layer's arena (kv_layout.h)
 *     global const float *stages,  u8: the staging tails, laid out
 *                                  [stage][layer][kv head][K, V][token][ch]
 *                                  f32; f32/f16: unused (may be NULL)
 *     uint stage_floats,           u8: floats of one tail (all layers)
 *     uint stage_layer_offset,     u8: layer * num_kv_heads * 2 *
 *                                  block_size * head_dim
 *     global const uint *stage_ids,   u8: [num_seqs] tail of each sequence
 *     global const float *q,       [num_seqs][num_q_heads][head_dim] from
 *     ulong q_off,                 element q_off: row i is sequence i's
 *                                  query
 *     global const uint *context_lens,  [num_seqs], each >= 1
 *     global const uint *block_tables,  [num_seqs][max_blocks_per_seq]
 *     uint max_blocks_per_seq,
 *     uint num_kv_heads,
 *     float scale,                 softmax scale (host resolves 0 to
 *                                  1/sqrt(head_dim))
 *     uint sliding_window,         0: none; w: the query (token ctx - 1)
 *                                  sees tokens [ctx - w, ctx - 1]
 *     uint partition_size,         tokens, a multiple of block_size, > 0
 *     global float *out,           [num_seqs][num_q_heads][head_dim] from
 *     ulong out_off,               element out_off: written when
 *                                  num_partitions == 1
 *     uint flags,                  bit 0: q is f16, bit 1: out is f16
 *                                  (else f32)
 *     global float *part_acc,      [num_seqs][num_q_heads][num_partitions]
 *                                  [head_dim], unnormalised sums
 *     global float *part_ml)       [num_seqs][num_q_heads][num_partitions]
 *                                  [2]: running max, denominator
 *
 *   NDRange: global (num_partitions * L, num_kv_heads, num_seqs), local
 *   (L, 1, 1) or (1, num_kv_heads, 1): see the variant. With one partition
 *   the kernel writes normalised rows to out and leaves part_* alone (they
 *   may then be NULL); otherwise it writes part_* only.
 *
 *   Partitioning: the row sees [lo, ctx), lo = the window start (or 0).
 *   Partition p covers tokens [s + p * P, s + (p + 1) * P) of it, with
 *   s = lo rounded down to a block and P = partition_size: partitions are
 *   block-aligned and partition 0 is never empty. num_partitions and P come
 *   from pkv__decode_plan (src/decode_plan.h); sequences shorter than the
 *   longest leave their trailing partitions empty (m = -inf, l = 0).
 *
 * Kernel 2, below: combine the partitions.
 *
 *   kernel void pkv_decode_reduce(
 *     global const float *part_acc, global const float *part_ml,
 *     uint num_partitions, global float *out, ulong out_off, uint flags)
 *
 *   NDRange: global (num_q_heads, num_seqs), any local size.
 *
 * Math: f32 accumulation. The U8 tail block that is not full is read in
 * f32 from the sequence's staging tail. Slots past the context length and
 * before the window are never read.
 *
 * Tolerance: the kernels sum in another order than the CPU backend and,
 * for u8, may fold the parameters instead of dequantising first. Against a
 * double-precision reference on the same stored KV (values and queries in
 * [-1, 1], contexts up to 4096) pkv-bench kernels measures max |error|
 * about 1e-7 (f32, f16) and 2e-6 (u8); a test against the CPU backend on
 * such data can allow 1e-5 for f32/f16 and 1e-4 for u8, scaled by the
 * largest |v| for larger values.
 */
#ifndef PKV_KV_LAYOUT_H
#include "kv_layout.h"
#endif

#define D PKV_HEAD_DIM
#define BS PKV_BLOCK_SIZE
#define G PKV_GROUP

#if PKV_KV_DTYPE == PKV_LAYOUT_U8
#define KQ PKV_KEY_QUANT
#define VQ PKV_VALUE_QUANT
#else
#define KQ PKV_LAYOUT_PER_CHANNEL
#define VQ PKV_LAYOUT_PER_CHANNEL
#endif
#define K_PART_BYTES PKV_LAYOUT_PART_BYTES(PKV_KV_DTYPE, KQ, BS, D)
#define HEAD_BYTES PKV_LAYOUT_HEAD_BYTES(PKV_KV_DTYPE, KQ, VQ, BS, D)

/* Kernel 1's parameters, as documented above: every variant's
 * pkv_decode_partial takes exactly these. */
#define PKV_DECODE_PARTIAL_ARGS                                               \
    global const uchar *arena, global const float *stages,                    \
        uint stage_floats, uint stage_layer_offset,                           \
        global const uint *stage_ids, global const float *q, ulong q_off,     \
        global const uint *context_lens, global const uint *block_tables,     \
        uint max_blocks_per_seq, uint num_kv_heads, float scale,              \
        uint sliding_window, uint partition_size, global float *out,          \
        ulong out_off, uint flags, global float *part_acc,                    \
        global float *part_ml

#define Q_F16(flags) ((flags)&1u)
#define OUT_F16(flags) (((flags) >> 1) & 1u)

/* Tokens [x, y) of the row's context that partition part covers. */
static uint2 part_range(uint ctx, uint part, uint sliding_window,
                        uint partition_size)
{
    uint lo = sliding_window > 0 && ctx > sliding_window
                  ? ctx - sliding_window
                  : 0;
    uint start = lo / BS * BS + part * partition_size;
    return (uint2)(max(start, lo), min(start + partition_size, ctx));
}

/* What one work-group of pkv_decode_partial computes: partition part of
 * num_parts, kv head h, sequence seq (context ctx), tokens [range.x,
 * range.y) of it (empty when range.y <= range.x). */
typedef struct decode_unit {
    uint part, num_parts, h, seq, ctx;
    uint2 range;
} decode_unit;

static decode_unit this_unit(global const uint *context_lens,
                             uint sliding_window, uint partition_size)
{
    decode_unit u;
    u.part = get_group_id(0);
    u.num_parts = get_num_groups(0);
    u.h = get_global_id(1);
    u.seq = get_global_id(2);
    u.ctx = context_lens[u.seq];
    u.range = part_range(u.ctx, u.part, sliding_window, partition_size);
    return u;
}

/* The K part of kv head h of the sequence's logical block j (V follows at
 * K_PART_BYTES). */
static global const uchar *head_part(global const uchar *arena,
                                     global const uint *block_tables,
                                     uint max_blocks_per_seq,
                                     uint num_kv_heads, uint seq, uint j,
                                     uint h)
{
#ifdef PKV_DECODE_CONTIGUOUS
    size_t blk = (size_t)seq * max_blocks_per_seq + j;
#else
    size_t blk = block_tables[(size_t)seq * max_blocks_per_seq + j];
#endif
    return arena + (blk * num_kv_heads + h) * HEAD_BYTES;
}

/* The f32 K rows of kv head h in a staging tail (V rows follow). */
static global const float *tail_rows(global const float *stages, uint stage,
                                     uint stage_floats,
                                     uint stage_layer_offset, uint h)
{
    return stages + (size_t)stage * stage_floats + stage_layer_offset +
           (size_t)h * 2 * BS * D;
}

kernel void pkv_decode_reduce(global const float *part_acc,
                              global const float *part_ml,
                              uint num_partitions, global float *out,
                              ulong out_off, uint flags)
{
    size_t row = (size_t)get_global_id(1) * get_global_size(0) +
                 get_global_id(0);
    global const float *ml = part_ml + row * num_partitions * 2;
    float m = -INFINITY;
    for (uint p = 0; p < num_partitions; p++)
        if (ml[p * 2 + 1] > 0.0f)
            m = fmax(m, ml[p * 2]);
    float4 o[D / 4];
    for (int x = 0; x < D / 4; x++)
        o[x] = 0.0f;
    float l = 0.0f;
    for (uint p = 0; p < num_partitions; p++) {
        /* An empty partition (l = 0) has m = -inf: skip, never 0 * NaN. */
        if (ml[p * 2 + 1] > 0.0f) {
            float w = exp(ml[p * 2] - m);
            l = fma(w, ml[p * 2 + 1], l);
            global const float *a = part_acc + (row * num_partitions + p) * D;
            for (int x = 0; x < D / 4; x++)
                o[x] = fma((float4)w, vload4(x, a), o[x]);
        }
    }
    float inv = 1.0f / l;
    for (int x = 0; x < D / 4; x++)
        pkv_store4(o[x] * inv, out, out_off + row * D + 4 * x,
                   OUT_F16(flags));
}
