/* SPDX-License-Identifier: MIT */
/*
 * Split-K paged decode attention: what every decode variant shares. A
 * decode program is src/kv_layout.h, tensor_io.cl, this file, then one
 * variant: paged_decode.cl (CPU-shaped), decode_gpu.cl (the portable
 * GPU-shaped variant) or decode_intel.cl (Intel subgroups). The host picks
 * the variant per device (src/opencl/features.c).
 *
 * Build options (-D), all required unless marked optional:
 *   PKV_HEAD_DIM    head_dim, a multiple of 4
 *   PKV_BLOCK_SIZE  tokens per block
 *   PKV_GROUP       query heads per kv head (num_q_heads / num_kv_heads)
 *   PKV_KV_DTYPE    PKV_LAYOUT_F32 (0), _F16 (1), _U8 (2), _U4 (3) or
 *                   _U8K_U4V (4)
 *   PKV_KEY_QUANT, PKV_VALUE_QUANT
 *                   quantized only: PKV_LAYOUT_PER_CHANNEL (1) or
 *                   _PER_TOKEN (2)
 *   PKV_U4_GROUP    u4 parts: channels of a per-token group
 *   PKV_GROUP_SPLIT optional (1): work-groups that share the query heads
 *                   of a kv head, each taking G = PKV_GROUP /
 *                   PKV_GROUP_SPLIT of them (the GPU and INTEL variants,
 *                   where a lane keeps some floats a head: more than 8
 *                   heads spilled on Intel GPUs). Each reads the kv
 *                   head's bytes.
 *   PKV_DECODE_CONTIGUOUS optional, set by decode_contiguous.cl only.
 *   Each variant adds its own (see its file).
 *
 * Kernel 1, in each variant file: partial attention over one context
 * partition, one query row per sequence (all-decode steps), every query
 * head of a kv-head group sharing each KV read.
 *
 *   kernel void pkv_decode_partial(
 *     global const uchar *arena,   this layer's arena (kv_layout.h)
 *     global const float *stages,  quantized (u8, u4): the staging tails,
 *                                  laid out
 *                                  [stage][layer][kv head][K, V][token][ch]
 *                                  f32; f32/f16: unused (may be NULL)
 *     uint stage_floats,           quantized: floats of one tail (all layers)
 *     uint stage_layer_offset,     quantized: layer * num_kv_heads * 2 *
 *                                  block_size * head_dim
 *     global const uint *stage_ids,   quantized: [num_seqs] tail of each sequence
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
 *   NDRange: global (num_partitions * L, num_kv_heads * PKV_GROUP_SPLIT,
 *   num_seqs), local (L, 1, 1) or (1, num_kv_heads, 1): see the variant.
 *   With one partition the kernel writes normalised rows to out and
 *   leaves part_* alone (they may then be NULL); otherwise it writes
 *   part_* only.
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
 *   NDRange: global (head_dim / 4, num_q_heads, num_seqs), any local
 *   size: a work-item per float4 run of an output row, so that its state is
 *   one float4 (a whole row per work-item kept head_dim floats per lane in
 *   private memory on an Intel GPU).
 *
 * Math: f32 accumulation. The quantized block holding the context's last
 * token is read in f32 from the sequence's staging tail. Slots past the
 * context length and before the window are never read.
 *
 * Tolerance: the kernels sum in another order than the CPU backend and,
 * for u8 and u4, may fold the parameters instead of dequantising first.
 * Against a double-precision reference on the same stored KV (values and
 * queries in [-1, 1], contexts up to 4096) pkv-bench kernels measures max
 * |error| about 1e-7 (f32, f16, u4, u8k-u4v) and 2e-6 (u8); a test against
 * the CPU backend on such data can allow 1e-5 for f32/f16 and 1e-4 for
 * quantized caches, scaled by the largest |v| for larger values.
 */
#define D PKV_HEAD_DIM
#define BS PKV_BLOCK_SIZE
#ifndef PKV_GROUP_SPLIT
#define PKV_GROUP_SPLIT 1
#endif
#if PKV_GROUP % PKV_GROUP_SPLIT != 0
#error "PKV_GROUP_SPLIT must divide PKV_GROUP"
#endif
/* Query heads a work-group takes. */
#define G (PKV_GROUP / PKV_GROUP_SPLIT)

