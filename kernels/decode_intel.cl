/* SPDX-License-Identifier: MIT */
/*
 * The Intel subgroup variant of pkv_decode_partial (decode_common.cl has
 * the contract, the shared helpers and the reduce kernel). Needs
 * cl_intel_subgroups and cl_intel_subgroups_short, head_dim 32, 64, 128 or
 * 256; uses cl_khr_fp16 when PKV_INTEL_FP16 is set. Built with
 * -cl-std=CL2.0 -DPKV_INTEL_SUBGROUPS.
 *
 * One subgroup of 16 lanes per (partition, kv head, sequence): L = 16,
 * local (16, 1, 1), every query head of the kv-head group in it, so each
 * KV byte is read once. Lane l owns the channel pairs (2u, 2u + 1),
 * u = l + 16 i, i < NP: a u8 row is one subgroup block read of NP ushorts
 * per lane, an f16 row NP uints, so neighbouring lanes read neighbouring
 * bytes.
 *
 * Tokens go in chunks of W. A lane accumulates its channels' part of the W
 * dot products of each head, then one transpose-reduce (W / 2 + W / 4 + ...
 * shuffles, not W full reductions) leaves each lane the whole score of one
 * token: lane l holds token l / R of the chunk, R = 16 / W lanes per
 * token. The softmax then costs one exp per lane, one subgroup max per
 * chunk and head, and the weights reach the V sums by broadcast. W is
 * 32 / G tokens (at most 16, at least 1) so that the per-lane partial sums
 * stay at 32 floats, within a GPU thread's registers.
 *
 * U8 blocks: per-channel keys fold the block's scale into the query once
 * per block (plus q . lo), per-token keys scale each score; per-token
 * values fold their scale into the weight and their lo into a per-lane
 * sum; per-channel values are dequantised per row.
 */
#pragma OPENCL EXTENSION cl_intel_subgroups : enable
#pragma OPENCL EXTENSION cl_intel_subgroups_short : enable
#ifdef PKV_INTEL_FP16
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#endif

#define NP (D / 32)
#if NP == 1
#define block_read_us(p) intel_sub_group_block_read_us(p)
#define block_read_ui(p) intel_sub_group_block_read(p)
#define ushortP ushort
#define uintP uint
#elif NP == 2
#define block_read_us(p) intel_sub_group_block_read_us2(p)
#define block_read_ui(p) intel_sub_group_block_read2(p)
#define ushortP ushort2
#define uintP uint2
#elif NP == 4
#define block_read_us(p) intel_sub_group_block_read_us4(p)
#define block_read_ui(p) intel_sub_group_block_read4(p)
#define ushortP ushort4
#define uintP uint4
#elif NP == 8
#define block_read_us(p) intel_sub_group_block_read_us8(p)
#define block_read_ui(p) intel_sub_group_block_read8(p)
#define ushortP ushort8
#define uintP uint8
#else
#error "the intel decode variant needs head_dim 32, 64, 128 or 256"
#endif

/* Element i of an NP-vector (NP == 1: the scalar itself). */
#if NP == 1
#define EL(v, i) (v)
#else
#define EL(v, i) ((v)[i])
#endif

#if G <= 2
#define W 16
#elif G <= 4
#define W 8
#elif G <= 8
#define W 4
#elif G <= 16
#define W 2
#else
#define W 1
#endif
#define R (16 / W)

/* Two f16 in the bits of a uint, as float2. */
static float2 half2_bits(uint u)
{
#ifdef PKV_INTEL_FP16
    return convert_float2(as_half2(u));
#else
    return (float2)(vload_half(0, (const private half *)&u),
                    vload_half(1, (const private half *)&u));
#endif
}

/* The lane's channel pairs of one K or V row: u8 codes as floats, f16 or
 * f32 values. */
static void row_pairs(global const uchar *row, int dtype, float2 *out)
{
    uint lane = get_sub_group_local_id();
    if (dtype == PKV_LAYOUT_U8) {
        ushortP c = block_read_us((const global ushort *)row);
        for (int i = 0; i < NP; i++)
            out[i] = (float2)((float)(EL(c, i) & 0xff),
                              (float)(EL(c, i) >> 8));
    } else if (dtype == PKV_LAYOUT_F16) {
        uintP c = block_read_ui((const global uint *)row);
        for (int i = 0; i < NP; i++)
            out[i] = half2_bits(EL(c, i));
    } else {
        for (int i = 0; i < NP; i++)
            out[i] = vload2(lane + 16 * i, (global const float *)row);
    }
}

/* The lane's pairs of a per-channel f16 parameter array. */
static void param_pairs(global const half *p, float2 *out)
{
    uint lane = get_sub_group_local_id();
    for (int i = 0; i < NP; i++)
        out[i] = vload_half2(lane + 16 * i, p);
}

