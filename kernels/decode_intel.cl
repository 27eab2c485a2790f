/* SPDX-License-Identifier: MIT */
/*
 * The Intel subgroup variant of pkv_decode_partial (decode_common.cl has
 * the contract, the shared helpers and the reduce kernel). Needs
 * cl_intel_subgroups, cl_intel_subgroups_short and cl_intel_subgroups_char
 * and head_dim a multiple of 32; built with -cl-std=CL2.0 -DPKV_INTEL_SUBGROUPS and
 *   PKV_INTEL_PAIRS      channel pairs a lane owns in the value pass: 1 or
 *                        2, dividing head_dim / 32
 *   PKV_INTEL_PARTITION  the longest partition_size the host passes
 * (the host derives both in pkv__decode_setup_make, src/opencl_features.c).
 *
 * A work-group of NSG subgroups of 16 lanes per (partition, kv head,
 * sequence), every query head of the kv-head group in it, so each KV byte
 * is read once. It is shaped so that what a lane keeps fits the 128
 * registers of a GPU thread at SIMD16 (2 registers a float), instead of
 * one subgroup holding every channel of every head, which spilled
 * kilobytes per thread (docs/performance.md, "Intel GPU code"):
 *
 *   0. The scaled query rows go to local memory.
 *   1. Scores, a lane per token: subgroups take turns over chunks of TC
 *      tokens (TC = min(block_size, 16): a chunk lies in one block). Lane t
 *      reads 16 channels of its token's K row at a time and adds, for each
 *      head, the 16 products with the query channels, which every lane
 *      takes from one register of the subgroup by broadcast. No reduction
 *      across lanes: a lane ends the row holding its token's score of
 *      every head. Scores go to local memory.
 *   2. Softmax over the partition, heads shared out among the subgroups:
 *      max, p = exp(s - max), the sum; p replaces the score.
 *   3. Values, lanes over channels: subgroup s owns channels
 *      [s DSUB, (s + 1) DSUB), DSUB = 32 PKV_INTEL_PAIRS, lane l the pairs
 *      (2u, 2u + 1), u = s DSUB / 2 + l + 16 i, i < PKV_INTEL_PAIRS (u4
 *      with 2 pairs: u = s DSUB / 2 + 2 l + i; u8 with 1 pair: the
 *      channels s DSUB + l and that + 16): a row slice is one subgroup
 *      block read (u8: of ushorts, or uchars with 1 pair; f16: of
 *      uints). In runs of 16 tokens each token's weights reach the lanes
 *      by broadcast from a register that holds 16 tokens' weights.
 *
 * A lane keeps G scores and G query channels in pass 1 and 2 G
 * PKV_INTEL_PAIRS sums in pass 3: the host picks PKV_INTEL_PAIRS (and so
 * NSG = head_dim / DSUB) to keep that within registers.
 *
 * Quantized blocks (u8 and u4 parts: KD, VD): per-channel keys fold the
 * block's scale into the query channels and add q . lo once per chunk.
 * Per-token keys with one group a row (u8, or u4 with U4G = head_dim)
 * scale each score and add lo times the query's sum; u4 keys with several
 * groups a row do that per group, at the group's last run of 8 channels
 * (a run lies in one group: U4G is a multiple of 8), with the query's
 * per-group sums in local memory. u8 per-token values fold their scale
 * into the weight and their lo into a per-head sum (pass 2), u4 ones so
 * in each run of 16 tokens where the subgroup's slice lies in one group
 * (V_RUN_FLOATS) and else are dequantised per row (a lane's channels lie
 * in one group, so that is one lo and one scale a token); per-channel
 * values of either dtype are dequantised per row with the lane's pairs'
 * parameters. A lane's u4 pairs are one byte each: 2 pairs are one
 * subgroup block read of ushorts, 1 pair one of uchars. The block that is
 * not frozen is read in f32 from the staging tail.
 */
