/* SPDX-License-Identifier: MIT */
/*
 * Paged attention over a ragged mixed batch on an Intel GPU: the contract
 * of pkv_paged_attention_tiled (paged_attention_tiled.cl: tiles of rows of
 * one sequence, causal range, sliding window, staging tails, every KV
 * format), built per geometry with Intel subgroups so that what a lane
 * keeps fits the registers of a GPU thread at SIMD16. The tiled kernel
 * keeps a row's query and sums, head_dim floats each, per work-item in
 * arrays indexed at run time: private memory on an Intel GPU, 32 KB a
 * thread on Gen12 (docs/performance.md, "Intel GPU code").
 *
 * A program is src/kv_layout.h, src/kv_step.h, tensor_io.cl and this
 * file, built with -cl-std=CL2.0, the -D options of decode_common.cl
 * (PKV_HEAD_DIM, a multiple of 4 up to 512, PKV_BLOCK_SIZE, PKV_GROUP,
 * PKV_KV_DTYPE, PKV_KEY_QUANT, PKV_VALUE_QUANT, PKV_U4_GROUP),
 * PKV_PREFILL_ROWS, the rows of a tile (the host's tile_rows: 8 / group,
 * 1 past group 8), and PKV_PREFILL_CHUNK, the tokens staged at a time
 * (16, 8 or 4; at most block_size where that is 8 or more: what local
 * memory holds; pkv__prefill_intel_shape, src/opencl/features.c).
 *
 *   kernel void pkv_prefill_intel(
 *     global const uchar *arena, global const float *stages,
 *     global const float *q, ulong q_off, global float *out, ulong out_off,
 *     uint flags, global const uint *step, global const uint *tables,
 *     uint max_blocks, uint num_kv_heads, uint stage_floats, uint layer,
 *     float scale, uint window)
 *   The arguments of pkv_paged_attention_tiled that the geometry does not
 *   fix, with the same meanings. NDRange: global (num_tiles * WG,
 *   num_kv_heads * SLICES), local (WG, 1), WG = DP / 2, SLICES =
 *   ceil(group / 8).
 *
 * A work-group per (tile, kv head, head slice): NSG = DP / 32 subgroups
 * of 16 lanes, DP the head_dim rounded up to a multiple of 32, and the
 * tile's NV = 8 queries, so that every K and V element read serves 8
 * queries. Up to group 8, query j = i * group + g (row i of the tile,
 * head g of the kv head's group; rows past the tile's repeat its last);
 * past it a tile is one row and a slice 8 of the group's heads, query j
 * head 8 * slice + j (the last slice repeats the group's last head where
 * the group ends, and writes nothing for the repeats). The channels
 * past head_dim (DP > head_dim) are zero in the queries, so whatever
 * finite K the chunk buffer holds there adds nothing to a score, and are
 * never written out. The KV the tile sees goes through local memory a
 * chunk of TC tokens at a time (of one block where blocks hold 8 tokens
 * or more; across blocks below that, each token's block and source
 * looked up on its own), dequantised to f32 once by the work-group
 * (every dtype and quantization read by tensor_io.cl's pkv_kv_row4; no
 * conversion left in the hot loops). Per chunk:
 *
 *   1. K in, laid out [channel][token] (DP channels).
 *   2. Scores, a lane per token, subgroup s over channels [32 s, 32 s +
 *      32) of every query: a lane's 8 partial dot products as a float8,
 *      the 8 query channels of a channel one local read every lane shares
 *      (a scalar operand of each mad). Partials to local memory.
 *   3. Online softmax, queries shared out among the subgroups: the sum of
 *      the partials, the row's causal and window mask, the chunk's max by
 *      a subgroup reduction, the weights and the factor that rescales the
 *      running sums. Then V in, laid out [token][channel], over K.
 *   4. Values, lane l of subgroup s over channels 32 s + 2 l, + 1: the
 *      lane's sums (two float8, kept in local memory between chunks)
 *      rescaled once, then each token's two channels times its 8 weights,
 *      one local read every lane shares.
 *
 * A lane keeps 8 scores in pass 2 and 16 sums in pass 4, within the 128
 * registers of a thread at SIMD16 on every target tests/check_isa.sh
 * builds (no spill, no private memory). Local memory: 4 (2 DP NV + TC DP
 * + NSG 16 NV + TC NV + 3 NV) bytes, 57,696 at head_dim 512 with TC 8
 * (TC 16 would need 74,336: Gen12 and Xe-HPG give a work-group 64 KB).
 *
 * Math: f32, the query scaled before the dot products, as the decode
 * kernels do; tolerance as decode_common.cl says.
 */