/* v[j] is this lane's part of token j's sum (j < W); returns the whole sum
 * of token lane / R. Each step halves the tokens a lane keeps: it keeps one
 * half, sends the other to the lane `off` away and adds what that lane
 * sent for the kept half. */
static float transpose_reduce(float *v)
{
    uint lane = get_sub_group_local_id();
    int n = W;
    for (uint off = 8; off >= 1; off >>= 1) {
        if (n > 1) {
            int half_n = n / 2;
            int upper = (lane & off) != 0;
            for (int j = 0; j < half_n; j++) {
                float send = upper ? v[j] : v[j + half_n];
                float keep = upper ? v[j + half_n] : v[j];
                v[j] = keep + intel_sub_group_shuffle_xor(send, off);
            }
            n = half_n;
        } else {
            v[0] += intel_sub_group_shuffle_xor(v[0], off);
        }
    }
    return v[0];
}

/* Online softmax state of the G heads. m is uniform; l and accl are this
 * lane's parts (summed over the subgroup at the end); acc is the lane's
 * channel pairs. */
typedef struct sg_state {
    float m[G], l[G], accl[G];
    float2 acc[G][NP];
} sg_state;

/* Fold tokens [t0, t1) of one block. dtype is the part's storage: the u8
 * tail block comes from the f32 staging tail. */
static void sg_block(global const uchar *k, global const uchar *v, int dtype,
                     int t0, int t1, const float2 *qv, const float *qsum,
                     sg_state *st)
{
    uint lane = get_sub_group_local_id();
    int ebytes = dtype == PKV_LAYOUT_U8 ? 1 : dtype == PKV_LAYOUT_F16 ? 2 : 4;
    int u8 = dtype == PKV_LAYOUT_U8;
    global const half *klo = (global const half *)(k + BS * D);
    global const half *ksc = klo + PKV_LAYOUT_U8_GROUPS(KQ, BS, D);
    global const half *vlo = (global const half *)(v + BS * D);
    global const half *vsc = vlo + PKV_LAYOUT_U8_GROUPS(VQ, BS, D);

    float2 qs[G * NP];
    float qlo[G];
    for (int g = 0; g < G; g++) {
        qlo[g] = 0.0f;
        for (int i = 0; i < NP; i++)
            qs[g * NP + i] = qv[g * NP + i];
    }
    if (KQ == PKV_LAYOUT_PER_CHANNEL && u8) {
        float2 lo[NP], sc[NP];
        param_pairs(klo, lo);
        param_pairs(ksc, sc);
        for (int g = 0; g < G; g++) {
            float part = 0.0f;
            for (int i = 0; i < NP; i++) {
                qs[g * NP + i] = qv[g * NP + i] * sc[i];
                part += dot(qv[g * NP + i], lo[i]);
            }
            qlo[g] = sub_group_reduce_add(part);
        }
    }
    float2 vlo_c[NP], vsc_c[NP];
    if (VQ == PKV_LAYOUT_PER_CHANNEL && u8) {
        param_pairs(vlo, vlo_c);
        param_pairs(vsc, vsc_c);
    }

    for (int c0 = t0; c0 < t1; c0 += W) {
        int n = min(W, t1 - c0);
        /* Scores: this lane's part of each (head, token), then reduced. */
        float part[G][W];
        for (int j = 0; j < W; j++) {
            for (int g = 0; g < G; g++)
                part[g][j] = 0.0f;
            if (j >= n)
                continue;
            float2 r[NP];
            row_pairs(k + (c0 + j) * D * ebytes, dtype, r);
            for (int g = 0; g < G; g++)
                for (int i = 0; i < NP; i++)
                    part[g][j] = fma(qs[g * NP + i].x, r[i].x,
                                     fma(qs[g * NP + i].y, r[i].y,
                                         part[g][j]));
        }
        int j_own = (int)(lane / R);
        int valid = j_own < n;
        int t = c0 + min(j_own, n - 1);
        int owner = valid && lane % R == 0; /* counts the token in l */
        float vsc_t = 1.0f;
        if (VQ == PKV_LAYOUT_PER_TOKEN && u8)
            vsc_t = vload_half(t, vsc);
        float p[G];
        for (int g = 0; g < G; g++) {
            float s = transpose_reduce(part[g]);
            if (KQ == PKV_LAYOUT_PER_TOKEN && u8)
                s = fma(vload_half(t, ksc), s, vload_half(t, klo) * qsum[g]);
            s = valid ? s + qlo[g] : -INFINITY;
            float mc = sub_group_reduce_max(s);
            if (mc > st->m[g]) {
                if (st->m[g] != -INFINITY) {
                    float keep = exp(st->m[g] - mc);
                    st->l[g] *= keep;
                    st->accl[g] *= keep;
                    for (int i = 0; i < NP; i++)
                        st->acc[g][i] *= keep;
                }
                st->m[g] = mc;
            }
            float e = valid ? exp(s - st->m[g]) : 0.0f;
            st->l[g] += owner ? e : 0.0f;
            if (VQ == PKV_LAYOUT_PER_TOKEN && u8)
                st->accl[g] += owner ? e * vload_half(t, vlo) : 0.0f;
            p[g] = e * vsc_t;
        }
        /* V sums: token j's weight comes from its first lane. */
        for (int j = 0; j < W; j++) {
            if (j >= n)
                break;
            float2 r[NP];
            row_pairs(v + (c0 + j) * D * ebytes, dtype, r);
            if (VQ == PKV_LAYOUT_PER_CHANNEL && u8)
                for (int i = 0; i < NP; i++)
                    r[i] = fma(vsc_c[i], r[i], vlo_c[i]);
            for (int g = 0; g < G; g++) {
                float pj = sub_group_broadcast(p[g], (uint)(j * R));
                for (int i = 0; i < NP; i++)
                    st->acc[g][i] = fma((float2)pj, r[i], st->acc[g][i]);
            }
        }
    }
}