#pragma OPENCL EXTENSION cl_intel_subgroups : enable
#pragma OPENCL EXTENSION cl_intel_subgroups_short : enable
#pragma OPENCL EXTENSION cl_intel_subgroups_char : enable

#define NP PKV_INTEL_PAIRS
#define DSUB (32 * NP)
#define NSG (D / DSUB)
#define WG (16 * NSG)
#define TC (BS < 16 ? BS : 16)
#define PMAX PKV_INTEL_PARTITION
/* Runs of 16 channels a turn of the score loop (chunk_scores). */
#define K_TURN (G >= 8 ? 2 : 1)
#if D % DSUB != 0
#error "PKV_INTEL_PAIRS must divide head_dim / 32"
#endif
/* Channels of a per-token key group, and whether a key row has several
 * (u4 with U4G < head_dim): then each group is folded on its own. */
#define KW PKV_LAYOUT_Q_WIDTH(KD, U4G, D)
#define K_GROUPS (QUANTIZED && KQ == PKV_LAYOUT_PER_TOKEN && KW < D)
/* Per-token groups of a u4 value row. */
#define VNG (D / U4G)
/* u4 values with 2 pairs a lane: lane l owns pairs 2 l, 2 l + 1 of its
 * subgroup's slice (one ushort of codes), else pairs l + 16 i. */
#define V_ADJACENT (VD == PKV_LAYOUT_U4 && NP == 2)
/* u8 values with one pair a lane: lane l's pair holds channels l and
 * l + 16 of its subgroup's slice, the bytes that one subgroup block read
 * of uchars gives it, each converted where it lies (read as the ushort of
 * two adjacent channels, the high byte took a shift first: 7% of a
 * token's cycles at GQA 8; with 2 pairs a lane the ushorts convert
 * without, and a uchar read spilled on dg2-g10). The staging tail's f32
 * rows are read alike. */
#define V_STRIDED (VD == PKV_LAYOUT_U8 && NP == 1)
/* u4 per-token values whose groups hold a half of the slice (U4G a
 * multiple of DSUB / 2: lanes 0-7 own the first half, 8-15 the second):
 * a run of 16 tokens loads their lo and scale once, lane l those of token
 * c + l in both halves' groups, and each token takes them by broadcast as
 * it takes its weights. Otherwise each row loads those of its lane. */
#define V_RUN_PARAMS                                      \
    (VD == PKV_LAYOUT_U4 && VQ == PKV_LAYOUT_PER_TOKEN && \
     U4G % (DSUB / 2) == 0)
/* V_RUN_PARAMS with one pair a lane and the slice in one group: every
 * lane's channels share a token's lo and scale, so a run folds them in
 * once, as pass 2 does for u8 per-token values: each of its 16 tokens'
 * scale into the lanes' weights, its lo times the weight into a per-head
 * sum (run_lo), and the tokens' codes go into the sums as they are (two
 * fmas a token dequantised them). */
#define V_RUN_FLOATS (V_RUN_PARAMS && NP == 1 && U4G % DSUB == 0)
/* Whether a run of a block stored as dtype is folded so. */
#define RUN_FOLDED(dtype) (V_RUN_FLOATS && (dtype) == PKV_LAYOUT_U4)

#if NP == 1
#define block_read_us(p) intel_sub_group_block_read_us(p)
#define block_read_ui(p) intel_sub_group_block_read(p)
#define ushortP ushort
#define uintP uint
#define EL(v, i) (v)
#elif NP == 2
#define block_read_us(p) intel_sub_group_block_read_us2(p)
#define block_read_ui(p) intel_sub_group_block_read2(p)
#define ushortP ushort2
#define uintP uint2
#define EL(v, i) ((v)[i])
#else
#error "PKV_INTEL_PAIRS must be 1 or 2"
#endif

/* Bytes of n channels of a row stored as dtype. */
static size_t row_bytes(int dtype, size_t n)
{
    return dtype == PKV_LAYOUT_U4 ? n / 2
           : dtype == PKV_LAYOUT_U8 ? n
           : dtype == PKV_LAYOUT_F16 ? 2 * n
                                     : 4 * n;
}