#define U4G PKV_U4_GROUP
/* The stored dtype of K parts and of V parts, and whether they are
 * quantized (a staging tail then holds the last block in f32). */
#define KD PKV_LAYOUT_KEY_DTYPE(PKV_KV_DTYPE)
#define VD PKV_LAYOUT_VALUE_DTYPE(PKV_KV_DTYPE)
#define QUANTIZED PKV_LAYOUT_QUANTIZED(PKV_KV_DTYPE)
#if QUANTIZED
#define KQ PKV_KEY_QUANT
#define VQ PKV_VALUE_QUANT
#else
#define KQ PKV_LAYOUT_PER_CHANNEL
#define VQ PKV_LAYOUT_PER_CHANNEL
#endif
/* How the K and V rows of a block that decode_block says is stored as dt
 * are stored: f32 for a staging tail, else KD and VD. */
#define K_OF(dt) ((dt) == PKV_LAYOUT_F32 ? PKV_LAYOUT_F32 : KD)
#define V_OF(dt) ((dt) == PKV_LAYOUT_F32 ? PKV_LAYOUT_F32 : VD)
#define K_PART_BYTES PKV_LAYOUT_PART_BYTES(KD, KQ, U4G, BS, D)
#define HEAD_BYTES PKV_LAYOUT_HEAD_BYTES(PKV_KV_DTYPE, KQ, VQ, U4G, BS, D)

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
 * range.y) of it (empty when range.y <= range.x), for the G query rows
 * from row0 (of all num_seqs * num_q_heads); and where that
 * sequence's blocks are: its block-table row and, quantized, the f32 rows of
 * kv head h in its staging tail. */
typedef struct decode_unit {
    uint part, num_parts, h, seq, ctx;
    uint2 range;
    size_t row0;
    global const uchar *arena;
    global const uint *tables;
    size_t table_row; /* the sequence's row of tables: seq * max_blocks */
    global const float *tail;
    uint num_kv_heads;
} decode_unit;

/* The unit of this work-group, from kernel 1's arguments. */
#define THIS_UNIT()                                                           \
    this_unit(arena, stages, stage_floats, stage_layer_offset, stage_ids,     \
              context_lens, block_tables, max_blocks_per_seq, num_kv_heads,   \
              sliding_window, partition_size)
static decode_unit this_unit(global const uchar *arena,
                             global const float *stages, uint stage_floats,
                             uint stage_layer_offset,
                             global const uint *stage_ids,
                             global const uint *context_lens,
                             global const uint *block_tables,
                             uint max_blocks_per_seq, uint num_kv_heads,
                             uint sliding_window, uint partition_size)
{
    decode_unit u;
    u.part = get_group_id(0);
    u.num_parts = get_num_groups(0);
    /* A group id where the work-group is 1 wide (the sequence, and in
     * the intel variant the kv head too): the same value as the global
     * id, but Intel's GPU compiler knows a group id is the same in every
     * lane of a subgroup; from global ids it computed every address of
     * the unit lane by lane. */
#ifdef PKV_INTEL_SUBGROUPS
    uint slot = get_group_id(1);
#else
    uint slot = get_global_id(1);
#endif
    /* Slot h * PKV_GROUP_SPLIT + i takes kv head h's query heads [i G,
     * (i + 1) G). */
    u.h = slot / PKV_GROUP_SPLIT;
    u.seq = get_group_id(2);
    u.row0 = ((size_t)u.seq * num_kv_heads * PKV_GROUP_SPLIT + slot) * G;
    u.ctx = context_lens[u.seq];
    u.range = part_range(u.ctx, u.part, sliding_window, partition_size);
    u.arena = arena;
    u.tables = block_tables;
    u.table_row = (size_t)u.seq * max_blocks_per_seq;
    u.num_kv_heads = num_kv_heads;
#if QUANTIZED
    u.tail = pkv_tail_rows(stages, stage_ids[u.seq], stage_floats,
                           stage_layer_offset, u.h, BS, D);
#else
    u.tail = stages;
#endif
    return u;
}

/* The K part of the unit's kv head in arena block `blk` (V follows at
 * K_PART_BYTES). */
static global const uchar *head_part(const decode_unit *u, size_t blk)
{
    return u->arena + (blk * u->num_kv_heads + u->h) * HEAD_BYTES;
}