#pragma OPENCL EXTENSION cl_intel_subgroups : enable

#define D PKV_HEAD_DIM
#define BS PKV_BLOCK_SIZE
#define G PKV_GROUP
/* Queries of a tile: rows x group, padded to NV with repeats of its last
 * row. 8: with 16 the kernel spilled (docs/performance.md, "Intel GPU
 * code"); the host's PKV__PREFILL_INTEL_QUERIES. */
#define NV 8
/* Head slices of a kv head's group and the heads of a slice. */
#if G > NV
#define SLICES ((G + NV - 1) / NV)
#define HS NV
#else
#define SLICES 1
#define HS G
#endif
#if PKV_PREFILL_ROWS * HS > NV
#error "PKV_PREFILL_ROWS * min(PKV_GROUP, 8) must be at most 8"
#endif
#define DP ((D + 31) / 32 * 32) /* head_dim, padded */
#define NSG (DP / 32)
#define WG (16 * NSG)
#define RUNS (D / 4) /* runs of 4 channels a row */
#ifndef PKV_PREFILL_CHUNK
#error "PKV_PREFILL_CHUNK (the tokens staged at a time) must be defined"
#endif
#define TC PKV_PREFILL_CHUNK
/* The value pass steps tokens in turns of 4; the score pass has a lane a
 * token; a chunk of one block lies in it. */
#if TC % 4 != 0 || TC > 16 || (BS >= 8 && TC > BS)
#error "PKV_PREFILL_CHUNK must be 4, 8 or 16, and at most a block of 8 or more"
#endif
#if D % 4 != 0 || D > 512
#error "head_dim must be a multiple of 4 up to 512"
#endif

/* The stored dtype of K and V parts, whether blocks are quantized when
 * full, and the parts' quantization groups (the host passes per-channel
 * for f32 and f16, where they size nothing). */
#define KD PKV_LAYOUT_KEY_DTYPE(PKV_KV_DTYPE)
#define VD PKV_LAYOUT_VALUE_DTYPE(PKV_KV_DTYPE)
#define QUANTIZED PKV_LAYOUT_QUANTIZED(PKV_KV_DTYPE)
#define KQ PKV_KEY_QUANT
#define VQ PKV_VALUE_QUANT
#define K_PART_BYTES PKV_LAYOUT_PART_BYTES(KD, KQ, PKV_U4_GROUP, BS, D)
#define HEAD_BYTES                                                            \
    PKV_LAYOUT_HEAD_BYTES(PKV_KV_DTYPE, KQ, VQ, PKV_U4_GROUP, BS, D)

/* Channel run x (channels 4x .. 4x + 3) of row `row` of a block part
 * stored as pd with quantization grp (PKV_LAYOUT_F32: the staging tail's
 * rows), dequantised into token t of the chunk buffer kv: K laid out
 * [channel][token], V [token][channel] (is_k), DP channels. Only runs of
 * the row are read (x < D / 4): nothing past a row in global memory. */
static void run_in(local float *kv, global const uchar *part, int pd,
                   int grp, uint row, uint t, uint x, int is_k)
{
    float4 r = pd == PKV_LAYOUT_F32
                   ? vload4(x, (global const float *)part + (size_t)row * D)
                   : pkv_kv_row4(part, pd, grp, PKV_U4_GROUP, row, x, D, BS);
    if (is_k) {
        kv[(4u * x) * TC + t] = r.x;
        kv[(4u * x + 1u) * TC + t] = r.y;
        kv[(4u * x + 2u) * TC + t] = r.z;
        kv[(4u * x + 3u) * TC + t] = r.w;
    } else {
        vstore4(r, t * (DP / 4) + x, kv);
    }
}

/* The (token t, run x) pairs of a chunk of n tokens that work-item lid
 * loads: neighbouring work-items read neighbouring 16 bytes of a row, and
 * per-channel parameters are those of one run. Where RUNS divides the
 * work-group (head_dim a multiple of 32: 2 tokens a turn), x is fixed
 * and t steps by WG / RUNS; else the pairs are numbered and dealt out WG
 * at a time. One token a turn: unrolled, every turn's addresses were
 * hoisted out of the chunk loop and spilled. n by broadcast: a bound
 * whose range the compiler does not know (n <= TC), so that it keeps the
 * loop instead of unrolling it. */