static int is_quantized(int dtype)
{
    return dtype == PKV_LAYOUT_U8 || dtype == PKV_LAYOUT_U4;
}

/* Channels [8 x, 8 x + 8) of a K row stored as dtype, as floats. Rows
 * and these runs are 4-byte aligned at least (kv_layout.h: parts are
 * 16-byte aligned and head_dim is a multiple of 32), so each is one
 * aligned vector load (u4: one uint, channel c in bits 4c..4c+3). Eight,
 * not sixteen: sixteen f32 channels of the u8 tail took 32 registers and
 * made the kernel spill. */
static float8 k_run(global const uchar *row, int dtype, int x)
{
    if (dtype == PKV_LAYOUT_U4) {
        uint c = ((global const uint *)row)[x];
        /* The even channels are the low nibbles of the four bytes, the
         * odd ones the high: two masks and a shift, then each byte
         * converts where it lies (a shift and a mask a channel took twice
         * the instructions). */
        float4 lo = convert_float4(as_uchar4(c & 0x0f0f0f0fu));
        float4 hi = convert_float4(as_uchar4(c >> 4 & 0x0f0f0f0fu));
        return (float8)(lo.s0, hi.s0, lo.s1, hi.s1, lo.s2, hi.s2, lo.s3,
                        hi.s3);
    }
    if (dtype == PKV_LAYOUT_U8)
        return convert_float8(as_uchar8(((global const uint2 *)row)[x]));
    if (dtype == PKV_LAYOUT_F16)
        return vload_half8(x, (global const half *)row);
    return ((global const float8 *)row)[x];
}

/* Pass 1, channels [16 x, 16 x + 16) of the lane's K row (stored as
 * dtype; per-channel parameters lo and sc): adds their products with the
 * G query rows to s (K_GROUPS: to gs, folded into s at a group's end),
 * and per-channel keys q . lo to qlo. chunk_scores says the rest. */
static void score_x(int x, global const uchar *row, int dtype, uint slot,
                    global const half *lo, global const half *sc,
                    local const float *qs, local const float *qg,
                    float *s, float *qlo, float *gs)
{
    uint lane = get_sub_group_local_id();
    int quant = is_quantized(dtype);
    /* Lane l holds channel 16 x + l of each head. */
    float qx[G];
    for (int g = 0; g < G; g++)
        qx[g] = qs[(16 * x + lane) * G + g];
    if (KQ == PKV_LAYOUT_PER_CHANNEL && quant) {
        /* Subgroup block reads: one address for the subgroup, where a
         * lane's own half took three vector instructions a read. */
        ushort lb = intel_sub_group_block_read_us(
            (global const ushort *)lo + 16 * x);
        ushort sb = intel_sub_group_block_read_us(
            (global const ushort *)sc + 16 * x);
        float lx = vload_half(0, (const private half *)&lb);
        float sx = vload_half(0, (const private half *)&sb);
        for (int g = 0; g < G; g++) {
            qlo[g] = fma(qx[g], lx, qlo[g]);
            qx[g] *= sx;
        }
    }
    for (int half_run = 0; half_run < 2; half_run++) {
        int r = 2 * x + half_run;
        float8 kx = k_run(row, dtype, r);
        if (K_GROUPS && quant) {
            for (int c = 0; c < 8; c++)
                for (int g = 0; g < G; g++)
                    gs[g] = fma(intel_sub_group_shuffle(
                                    qx[g], (uint)(8 * half_run + c)),
                                kx[c], gs[g]);
            if ((r + 1) % (KW / 8) == 0) {
                int grp = r / (KW / 8);
                uint pi = slot * (D / KW) + (uint)grp;
                float lt = vload_half(pi, lo), st = vload_half(pi, sc);
                for (int g = 0; g < G; g++) {
                    s[g] = fma(st, gs[g], fma(lt, qg[grp * G + g], s[g]));
                    gs[g] = 0.0f;
                }
            }
        } else {
            for (int c = 0; c < 8; c++) {
                float kc = kx[c];
                for (int g = 0; g < G; g++)
                    s[g] = fma(intel_sub_group_shuffle(
                                   qx[g], (uint)(8 * half_run + c)),
                               kc, s[g]);
            }
        }
    }
}