__attribute__((intel_reqd_sub_group_size(16)))
kernel void pkv_decode_partial(PKV_DECODE_PARTIAL_ARGS)
{
    uint lane = get_sub_group_local_id();
    decode_unit w = this_unit(context_lens, sliding_window, partition_size);
    uint part = w.part, num_parts = w.num_parts, h = w.h, seq = w.seq;
    uint ctx = w.ctx, t_begin = w.range.x, t_end = w.range.y;
    uint hq = num_kv_heads * G;

    float2 qv[G * NP];
    float qsum[G];
    ulong qrow = q_off + ((size_t)seq * hq + h * G) * D;
    for (int g = 0; g < G; g++) {
        float part_sum = 0.0f;
        for (int i = 0; i < NP; i++) {
            ulong e = qrow + g * D + 2 * (lane + 16 * i);
            qv[g * NP + i] =
                (Q_F16(flags) ? vload_half2(0, (global const half *)q + e)
                              : vload2(0, q + e)) *
                scale;
            part_sum += qv[g * NP + i].x + qv[g * NP + i].y;
        }
        qsum[g] = sub_group_reduce_add(part_sum);
    }
    sg_state st;
    for (int g = 0; g < G; g++) {
        st.m[g] = -INFINITY;
        st.l[g] = 0.0f;
        st.accl[g] = 0.0f;
        for (int i = 0; i < NP; i++)
            st.acc[g][i] = 0.0f;
    }

    for (uint b0 = t_begin / BS * BS; b0 < t_end; b0 += BS) {
        int t0 = (int)(max(b0, t_begin) - b0);
        int t1 = (int)(min(b0 + BS, t_end) - b0);
        global const uchar *kp = head_part(arena, block_tables,
                                           max_blocks_per_seq, num_kv_heads,
                                           seq, b0 / BS, h);
        if (PKV_KV_DTYPE == PKV_LAYOUT_U8 && b0 + BS > ctx) {
            /* Not sealed: the tokens are in the sequence's staging tail. */
            global const float *tk = tail_rows(
                stages, stage_ids[seq], stage_floats, stage_layer_offset, h);
            sg_block((global const uchar *)tk,
                     (global const uchar *)(tk + BS * D), PKV_LAYOUT_F32, t0,
                     t1, qv, qsum, &st);
        } else {
            sg_block(kp, kp + K_PART_BYTES, PKV_KV_DTYPE, t0, t1, qv, qsum,
                     &st);
        }
    }

    size_t row0 = (size_t)seq * hq + h * G;
    for (int g = 0; g < G; g++) {
        float l = sub_group_reduce_add(st.l[g]);
        float accl = sub_group_reduce_add(st.accl[g]);
        if (num_parts == 1) {
            /* Partition 0 is never empty: l >= 1. */
            float inv = 1.0f / l;
            ulong o = out_off + (row0 + g) * D;
            for (int i = 0; i < NP; i++) {
                float2 x = (st.acc[g][i] + accl) * inv;
                ulong e = o + 2 * (lane + 16 * i);
                if (OUT_F16(flags))
                    vstore_half2_rte(x, 0, (global half *)out + e);
                else
                    vstore2(x, 0, out + e);
            }
        } else {
            size_t r = (row0 + g) * num_parts + part;
            global float *o = part_acc + r * D;
            for (int i = 0; i < NP; i++)
                vstore2(st.acc[g][i] + accl, lane + 16 * i, o);
            if (lane == 0) {
                part_ml[r * 2] = st.m[g];
                part_ml[r * 2 + 1] = l;
            }
        }
    }
}