#if WG % RUNS == 0
#define FOR_RUNS(n, t, x)                                                    \
    for (uint t = lid / RUNS, x = lid % RUNS, n_ = sub_group_broadcast(n, 0); \
         t < n_; t += WG / RUNS)
#else
#define FOR_RUNS(n, t, x)                                                    \
    for (uint i_ = lid, t = i_ / RUNS, x = i_ % RUNS,                        \
              e_ = sub_group_broadcast(n, 0) * RUNS;                         \
         i_ < e_; i_ += WG, t = i_ / RUNS, x = i_ % RUNS)
#endif

#if BS >= 8
/* Tokens [c0, c0 + cn) of a block part (pd, grp) into kv. The caller
 * passes a constant pd, so each call is compiled for one storage (a
 * format known at run time kept both paths' addresses live). Slots past
 * cn keep what they held: finite values, which passes 2 and 4 meet only
 * with weight 0 or in lanes they drop. */
static void chunk_in(local float *kv, global const uchar *part, int pd,
                     int grp, uint c0, uint cn, uint lid, int is_k)
{
#pragma unroll 1
    FOR_RUNS(cn, t, x)
    run_in(kv, part, pd, grp, c0 + t, t, x, is_k);
}
#else
/* Tokens [c0, c0 + cn) of the context into kv, across blocks of fewer
 * than 8 tokens: each token's block from the table, from the staging
 * tail where it is the quantized block holding the context's last token
 * (pkv_block_source in paged_attention.cl says why). kvh: the kv head,
 * of num_kv_heads in a block; tail: its staging rows (K, then V after BS
 * rows). */
static void chunk_in(local float *kv, global const uchar *arena,
                     global const uint *table, uint num_kv_heads, uint kvh,
                     global const float *tail, uint ctx, uint c0, uint cn,
                     uint lid, int is_k)
{
#pragma unroll 1
    FOR_RUNS(cn, t, x)
    {
        uint tok = c0 + t, b = tok / BS, b0 = b * BS;
        global const uchar *kp =
            arena + ((size_t)table[b] * num_kv_heads + kvh) * HEAD_BYTES;
        if (QUANTIZED && b0 + BS >= ctx)
            run_in(kv, (global const uchar *)(tail + (is_k ? 0 : BS * D)),
                   PKV_LAYOUT_F32, 0, tok - b0, t, x, is_k);
        else if (is_k)
            run_in(kv, kp, KD, KQ, tok - b0, t, x, 1);
        else
            run_in(kv, kp + K_PART_BYTES, VD, VQ, tok - b0, t, x, 0);
    }
}
#endif

/* The first token a row whose token is tok sees. */
static uint window_start(uint tok, uint window)
{
    return window > 0u && tok + 1u > window ? tok + 1u - window : 0u;
}

/* A lane's values of the tile's NV queries, as vectors: IGC left a
 * private array of them in private memory once it held 8 or more. */
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define floatV CAT(float, NV)
#define vloadV CAT(vload, NV)
#define vstoreV CAT(vstore, NV)