/* Pass 1 for one chunk: the scores s[g] of the lane's token (slot `slot`
 * of the block whose K part is k, stored as dtype) against the G query
 * rows in local memory, laid out [channel][head]; qsum: per-token keys
 * with one group a row, each head's sum of query channels; qg: K_GROUPS,
 * the sums per group, [group][head]. A lane without a token of its own
 * reads the row of the chunk's first token instead and drops its scores:
 * a branch around the read cost more than the read. */
static void chunk_scores(global const uchar *k, int dtype, uint slot,
                         local const float *qs, local const float *qg,
                         const float *qsum, float *s)
{
    int quant = is_quantized(dtype);
    global const half *lo =
        (global const half *)(k + PKV_LAYOUT_Q_LO_OFFSET(KD, BS, D));
    global const half *sc = (global const half *)(
        k + PKV_LAYOUT_Q_SCALE_OFFSET(KD, KQ, U4G, BS, D));
    global const uchar *row = k + slot * row_bytes(dtype, D);
    float qlo[G]; /* per-channel keys: q . lo so far */
    float gs[G];  /* K_GROUPS: the current group's sum of q . code */
    for (int g = 0; g < G; g++) {
        s[g] = 0.0f;
        qlo[g] = 0.0f;
        gs[g] = 0.0f;
    }
    /* GQA 8 and more: two runs of 16 channels a turn (head_dim / 16 is
     * even), whose loop control and flag set-up, about a tenth of a
     * one-run turn's cycles at GQA 8, then come once for both. With fewer
     * heads that saved under 1% and made dg2-g10 spill (GQA 4). */
#pragma unroll 1
    for (int x = 0; x < D / 16; x += K_TURN) {
        score_x(x, row, dtype, slot, lo, sc, qs, qg, s, qlo, gs);
        if (K_TURN == 2)
            score_x(x + 1, row, dtype, slot, lo, sc, qs, qg, s, qlo, gs);
    }
    if (KQ == PKV_LAYOUT_PER_CHANNEL && quant)
        for (int g = 0; g < G; g++)
            s[g] += sub_group_reduce_add(qlo[g]);
    if (KQ == PKV_LAYOUT_PER_TOKEN && quant && !K_GROUPS) {
        float lt = vload_half(slot, lo), st = vload_half(slot, sc);
        for (int g = 0; g < G; g++)
            s[g] = fma(st, s[g], lt * qsum[g]);
    }
}

/* The slice pair (0 .. DSUB / 2 - 1) that the lane owns as its pair i
 * (not V_STRIDED). */
static uint slice_pair(int i)
{
    uint lane = get_sub_group_local_id();
    return V_ADJACENT ? 2 * lane + (uint)i : lane + 16 * (uint)i;
}

/* The channel of the subgroup's slice (0 .. DSUB - 1) that element e (0
 * or 1) of the lane's pair i holds. */
static uint slice_channel(int i, int e)
{
    uint lane = get_sub_group_local_id();
    return V_STRIDED ? 16 * (uint)e + lane : 2 * slice_pair(i) + (uint)e;
}

/* The f16 parameters (array a: lo or scale, channel c0 the slice's first)
 * of the lane's pair i, as floats. */
static float2 pair_params(global const half *a, uint c0, int i)
{
    if (V_STRIDED)
        return (float2)(vload_half(c0 + slice_channel(i, 0), a),
                        vload_half(c0 + slice_channel(i, 1), a));
    return vload_half2(c0 / 2 + slice_pair(i), a);
}

/* The lane's channel pairs of a value row slice stored as dtype (f32: the
 * staging tail's rows when the values are quantized). */