/* The K part of the row's logical block j and its V part in *v, with
 * *dtype PKV_KV_DTYPE (K_OF and V_OF give each part's own) for the frozen
 * block in the arena or, for the quantized block that holds the context's
 * last token, PKV_LAYOUT_F32 and the rows of the staging tail (also when
 * this step froze it: see pkv_block_source). */
static global const uchar *decode_block(const decode_unit *u, uint j,
                                        int *dtype, global const uchar **v)
{
#if QUANTIZED
    if ((j + 1) * BS >= u->ctx) {
        *dtype = PKV_LAYOUT_F32;
        *v = (global const uchar *)(u->tail + BS * D);
        return (global const uchar *)u->tail;
    }
#endif
#ifdef PKV_DECODE_CONTIGUOUS
    size_t blk = u->table_row + j; /* pkv-bench's baseline */
#else
    size_t blk = u->tables[u->table_row + j];
#endif
    global const uchar *k = head_part(u, blk);
    *dtype = PKV_KV_DTYPE;
    *v = k + K_PART_BYTES;
    return k;
}

/* Where a work-group writes the result of query row `row` (of all
 * num_seqs * num_q_heads): normalised into out when the row has one
 * partition, else unnormalised into part_acc. */
typedef struct decode_dest {
    global float *p;
    ulong off;  /* element of channel 0 */
    float mul;  /* 1 / l, or 1 */
    uint f16;   /* p holds halves */
} decode_dest;

/* The destination of row `row`, whose partition ended with running max m
 * and denominator l; `writer` (one work-item of the work-group) stores m
 * and l for the reduction. */
static decode_dest decode_dest_of(const decode_unit *u, size_t row, float m,
                                  float l, int writer, global float *out,
                                  ulong out_off, uint flags,
                                  global float *part_acc,
                                  global float *part_ml)
{
    decode_dest d;
    if (u->num_parts == 1) {
        /* Partition 0 is never empty: l >= 1. */
        d.p = out;
        d.off = out_off + row * D;
        d.mul = 1.0f / l;
        d.f16 = OUT_F16(flags);
    } else {
        size_t r = row * u->num_parts + u->part;
        d.p = part_acc;
        d.off = r * D;
        d.mul = 1.0f;
        d.f16 = 0;
        if (writer) {
            part_ml[r * 2] = m;
            part_ml[r * 2 + 1] = l;
        }
    }
    return d;
}

/* Channel ch (store2: ch, ch + 1; store4: to ch + 3) of the row, scaled
 * by d->mul. */
static void decode_store1(const decode_dest *d, float x, uint ch)
{
    if (d->f16)
        vstore_half_rte(x * d->mul, 0, (global half *)d->p + d->off + ch);
    else
        d->p[d->off + ch] = x * d->mul;
}

static void decode_store2(const decode_dest *d, float2 x, uint ch)
{
    if (d->f16)
        vstore_half2_rte(x * d->mul, 0, (global half *)d->p + d->off + ch);
    else
        vstore2(x * d->mul, 0, d->p + d->off + ch);
}

static void decode_store4(const decode_dest *d, float4 x, uint ch)
{
    pkv_store4(x * d->mul, d->p, d->off + ch, d->f16);
}

kernel void pkv_decode_reduce(global const float *part_acc,
                              global const float *part_ml,
                              uint num_partitions, global float *out,
                              ulong out_off, uint flags)
{
    uint x = get_global_id(0);
    size_t row = (size_t)get_global_id(2) * get_global_size(1) +
                 get_global_id(1);
    global const float *ml = part_ml + row * num_partitions * 2;
    float m = -INFINITY;
    for (uint p = 0; p < num_partitions; p++)
        if (ml[p * 2 + 1] > 0.0f)
            m = fmax(m, ml[p * 2]);
    float4 o = 0.0f;
    float l = 0.0f;
    for (uint p = 0; p < num_partitions; p++) {
        /* An empty partition (l = 0) has m = -inf: skip, never 0 * NaN. */
        if (ml[p * 2 + 1] > 0.0f) {
            float w = exp(ml[p * 2] - m);
            l = fma(w, ml[p * 2 + 1], l);
            global const float *a = part_acc + (row * num_partitions + p) * D;
            o = fma((float4)w, vload4(x, a), o);
        }
    }
    pkv_store4(o / l, out, out_off + row * D + 4 * x, OUT_F16(flags));
}