__attribute__((intel_reqd_sub_group_size(16)))
__attribute__((reqd_work_group_size(WG, 1, 1)))
kernel void pkv_prefill_intel(global const uchar *arena,
                              global const float *stages,
                              global const float *q, ulong q_off,
                              global float *out, ulong out_off, uint flags,
                              global const uint *step,
                              global const uint *tables, uint max_blocks,
                              uint num_kv_heads, uint stage_floats,
                              uint layer, float scale, uint window)
{
    local float qs[DP * NV];         /* scaled queries, [channel][query] */
    local float accs[DP * NV];       /* sums of weighted values, the
                                        same layout */
    local float kv[TC * DP];         /* the chunk's K, then its V */
    local float part[NSG * 16 * NV]; /* [subgroup][token][query] */
    local float w[TC * NV];          /* weights, [token][query] */
    local float stat[3 * NV];        /* max, sum, rescale: [3][query] */
    /* sg by broadcast: IGC then knows it is uniform, and the loads
     * every lane makes from one address are one load of the subgroup. */
    uint lane = get_sub_group_local_id();
    uint sg = sub_group_broadcast(get_sub_group_id(), 0);
    uint lid = get_local_id(0);
    uint tile = get_group_id(0);
#if SLICES > 1
    /* The slice's heads: h0 .. h0 + nh - 1 of the group. */
    uint kvh = get_group_id(1) / SLICES;
    uint h0 = get_group_id(1) % SLICES * NV, nh = min((uint)NV, G - h0);
#define QHEAD(j) (h0 + min((j), nh - 1u))
#else
    uint kvh = get_group_id(1);
#define QHEAD(j) ((j) % G)
#endif
    uint hq = num_kv_heads * G;
    uint first = step[step[PKV_STEP_TILES] + tile];
    uint seq = step[step[PKV_STEP_ROW_SEQ] + first];
    global const uint *qst = step + step[PKV_STEP_QUERY_START];
    uint q0 = qst[seq], nq = qst[seq + 1u] - q0;
    uint rows = min((uint)PKV_PREFILL_ROWS, qst[seq + 1u] - first);
    uint ctx = step[step[PKV_STEP_CONTEXT_LENS] + seq];
    global const uint *table = tables + (size_t)seq * max_blocks;
    /* The tile's first and last token, the window start of its first. */
    uint tile_first = ctx - nq + (first - q0);
    uint tile_last = tile_first + rows - 1u;
    uint tile_lo = window_start(tile_first, window);

    /* 0. The queries (rows past the tile's, and the padding, repeat its
     * last row; past group 8 heads past the group its last head; channels
     * past head_dim are 0), and each query's softmax state. */
#pragma unroll 1
    for (uint x = lid; x < NV * DP; x += WG) {
        uint j = x / DP, c = x % DP;
        uint r = first + min(j / G, rows - 1u);
        size_t at = q_off + ((size_t)r * hq + kvh * G + QHEAD(j)) * D + c;
        float qc = 0.0f;
        if (c < D)
            qc = (flags & 1u) ? vload_half(0, (global const half *)q + at)
                              : q[at];
        qs[c * NV + j] = qc * scale;
    }
    for (uint j = lid; j < NV; j += WG) {
        stat[j] = -INFINITY;
        stat[NV + j] = 0.0f;
    }
#pragma unroll 1
    for (uint x = lid; x < DP * NV; x += WG)
        accs[x] = 0.0f;
    /* Finite from the start: a chunk of fewer than TC tokens leaves the
     * rest as they were (chunk_in), and the channels past head_dim only
     * ever hold the chunk's finite values. */
#pragma unroll 1
    for (uint x = lid; x < TC * DP; x += WG)
        kv[x] = 0.0f;
    global const float *tail = stages;
    if (QUANTIZED)
        tail = pkv_tail_rows(stages, step[step[PKV_STEP_STAGES] + seq],
                             stage_floats,
                             (size_t)layer * num_kv_heads * 2u * BS * D, kvh,
                             BS, D);

    uint ch = 32u * sg + 2u * lane; /* the lane's channels in pass 4 */
    /* Chunks of up to TC tokens (of one block where blocks hold 8 or
     * more), from the window start of the tile's first row to its last
     * row's token. One flat loop, not one over blocks and one over a
     * block's chunks: a block's addresses were hoisted out of the inner
     * loop and held through every pass. */
    uint cn;
    for (uint c0 = tile_lo; c0 <= tile_last; c0 += cn) {
#if BS < 8
        /* 1. K in, across blocks. */
        cn = min((uint)TC, tile_last + 1u - c0);
        barrier(CLK_LOCAL_MEM_FENCE); /* pass 4 is done with kv */
        chunk_in(kv, arena, table, num_kv_heads, kvh, tail, ctx, c0, cn,
                 lid, 1);
        barrier(CLK_LOCAL_MEM_FENCE);
#else
        uint b = c0 / BS, b0 = b * BS;
        cn = min(min((uint)TC, b0 + BS - c0), tile_last + 1u - c0);
        /* The quantized block holding the context's last token is read
         * from the staging tail (pkv_block_source in paged_attention.cl
         * says why). */
        int from_tail = QUANTIZED && b0 + BS >= ctx;
        global const uchar *kp =
            arena + ((size_t)table[b] * num_kv_heads + kvh) * HEAD_BYTES;
        global const uchar *vp = kp + K_PART_BYTES;
        if (from_tail) {
            kp = (global const uchar *)tail;
            vp = (global const uchar *)(tail + BS * D);
        }
        /* 1. K in. */
        barrier(CLK_LOCAL_MEM_FENCE); /* pass 4 is done with kv */
        if (from_tail)
            chunk_in(kv, kp, PKV_LAYOUT_F32, 0, c0 - b0, cn, lid, 1);
        else
            chunk_in(kv, kp, KD, KQ, c0 - b0, cn, lid, 1);
        barrier(CLK_LOCAL_MEM_FENCE);
#endif

        /* 2. Partial scores. Hot loop "score": 8 channels a turn,
         * each a K element per lane (its token) times the NV query
         * channels, which every lane reads from one address. */
        floatV s = 0.0f;
        local const float *kc = kv + lane % TC;
#pragma unroll 1
        for (uint c = 32u * sg; c < 32u * sg + 32u; c += 8u)
#pragma unroll
            for (uint cc = 0; cc < 8u; cc++)
                s = fma(vloadV(0, qs + (c + cc) * NV),
                        (floatV)kc[(c + cc) * TC], s);
        vstoreV(s, sg * 16u + lane, part);
        barrier(CLK_LOCAL_MEM_FENCE);

        /* 3. Online softmax of each query over the chunk, then V
         * in. */
#pragma unroll 1
        for (uint j = sg; j < NV; j += NSG) {
            uint tok = tile_first + min(j / G, rows - 1u);
            uint t = c0 + lane;
            float sc = 0.0f;
            /* Past 8 subgroups (head_dim above 256) in turns of 4: the
             * 14 or 16 loads at once spilled on dg2-g10. */
#if NSG > 8
#pragma unroll 4
#endif
            for (uint p = 0; p < NSG; p++)
                sc += part[(p * 16u + lane) * NV + j];
            int seen = lane < cn && t >= window_start(tok, window) &&
                       t <= tok;
            sc = seen ? sc : -INFINITY;
            float m = stat[j];
            float mn = fmax(m, sub_group_reduce_max(sc));
            /* No token of the row yet (mn = -inf): nothing changes. */
            float pw = mn == -INFINITY ? 0.0f : exp(sc - mn);
            float keep = mn == -INFINITY ? 1.0f : exp(m - mn);
            float l = fma(stat[NV + j], keep, sub_group_reduce_add(pw));
            if (lane < TC)
                w[lane * NV + j] = pw;
            if (lane == 0) {
                stat[j] = mn;
                stat[NV + j] = l;
                stat[2 * NV + j] = keep;
            }
        }
#if BS < 8
        chunk_in(kv, arena, table, num_kv_heads, kvh, tail, ctx, c0, cn,
                 lid, 0);
#else
        if (from_tail)
            chunk_in(kv, vp, PKV_LAYOUT_F32, 0, c0 - b0, cn, lid, 0);
        else
            chunk_in(kv, vp, VD, VQ, c0 - b0, cn, lid, 0);
#endif
        barrier(CLK_LOCAL_MEM_FENCE);

        /* 4. Values. The lane's sums of its two channels, a
         * component a query, live in registers for this pass only:
         * held through the tile they spilled in the other passes.
         * Hot loop "value": 4 tokens a turn, each the lane's two
         * channels times the token's NV weights, which every lane
         * reads from one address. */
        floatV keep = vloadV(0, stat + 2 * NV);
        floatV acc0 = vloadV(ch, accs) * keep;
        floatV acc1 = vloadV(ch + 1u, accs) * keep;
        /* The chunk's tokens in turns of 4 (past cn: weight 0; TC is a
         * multiple of 4). A bound known only at run time also
         * keeps the compiler from unrolling the loop, which spilled at
         * TC 8. */
#pragma unroll 1
        for (uint t = 0; t < cn; t += 4u)
#pragma unroll
            for (uint u = 0; u < 4u; u++) {
                float2 v = vload2(0, kv + (t + u) * DP + ch);
                floatV p = vloadV(0, w + (t + u) * NV);
                acc0 = fma(p, (floatV)v.x, acc0);
                acc1 = fma(p, (floatV)v.y, acc1);
            }
        vstoreV(acc0, ch, accs);
        vstoreV(acc1, ch + 1u, accs);
    }

    /* Out, a work-item a channel of a query (head_dim channels; past
     * group 8 the slice's heads only): every row sees at least its own
     * token, so l >= 1. */
    barrier(CLK_LOCAL_MEM_FENCE);
#if SLICES > 1
    uint nout = nh * D;
#else
    uint nout = rows * G * D;
#endif
#pragma unroll 1
    for (uint x = lid; x < nout; x += WG) {
        uint j = x / D, c = x % D;
        size_t at = out_off +
                    ((size_t)(first + j / G) * hq + kvh * G + QHEAD(j)) * D +
                    c;
        float o = accs[c * NV + j] * (1.0f / stat[NV + j]);
        if (flags & 2u)
            vstore_half_rte(o, 0, (global half *)out + at);
        else
            out[at] = o;
    }
}