static void v_pairs(global const uchar *row, int dtype, float2 *out)
{
    if (dtype == PKV_LAYOUT_U4) {
        /* A pair is one byte, the even channel in its low nibble. */
        if (V_ADJACENT) {
            uchar2 b = as_uchar2(
                intel_sub_group_block_read_us((const global ushort *)row));
            out[0] = convert_float2((uchar2)(b.x & 15, b.x >> 4));
            out[NP - 1] = convert_float2((uchar2)(b.y & 15, b.y >> 4));
        } else {
            /* Lane l's byte l: a subgroup block read (one address for
             * the subgroup; a lane's own byte took a vector of addresses
             * a token), widened at once: as a uchar each nibble took two
             * byte moves on dg2-g10. */
            uint b = intel_sub_group_block_read_uc((const global uchar *)row);
            out[0] = convert_float2((uint2)(b & 15, b >> 4));
        }
    } else if (dtype == PKV_LAYOUT_U8 && V_STRIDED) {
        out[0] = convert_float2(
            intel_sub_group_block_read_uc2((const global uchar *)row));
    } else if (dtype == PKV_LAYOUT_U8) {
        ushortP c = block_read_us((const global ushort *)row);
        for (int i = 0; i < NP; i++)
            out[i] = convert_float2(as_uchar2(EL(c, i)));
    } else if (dtype == PKV_LAYOUT_F16) {
        uintP c = block_read_ui((const global uint *)row);
        for (int i = 0; i < NP; i++) {
            uint bits = EL(c, i);
            out[i] = vload_half2(0, (const private half *)&bits);
        }
    } else if (V_STRIDED) {
        out[0] = as_float2(
            intel_sub_group_block_read2((const global uint *)row));
    } else {
        for (int i = 0; i < NP; i++)
            out[i] = vload2(slice_pair(i), (global const float *)row);
    }
}

/* Pass 3, token j of the rows of a V slice stored as dtype: add its
 * value pairs, weighted by p[g], to acc. Per-channel quantized values are
 * dequantised with the pairs' vlo, vsc; u4 per-token ones with tp, the
 * lo and scale of token j in the lane's group, unless folded (the run
 * folded them into p and run_lo). */
static void token_values(global const uchar *rows, int dtype, int j,
                         const float *p, const float2 *vlo,
                         const float2 *vsc, float2 tp, int folded,
                         float2 *acc)
{
    float2 r[NP];
    v_pairs(rows + (size_t)j * row_bytes(dtype, D), dtype, r);
    if (VQ == PKV_LAYOUT_PER_CHANNEL && is_quantized(dtype))
        for (int i = 0; i < NP; i++)
            r[i] = fma(vsc[i], r[i], vlo[i]);
    if (VQ == PKV_LAYOUT_PER_TOKEN && dtype == PKV_LAYOUT_U4 && !folded)
        for (int i = 0; i < NP; i++)
            r[i] = fma((float2)tp.y, r[i], (float2)tp.x);
    for (int g = 0; g < G; g++)
        for (int i = 0; i < NP; i++)
            acc[g * NP + i] = fma((float2)p[g], r[i], acc[g * NP + i]);
}

/* u4 per-token values: the f16 lo and scale of token t of a block in
 * group grp of its row, in the low and the high half (lo: the block's lo
 * array; the scales follow it). Packed, a run's parameters take half the
 * registers: as floats they spilled with GQA 4 and 2 pairs. */
static uint token_param_bits(global const half *lo, uint t, uint grp)
{
    global const ushort *b = (global const ushort *)lo + t * VNG + grp;
    return b[0] | (uint)b[BS * VNG] << 16;
}

/* The lo and scale that token_param_bits packed. */
static float2 token_param_floats(uint bits)
{
    return vload_half2(0, (const private half *)&bits);
}

/* Token c + j of a run of 16 whose weights lane l holds for token c + l
 * (V_RUN_PARAMS and not folded: and the lo and scale of token c + l, in
 * rp): j is a constant, so each is read from lane j's register in place,
 * with no instruction of its own. */
