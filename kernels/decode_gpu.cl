/* SPDX-License-Identifier: MIT */
/*
 * The portable GPU-shaped variant of pkv_decode_partial (OpenCL C 1.2, no
 * extension; the contract is in decode_common.cl). One work-group per
 * (partition, kv head, sequence): L = lanes, local (lanes, 1, 1), with
 * every query head of the kv head's group in it, so each KV byte is read
 * once.
 *
 * Build options, besides decode_common.cl's (the host derives them in
 * pkv__decode_gpu_shape_make, src/opencl_features.c):
 *   PKV_GPU_CHUNKS     float4 chunks of a row per lane: 1, 2 or 4
 *   PKV_GPU_TOKENS     tokens in flight: lanes = row lanes * tokens
 *   PKV_GPU_PARTITION  the longest partition_size the host passes
 *
 * Lanes: lane (c, u) = u * C + c, C = head_dim / (4 * chunks) lanes per
 * row. Lane c owns the float4 chunks c + C * i (i < chunks) of a row: at
 * each i the C lanes of a row read one contiguous run of 16 * C bytes of
 * f32 (8 * C of f16, 4 * C of u8), and the rows of the tokens in flight lie
 * one after the other in a block.
 *
 * Three passes over the partition, all in local memory:
 *   1. scores: per round, lane (c, u) takes token r + u, writes its G
 *      partial dot products; after a barrier the sums over the C lanes of
 *      each (head, token) go to the partition's score array;
 *   2. softmax: max and sum over the partition per head, every lane
 *      combining the per-lane results in the same order;
 *   3. values: lane (c, u) adds p * V for tokens u, u + tokens, ... into
 *      its chunks; the sums over u are combined per head at the end.
 * U8 and U4 are dequantised as they are read (lo + code * scale) and the tail block
 * that is not frozen comes from the f32 staging tail, as elsewhere.
 */

#define NQ PKV_GPU_CHUNKS
#define C (D / (4 * NQ))
#define TP PKV_GPU_TOKENS
#define WG (C * TP)
#define PMAX PKV_GPU_PARTITION

__attribute__((reqd_work_group_size(WG, 1, 1)))
kernel void pkv_decode_partial(PKV_DECODE_PARTIAL_ARGS)
{
    local float red[G * WG];    /* per-lane partial results */
    local float lg[G * PMAX];   /* the partition's scores, then weights */
    local float4 vred[WG * NQ]; /* per-lane V sums of one head */
    uint lid = get_local_id(0), c = lid % C, u = lid / C;
    decode_unit w = THIS_UNIT();
    uint t0 = w.range.x;
    uint n = w.range.y > w.range.x ? w.range.y - w.range.x : 0;
    size_t row0 = w.row0;

    float4 qv[G][NQ];
    ulong qrow = q_off + row0 * D;
    for (int g = 0; g < G; g++)
        for (int i = 0; i < NQ; i++)
            qv[g][i] = pkv_load4(q, qrow + g * D + 4 * (c + C * i),
                                 Q_F16(flags)) *
                       scale;

    /* 1. Scores. */
    for (uint r = 0; r < n; r += TP) {
        if (r + u < n) {
            int dt;
            global const uchar *vp;
            global const uchar *kp =
                decode_block(&w, (t0 + r + u) / BS, &dt, &vp);
            uint slot = (t0 + r + u) % BS;
            float4 k[NQ];
            for (int i = 0; i < NQ; i++)
                k[i] = pkv_kv_row4(kp, K_OF(dt), KQ, U4G, slot, c + C * i,
                                   D, BS);
            for (int g = 0; g < G; g++) {
                float s = 0.0f;
                for (int i = 0; i < NQ; i++)
                    s += dot(qv[g][i], k[i]);
                red[g * WG + lid] = s;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint x = lid; x < G * TP; x += WG) {
            uint g = x / TP, v = x % TP;
            if (r + v < n) {
                float s = 0.0f;
                for (uint k = 0; k < C; k++)
                    s += red[g * WG + v * C + k];
                lg[g * PMAX + r + v] = s;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    /* 2. Softmax over the partition. */
    float m[G], l[G];
    for (int g = 0; g < G; g++) {
        float mx = -INFINITY;
        for (uint x = lid; x < n; x += WG)
            mx = fmax(mx, lg[g * PMAX + x]);
        red[g * WG + lid] = mx;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int g = 0; g < G; g++) {
        float mx = -INFINITY;
        for (uint k = 0; k < WG; k++)
            mx = fmax(mx, red[g * WG + k]);
        m[g] = mx;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int g = 0; g < G; g++) {
        float sum = 0.0f;
        for (uint x = lid; x < n; x += WG) {
            float p = exp(lg[g * PMAX + x] - m[g]);
            lg[g * PMAX + x] = p;
            sum += p;
        }
        red[g * WG + lid] = sum;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int g = 0; g < G; g++) {
        float sum = 0.0f;
        for (uint k = 0; k < WG; k++)
            sum += red[g * WG + k];
        l[g] = sum;
    }

    /* 3. Values. */
    float4 acc[G][NQ];
    for (int g = 0; g < G; g++)
        for (int i = 0; i < NQ; i++)
            acc[g][i] = 0.0f;
    for (uint x = u; x < n; x += TP) {
        int dt;
        global const uchar *vp;
        decode_block(&w, (t0 + x) / BS, &dt, &vp);
        uint slot = (t0 + x) % BS;
        for (int i = 0; i < NQ; i++) {
            float4 v =
                pkv_kv_row4(vp, V_OF(dt), VQ, U4G, slot, c + C * i, D, BS);
            for (int g = 0; g < G; g++)
                acc[g][i] = fma((float4)lg[g * PMAX + x], v, acc[g][i]);
        }
    }
    for (int g = 0; g < G; g++) {
        for (int i = 0; i < NQ; i++)
            vred[lid * NQ + i] = acc[g][i];
        barrier(CLK_LOCAL_MEM_FENCE);
        if (u == 0) {
            decode_dest d = decode_dest_of(&w, row0 + g, m[g], l[g], c == 0,
                                           out, out_off, flags, part_acc,
                                           part_ml);
            for (int i = 0; i < NQ; i++) {
                float4 sum = 0.0f;
                for (uint v = 0; v < TP; v++)
                    sum += vred[(v * C + c) * NQ + i];
                decode_store4(&d, sum, 4 * (c + C * i));
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}