#define RUN_TOKEN(j)                                                          \
    do {                                                                      \
        float p[G];                                                           \
        for (int g = 0; g < G; g++)                                           \
            p[g] = intel_sub_group_shuffle(wl[g], (uint)(j));                 \
        float2 tp = 0.0f;                                                     \
        if (V_RUN_PARAMS && dtype == PKV_LAYOUT_U4 && !V_RUN_FLOATS) {        \
            uint t0 = intel_sub_group_shuffle(rp.x, (uint)(j));               \
            uint t1 = intel_sub_group_shuffle(rp.y, (uint)(j));               \
            tp = token_param_floats(lane < 8 ? t0 : t1);                      \
        } else if (VQ == PKV_LAYOUT_PER_TOKEN && dtype == PKV_LAYOUT_U4 &&    \
                   !V_RUN_PARAMS) {                                           \
            tp = token_param_floats(                                          \
                token_param_bits(lo, (uint)(c + (j)), grp));                  \
        }                                                                     \
        token_values(run, dtype, j, p, vlo, vsc, tp, RUN_FOLDED(dtype), acc); \
    } while (0)

/* Pass 3 for tokens [a, e) of one block (V part v, stored as dtype), the
 * slice of subgroup sg (the kernel's, which the compiler knows is the
 * same in every lane; broadcast again here, it made dg2-g10 spill): add
 * each token's value pairs, weighted by its G weights, to acc (and, in
 * folded runs, the tokens' lo times their weights to run_lo). w holds
 * the partition's weights, [token][head], token b0 + a at w0 + a. Runs of
 * 16 tokens take their weights from one register of the subgroup, written
 * out token by token (the compiler kept a loop over them, and each weight
 * then cost two indirect moves); the tokens left over, at a partition's
 * or a window's edge, one at a time. */
static void block_values(global const uchar *v, int dtype, uint sg, int a,
                         int e, uint w0, local const float *w, float2 *acc,
                         float *run_lo)
{
    uint lane = get_sub_group_local_id();
    uint p0 = sg * DSUB / 2;
    global const uchar *rows = v + row_bytes(dtype, 2 * p0);
    global const half *lo =
        (global const half *)(v + PKV_LAYOUT_Q_LO_OFFSET(VD, BS, D));
    global const half *sc = (global const half *)(
        v + PKV_LAYOUT_Q_SCALE_OFFSET(VD, VQ, U4G, BS, D));
    float2 vlo[NP], vsc[NP];
    if (VQ == PKV_LAYOUT_PER_CHANNEL && is_quantized(dtype))
        for (int i = 0; i < NP; i++) {
            vlo[i] = pair_params(lo, 2 * p0, i);
            vsc[i] = pair_params(sc, 2 * p0, i);
        }
    /* u4 per-token values: the group of the lane's channels, and of the
     * first channel of each half of the slice. */
    uint grp = 2 * (p0 + slice_pair(0)) / U4G;
    uint grp0 = 2 * p0 / U4G, grp1 = (2 * p0 + DSUB / 2) / U4G;
    int c = a;
    /* The staging tail's rows go token by token in builds with u4
     * values (a block, at most a partition): in runs they spilled 192
     * bytes on dg2-g10 at GQA 4 with 2 pairs, and Intel's CPU runtime
     * (2026.22) computes them wrong. That is the runtime's defect: its
     * vectorizer runs them a lane at a time, and each shuffle of the
     * run's weights then returns the calling lane's own weight, not lane
     * j's (tests/reduced/intel_cpu_shuffle/ has the reduced kernel, the
     * evidence and the commands). */
    int runs = VD != PKV_LAYOUT_U4 || dtype != PKV_LAYOUT_F32;
    for (; runs && c + 16 <= e; c += 16) {
        global const uchar *run = rows + (size_t)c * row_bytes(dtype, D);
        float wl[G];
        for (int g = 0; g < G; g++)
            wl[g] = w[(w0 + (uint)c + lane) * G + g];
        uint2 rp = 0;
        if (RUN_FOLDED(dtype)) {
            float2 rf = token_param_floats(
                token_param_bits(lo, (uint)c + lane, grp0));
            for (int g = 0; g < G; g++) {
                run_lo[g] = fma(wl[g], rf.x, run_lo[g]);
                wl[g] *= rf.y;
            }
        } else if (V_RUN_PARAMS && dtype == PKV_LAYOUT_U4) {
            rp = (uint2)(token_param_bits(lo, (uint)c + lane, grp0),
                         token_param_bits(lo, (uint)c + lane, grp1));
        }
        RUN_TOKEN(0);
        RUN_TOKEN(1);
        RUN_TOKEN(2);
        RUN_TOKEN(3);
        RUN_TOKEN(4);
        RUN_TOKEN(5);
        RUN_TOKEN(6);
        RUN_TOKEN(7);
        RUN_TOKEN(8);
        RUN_TOKEN(9);
        RUN_TOKEN(10);
        RUN_TOKEN(11);
        RUN_TOKEN(12);
        RUN_TOKEN(13);
        RUN_TOKEN(14);
        RUN_TOKEN(15);
    }
    for (; c < e; c++) {
        float p[G];
        for (int g = 0; g < G; g++)
            p[g] = w[(w0 + (uint)c) * G + g];
        float2 tp = 0.0f;
        if (VQ == PKV_LAYOUT_PER_TOKEN && dtype == PKV_LAYOUT_U4)
            tp = token_param_floats(token_param_bits(lo, (uint)c, grp));
        token_values(rows, dtype, c, p, vlo, vsc, tp, 0, acc);
    }
}

__attribute__((intel_reqd_sub_group_size(16)))
__attribute__((reqd_work_group_size(WG, 1, 1)))
kernel void pkv_decode_partial(PKV_DECODE_PARTIAL_ARGS)
{
    local float qs[D * G];    /* the scaled query rows, [channel][head] */
    local float w[PMAX * G];  /* the partition's scores, then weights,
                                 [token][head] */
    local float stat[3 * G];  /* per head: max, sum of weights, u8
                                 per-token values: sum of p lo */
#if K_GROUPS
    local float qg[D / KW * G]; /* the query's sums per key group,
                                   [group][head] */
#else
    local const float *qg = qs;
#endif
    /* The subgroup id broadcast from lane 0: the compiler then knows it is
     * the same in every lane (it did not for get_sub_group_id), and so
     * the chunk each subgroup scores and its block's addresses. */
    uint lane = get_sub_group_local_id();
    uint sg = sub_group_broadcast(get_sub_group_id(), 0);
    uint lid = get_local_id(0);
    decode_unit u = THIS_UNIT();
    uint t0 = u.range.x, t1 = u.range.y;
    uint n = t1 > t0 ? t1 - t0 : 0;
    size_t row0 = u.row0;

    /* 0. The query. */
    ulong qrow = q_off + row0 * D;
    for (uint i = lid; i < G * D; i += WG)
        qs[i % D * G + i / D] =
            (Q_F16(flags) ? vload_half(0, (global const half *)q + qrow + i)
                          : q[qrow + i]) *
            scale;
    barrier(CLK_LOCAL_MEM_FENCE);
    /* Per-token keys: each head's sum of query channels over a key group
     * (one group a row: in registers). */
    float qsum[G];
    if (QUANTIZED && KQ == PKV_LAYOUT_PER_TOKEN && !K_GROUPS)
        for (int g = 0; g < G; g++) {
            float part = 0.0f;
            for (int c = (int)lane; c < D; c += 16)
                part += qs[c * G + g];
            qsum[g] = sub_group_reduce_add(part);
        }
#if K_GROUPS
    for (uint i = lid; i < D / KW * G; i += WG) {
        uint grp = i / G, g = i % G;
        float sum = 0.0f;
        for (uint c = grp * KW; c < (grp + 1) * KW; c++)
            sum += qs[c * G + g];
        qg[i] = sum;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#endif

    /* 1. Scores. Chunks start at multiples of TC, which divides BS. */
    for (uint c0 = t0 / TC * TC + sg * TC; c0 < t1; c0 += NSG * TC) {
        uint t = c0 + lane;
        int valid = lane < TC && t >= t0 && t < t1;
        uint slot = (valid ? t : max(c0, t0)) % BS;
        int dtype;
        global const uchar *vp;
        global const uchar *kp = decode_block(&u, c0 / BS, &dtype, &vp);
        float s[G];
        /* A constant dtype in each call, so that each is compiled for one
         * storage (a dtype known only at run time kept both paths' values
         * live and spilled). */
        if (QUANTIZED && dtype == PKV_LAYOUT_F32)
            chunk_scores(kp, PKV_LAYOUT_F32, slot, qs, qg, qsum, s);
        else
            chunk_scores(kp, KD, slot, qs, qg, qsum, s);
        if (valid)
            for (int g = 0; g < G; g++)
                w[(t - t0) * G + g] = s[g];
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    /* 2. Softmax of each head over the partition. */
    for (uint g = sg; g < G; g += NSG) {
        float m = -INFINITY;
        for (uint i = lane; i < n; i += 16)
            m = fmax(m, w[i * G + g]);
        m = sub_group_reduce_max(m);
        float l = 0.0f, accl = 0.0f;
        for (uint i = lane; i < n; i += 16) {
            float p = exp(w[i * G + g] - m);
            l += p;
            if (VD == PKV_LAYOUT_U8 && VQ == PKV_LAYOUT_PER_TOKEN) {
                int dtype;
                global const uchar *vp;
                decode_block(&u, (t0 + i) / BS, &dtype, &vp);
                if (dtype != PKV_LAYOUT_F32) {
                    global const half *lo = (global const half *)(
                        vp + PKV_LAYOUT_Q_LO_OFFSET(VD, BS, D));
                    uint slot = (t0 + i) % BS;
                    accl = fma(p, vload_half(slot, lo), accl);
                    p *= vload_half(slot, lo + BS);
                }
            }
            w[i * G + g] = p;
        }
        l = sub_group_reduce_add(l);
        accl = sub_group_reduce_add(accl);
        if (lane == 0) {
            stat[g] = m;
            stat[G + g] = l;
            stat[2 * G + g] = accl;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    /* 3. Values over the subgroup's channel slice. */
    float2 acc[G * NP];
    float run_lo[G]; /* folded runs: per head, a lane's sum of p lo */
    for (int i = 0; i < G * NP; i++)
        acc[i] = 0.0f;
    for (int g = 0; g < G; g++)
        run_lo[g] = 0.0f;
    for (uint b0 = t0 / BS * BS; b0 < t1; b0 += BS) {
        int dtype;
        global const uchar *vp;
        decode_block(&u, b0 / BS, &dtype, &vp);
        int a = (int)(max(b0, t0) - b0), e = (int)(min(b0 + BS, t1) - b0);
        if (QUANTIZED && dtype == PKV_LAYOUT_F32)
            block_values(vp, PKV_LAYOUT_F32, sg, a, e, b0 - t0, w, acc,
                         run_lo);
        else
            block_values(vp, VD, sg, a, e, b0 - t0, w, acc, run_lo);
    }

    for (int g = 0; g < G; g++) {
        decode_dest d =
            decode_dest_of(&u, row0 + g, stat[g], stat[G + g], lid == 0, out,
                           out_off, flags, part_acc, part_ml);
        float accl = stat[2 * G + g];
        if (V_RUN_FLOATS)
            accl += sub_group_reduce_add(run_lo[g]);
        for (int i = 0; i < NP; i++) {
            float2 o = acc[g * NP + i] + accl;
            if (V_STRIDED) {
                decode_store1(&d, o.x, sg * DSUB + slice_channel(i, 0));
                decode_store1(&d, o.y, sg * DSUB + slice_channel(i, 1));
            } else {
                decode_store2(&d, o, sg * DSUB + 2 * slice_pair(i));
            }
        }
    }
}
