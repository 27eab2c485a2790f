/* SPDX-License-Identifier: MIT */
/*
 * The CPU-shaped variant of pkv_decode_partial (decode_common.cl has the
 * contract, the shared helpers and the reduce kernel; decode_gpu.cl and
 * decode_intel.cl are the GPU-shaped variants).
 *
 * One work-item per (partition, kv head, sequence); L = 1, local (1,
 * num_kv_heads, 1): the kv heads of one (partition, sequence) form a
 * work-group and meet at a barrier after every block, so a CPU device walks
 * each block's heads in address order (PoCL: 20-25% less CPU time than
 * local size 1). A work-item streams its blocks with 16-wide vector loads;
 * the online softmax is updated once per block (all of the block's scores,
 * one rescale, then the V sums), as the CPU backend does. U8 and U4 blocks
 * are never dequantised: per-channel keys fold the block's scale into the
 * query once per block (qs = q * scale, plus q . lo), so a score costs one
 * fma per code; per-token values fold their scale into the softmax weight
 * (p * scale, one weight per u4 group) and their lo into a sum; per-token
 * keys and per-channel values fold the other way round (u4 per-token keys
 * are dequantised instead: each group would need its own dot product).
 *
 * A vector of VW u4 codes is VW / 2 bytes: it unpacks into its low nibbles
 * then its high ones, the even channels then the odd ones (two whole-vector
 * operations, where putting each code back in its place costs a shuffle per
 * vector). The lanes of whatever meets u4 codes follow that "dealt" order:
 * the query and the per-channel parameters of u4 keys, the accumulators and
 * per-channel parameters of u4 values (restored once, at the store), and
 * the staging tail's rows.
 */

/* The helpers below pass float16 vectors by value. On a CPU target without
 * AVX-512 (PoCL's "haswell" build of this kernel) clang warns, once per
 * call, that such a vector is passed differently than with AVX-512: a
 * note about calls between separately compiled code, which a kernel
 * whose helpers are all inlined never makes. */
#ifdef __clang__
#pragma clang diagnostic ignored "-Wpsabi"
#endif

/* Channels are handled a vector of VW at a time. A u4 per-token group
 * (U4G channels, a multiple of 8 or all of them) must not straddle two
 * vectors, so that its lo and scale are one scalar per vector. */
#if (KD == PKV_LAYOUT_U4 && KQ == PKV_LAYOUT_PER_TOKEN) || \
    (VD == PKV_LAYOUT_U4 && VQ == PKV_LAYOUT_PER_TOKEN)
#define RUN U4G
#else
#define RUN D
#endif
#if D % 16 == 0 && RUN % 16 == 0
#define VW 16
#define floatV float16
#define vloadV vload16
#define vstoreV vstore16
#define vload_halfV vload_half16
#define vstore_halfV_rte vstore_half16_rte
#define convert_floatV convert_float16
#define ucharV uchar16
#define ucharH uchar8 /* half a vector: the bytes of VW u4 codes */
#define uintH uint8
#define convert_uintH convert_uint8
#define convert_floatH convert_float8
static float hsum(float16 x)
{
    float8 a = x.lo + x.hi;
    float4 b = a.lo + a.hi;
    float2 c = b.lo + b.hi;
    return c.x + c.y;
}
#elif D % 8 == 0 && RUN % 8 == 0
#define VW 8
#define floatV float8
#define vloadV vload8
#define vstoreV vstore8
#define vload_halfV vload_half8
#define vstore_halfV_rte vstore_half8_rte
#define convert_floatV convert_float8
#define ucharV uchar8
#define ucharH uchar4
#define uintH uint4
#define convert_uintH convert_uint4
#define convert_floatH convert_float4
static float hsum(float8 x)
{
    float4 b = x.lo + x.hi;
    float2 c = b.lo + b.hi;
    return c.x + c.y;
}
#else
#define VW 4
#define floatV float4
#define vloadV vload4
#define vstoreV vstore4
#define vload_halfV vload_half4
#define vstore_halfV_rte vstore_half4_rte
#define convert_floatV convert_float4
#define ucharV uchar4
#define ucharH uchar2
#define uintH uint2
#define convert_uintH convert_uint2
#define convert_floatH convert_float2
static float hsum(float4 x)
{
    float2 c = x.lo + x.hi;
    return c.x + c.y;
}
#endif
#define NV (D / VW)

/* Software prefetch of one cache line. PoCL's prefetch() is empty, but its
 * compiler (clang, for x86-64 or AArch64 CPUs) lowers __builtin_prefetch to
 * a prefetch instruction. Elsewhere OpenCL's prefetch(): Intel's CPU
 * runtime, whose compiler defines neither architecture macro, implements it
 * (without it u8 decode there took twice as long, ctx 4096, batch 16). */
#if defined(__has_builtin)
#if __has_builtin(__builtin_prefetch) && \
    (defined(__x86_64__) || defined(__aarch64__))
#define PKV_PREFETCH(p) __builtin_prefetch(p)
#endif
#endif
#ifndef PKV_PREFETCH
#define PKV_PREFETCH(p) prefetch((p), 1)
#endif


/* r[g] = hsum(sa[g]) for the G heads; four heads at a time share one
 * reduction tree (15 vector ops instead of 4 x 8). */
static void hsum_heads(const floatV *sa, float *r)
{
#if VW == 16 && G % 4 == 0
#pragma unroll
    for (int g = 0; g < G; g += 4) {
        float16 v01 = (float16)(sa[g].lo, sa[g + 1].lo) +
                      (float16)(sa[g].hi, sa[g + 1].hi);
        float16 v23 = (float16)(sa[g + 2].lo, sa[g + 3].lo) +
                      (float16)(sa[g + 2].hi, sa[g + 3].hi);
        float16 w = (float16)(v01.s0123, v01.s89ab, v23.s0123, v23.s89ab) +
                    (float16)(v01.s4567, v01.scdef, v23.s4567, v23.scdef);
        float8 x = w.even + w.odd;
        float4 y = x.even + x.odd;
        r[g] = y.x;
        r[g + 1] = y.y;
        r[g + 2] = y.z;
        r[g + 3] = y.w;
    }
#else
#pragma unroll
    for (int g = 0; g < G; g++)
        r[g] = hsum(sa[g]);
#endif
}

/* Scores of a block are handled a vector of SW tokens at a time. */
#if BS % 16 == 0
#define SW 16
#define floatS float16
#define vloadS vload16
#define vstoreS vstore16
#define vload_halfS vload_half16
#elif BS % 4 == 0
#define SW 4
#define floatS float4
#define vloadS vload4
#define vstoreS vstore4
#define vload_halfS vload_half4
#else
#define SW 1
#define floatS float
#define vloadS(i, p) ((p)[i])
#define vstoreS(x, i, p) ((p)[i] = (x))
#define vload_halfS vload_half
#endif

static float hmaxS(floatS x)
{
#if SW == 16
    float8 a = fmax(x.lo, x.hi);
    float4 b = fmax(a.lo, a.hi);
    float2 c = fmax(b.lo, b.hi);
    return fmax(c.x, c.y);
#elif SW == 4
    float2 c = fmax(x.lo, x.hi);
    return fmax(c.x, c.y);
#else
    return x;
#endif
}

#if VD == PKV_LAYOUT_U4 && VQ == PKV_LAYOUT_PER_TOKEN
/* a[0], a[n], a[2n], ...: SW elements n apart. */
static float4 gather4(const float *a, int n)
{
    return (float4)(a[0], a[n], a[2 * n], a[3 * n]);
}

static floatS gatherS(const float *a, int n)
{
#if SW == 16
    return (float16)(gather4(a, n), gather4(a + 4 * n, n),
                     gather4(a + 8 * n, n), gather4(a + 12 * n, n));
#elif SW == 4
    return gather4(a, n);
#else
    return a[0];
#endif
}
#endif

/* (Not hsum: that one takes the channel vector, float4 when head_dim is
 * not a multiple of 16, while a block of 16 tokens gives float16.) */
static float hsumS(floatS x)
{
#if SW == 16
    float8 a = x.lo + x.hi;
    float4 b = a.lo + a.hi;
    float2 c = b.lo + b.hi;
    return c.x + c.y;
#elif SW == 4
    float2 c = x.lo + x.hi;
    return c.x + c.y;
#else
    return x;
#endif
}

/* The running softmax of the G heads of one work-item. */
typedef struct state {
    float m[G], l[G];
    float accl[G]; /* u8 per-token values: sum of p * lo, every channel */
    floatV acc[G][NV];
} state;

/* A block is a jump that the CPU's prefetchers cannot follow: while the
 * K loop is at token t of this block, prefetch the t-th share of the
 * cache lines of the next block's head part (nxt; NULL: none), so its
 * misses overlap this block's arithmetic instead of stalling the next
 * (PoCL, ctx 4096, batch 16: about half the CPU time per step for u8, a
 * third less for f16). A prefetch never faults, whatever the address. */
#define PF_LINES ((HEAD_BYTES + 63) / 64)
#define PF_PER_TOKEN ((PF_LINES + BS - 1) / BS)
static void prefetch_share(global const uchar *nxt, int t)
{
    if (nxt != NULL)
#pragma unroll
        for (int i = 0; i < PF_PER_TOKEN; i++)
            if (t * PF_PER_TOKEN + i < PF_LINES)
                PKV_PREFETCH(nxt + (t * PF_PER_TOKEN + i) * 64);
}

/* s[g * BS + t] holds the block's scores of head g, -inf where masked.
 * Rescale each head's state to the block's max once, then turn the scores
 * into weights p = exp(s - m) (0 where masked) and add them to l. Vector
 * exp over the block's tokens rather than one exp per token. */
static void block_softmax(float *s, state *st)
{
#pragma unroll
    for (int g = 0; g < G; g++) {
        floatS mv = vloadS(0, s + g * BS);
        for (int c = 1; c < BS / SW; c++)
            mv = fmax(mv, vloadS(c, s + g * BS));
        float mb = hmaxS(mv);
        if (mb > st->m[g]) {
            if (st->m[g] != -INFINITY) {
                float keep = exp(st->m[g] - mb);
                st->l[g] *= keep;
                st->accl[g] *= keep;
#pragma unroll
                for (int x = 0; x < NV; x++)
                    st->acc[g][x] *= keep;
            }
            st->m[g] = mb;
        }
        floatS ls = 0.0f;
        for (int c = 0; c < BS / SW; c++) {
            floatS p = exp(vloadS(c, s + g * BS) - st->m[g]);
            vstoreS(p, c, s + g * BS);
            ls += p;
        }
        st->l[g] += hsumS(ls);
    }
}

/* Mask the tokens outside [t0, t1) of a partly visible block. */
static void mask_scores(float *s, int t0, int t1)
{
    if (t0 > 0 || t1 < BS)
#pragma unroll
        for (int g = 0; g < G; g++)
            for (int t = 0; t < BS; t++)
                if (t < t0 || t >= t1)
                    s[g * BS + t] = -INFINITY;
}

/* Row x-vector i of an f32 (f16 set: f16) part. After inlining, f16 is a
 * constant and the other branch disappears. */
static floatV load_row(global const uchar *p, size_t i, int f16)
{
    return f16 ? vload_halfV(i, (global const half *)p)
               : vloadV(i, (global const float *)p);
}

#if KD == PKV_LAYOUT_U4 || VD == PKV_LAYOUT_U4
/* A vector in dealt order (its even lanes, then its odd ones), and back. */
static floatV deal(floatV x)
{
    return (floatV)(x.even, x.odd);
}

static floatV undeal(floatV x)
{
    floatV y;
    y.even = x.lo;
    y.odd = x.hi;
    return y;
}
#endif

/* The lane order of K and of V: channel order, or dealt for u4 parts. */
#if KD == PKV_LAYOUT_U4
#define K_ORDER(x) deal(x)
#else
#define K_ORDER(x) (x)
#endif
#if VD == PKV_LAYOUT_U4
#define V_ORDER(x) deal(x)
#define V_UNORDER(x) undeal(x)
#else
#define V_ORDER(x) (x)
#define V_UNORDER(x) (x)
#endif

/* Fold tokens [t0, t1) of an f32 or f16 block ([token][ch] K and V): the
 * blocks of an f32 or f16 cache, and the f32 staging tail of a quantized
 * one (its rows put in the lane order of the frozen blocks). */
static void block_float(global const uchar *k, global const uchar *v,
                        int f16, int t0, int t1, const floatV *qv,
                        global const uchar *nxt, state *st)
{
    float s[G * BS];
    for (int t = t0; t < t1; t++) {
        floatV sa[G];
        prefetch_share(nxt, t);
#pragma unroll
        for (int g = 0; g < G; g++)
            sa[g] = 0.0f;
#pragma unroll
        for (int x = 0; x < NV; x++) {
            floatV kx = K_ORDER(load_row(k, (size_t)(t * NV + x), f16));
#pragma unroll
            for (int g = 0; g < G; g++)
                sa[g] = fma(qv[g * NV + x], kx, sa[g]);
        }
        float r[G];
        hsum_heads(sa, r);
#pragma unroll
        for (int g = 0; g < G; g++)
            s[g * BS + t] = r[g];
    }
    mask_scores(s, t0, t1);
    block_softmax(s, st);
    /* Channels outer, tokens inner: G accumulators stay in registers for
     * the whole block (tokens outer spills G * NV of them on every token). */
    for (int x = 0; x < NV; x++) {
        floatV a[G];
#pragma unroll
        for (int g = 0; g < G; g++)
            a[g] = st->acc[g][x];
        for (int t = t0; t < t1; t++) {
            floatV vx = V_ORDER(load_row(v, (size_t)(t * NV + x), f16));
#pragma unroll
            for (int g = 0; g < G; g++)
                a[g] = fma((floatV)s[g * BS + t], vx, a[g]);
        }
#pragma unroll
        for (int g = 0; g < G; g++)
            st->acc[g][x] = a[g];
    }
}

#if QUANTIZED
/* Code rows are VW-byte aligned (u4: VW / 2; parts are 16-byte aligned,
 * head_dim a multiple of VW): an aligned vector load. vload16 on uchar
 * promises only byte alignment, and PoCL's LLVM then assembles the 16
 * codes from eight 16-bit inserts, which cost more than the arithmetic on
 * them. */
static floatV codes_u8(global const uchar *p, size_t i)
{
    return convert_floatV(((global const ucharV *)p)[i]);
}

/* Vector i of u4 codes, dealt: the low nibbles (even channels), then the
 * high ones (odd channels). */
static floatV codes_u4(global const uchar *p, size_t i)
{
    uintH b = convert_uintH(((global const ucharH *)p)[i]);
    return (floatV)(convert_floatH(b & 15u), convert_floatH(b >> 4));
}

#if KD == PKV_LAYOUT_U4
#define k_codes codes_u4
#else
#define k_codes codes_u8
#endif
#if VD == PKV_LAYOUT_U4
#define v_codes codes_u4
#else
#define v_codes codes_u8
#endif

/* A quantized part's f16 lo and scale of each group (kv_layout.h), and the
 * per-token groups of a row: one (u8) or head_dim / U4G (u4). */
#define Q_LO(p, pd) \
    ((global const half *)((p) + PKV_LAYOUT_Q_LO_OFFSET(pd, BS, D)))
#define Q_SCALE(p, pd, grp) \
    ((global const half *)((p) + \
                           PKV_LAYOUT_Q_SCALE_OFFSET(pd, grp, U4G, BS, D)))
#define K_GROUPS (D / PKV_LAYOUT_Q_WIDTH(KD, U4G, D))
#define V_GROUPS (D / PKV_LAYOUT_Q_WIDTH(VD, U4G, D))

/* Fold tokens [t0, t1) of a frozen u8 or u4 block: codes [token][ch],
 * then f16 lo[groups], scale[groups] (kv_layout.h). */
static void block_quant(global const uchar *k, global const uchar *v, int t0,
                        int t1, const floatV *qv, const float *qsum,
                        global const uchar *nxt, state *st)
{
    global const half *klo = Q_LO(k, KD), *ksc = Q_SCALE(k, KD, KQ);
    global const half *vlo = Q_LO(v, VD), *vsc = Q_SCALE(v, VD, VQ);
    float s[G * BS];
#if KQ == PKV_LAYOUT_PER_CHANNEL
    /* s = sum_c q_c (lo_c + code sc_c) = q.lo + sum_c (q_c sc_c) code */
    floatV qs[G][NV];
    float qlo[G];
    {
        floatV ql[G];
#pragma unroll
        for (int g = 0; g < G; g++)
            ql[g] = 0.0f;
#pragma unroll
        for (int x = 0; x < NV; x++) {
            floatV lx = K_ORDER(vload_halfV(x, klo));
            floatV sx = K_ORDER(vload_halfV(x, ksc));
#pragma unroll
            for (int g = 0; g < G; g++) {
                qs[g][x] = qv[g * NV + x] * sx;
                ql[g] = fma(qv[g * NV + x], lx, ql[g]);
            }
        }
#pragma unroll
        for (int g = 0; g < G; g++)
            qlo[g] = hsum(ql[g]);
    }
#endif
    for (int t = t0; t < t1; t++) {
        floatV sa[G];
        prefetch_share(nxt, t);
#pragma unroll
        for (int g = 0; g < G; g++)
            sa[g] = 0.0f;
#pragma unroll
        for (int x = 0; x < NV; x++) {
            floatV cx = k_codes(k, (size_t)(t * NV + x));
#if KQ == PKV_LAYOUT_PER_TOKEN && KD == PKV_LAYOUT_U4
            /* Dequantised: the row's groups have a lo and scale each. */
            int i = t * K_GROUPS + x * VW / U4G;
            cx = fma(cx, (floatV)vload_half(i, ksc),
                     (floatV)vload_half(i, klo));
#endif
#pragma unroll
            for (int g = 0; g < G; g++)
#if KQ == PKV_LAYOUT_PER_CHANNEL
                sa[g] = fma(qs[g][x], cx, sa[g]);
#else
                sa[g] = fma(qv[g * NV + x], cx, sa[g]);
#endif
        }
        float r[G];
        hsum_heads(sa, r);
#if KQ == PKV_LAYOUT_PER_CHANNEL
#pragma unroll
        for (int g = 0; g < G; g++)
            s[g * BS + t] = r[g] + qlo[g];
#elif KD == PKV_LAYOUT_U8
        /* s = sc_t (q . code) + lo_t sum(q) */
        float lt = vload_half(t, klo), sct = vload_half(t, ksc);
#pragma unroll
        for (int g = 0; g < G; g++)
            s[g * BS + t] = fma(sct, r[g], lt * qsum[g]);
#else
#pragma unroll
        for (int g = 0; g < G; g++)
            s[g * BS + t] = r[g];
#endif
    }
    mask_scores(s, t0, t1);
    block_softmax(s, st);
#if VQ == PKV_LAYOUT_PER_TOKEN && VD == PKV_LAYOUT_U8
    /* acc_c += p (lo_t + sc_t code) = (p sc_t) code, plus p lo_t to accl */
#pragma unroll
    for (int g = 0; g < G; g++) {
        floatS al = 0.0f;
        for (int c = 0; c < BS / SW; c++) {
            floatS p = vloadS(c, s + g * BS);
            al = fma(p, vload_halfS(c, vlo), al);
            vstoreS(p * vload_halfS(c, vsc), c, s + g * BS);
        }
        st->accl[g] += hsumS(al);
    }
    for (int x = 0; x < NV; x++) {
        floatV a[G];
#pragma unroll
        for (int g = 0; g < G; g++)
            a[g] = st->acc[g][x];
        for (int t = t0; t < t1; t++) {
            floatV cx = v_codes(v, (size_t)(t * NV + x));
#pragma unroll
            for (int g = 0; g < G; g++)
                a[g] = fma((floatV)s[g * BS + t], cx, a[g]);
        }
#pragma unroll
        for (int g = 0; g < G; g++)
            st->acc[g][x] = a[g];
    }
#elif VQ == PKV_LAYOUT_PER_TOKEN
    /* The same per u4 group j: acc_c += (p sc_tj) code for its channels,
     * plus sum_t p lo_tj, added to them straight away. The parameters,
     * [token][group], are converted a vector at a time, then gathered per
     * group in registers: on Intel's CPU runtime, converting them one at a
     * time took 15% more time per step (ctx 4096, batch 16), a transposed
     * copy in private memory 5% more. */
    float lo[BS * V_GROUPS], sc[BS * V_GROUPS];
    for (int c = 0; c < BS * V_GROUPS / SW; c++) {
        vstoreS(vload_halfS(c, vlo), c, lo);
        vstoreS(vload_halfS(c, vsc), c, sc);
    }
    for (int j = 0; j < V_GROUPS; j++) {
        float w[G * BS], pl[G];
        floatS al[G];
#pragma unroll
        for (int g = 0; g < G; g++)
            al[g] = 0.0f;
        for (int c = 0; c < BS / SW; c++) {
            floatS lc = gatherS(lo + c * SW * V_GROUPS + j, V_GROUPS);
            floatS sc_c = gatherS(sc + c * SW * V_GROUPS + j, V_GROUPS);
#pragma unroll
            for (int g = 0; g < G; g++) {
                floatS p = vloadS(c, s + g * BS);
                al[g] = fma(p, lc, al[g]);
                vstoreS(p * sc_c, c, w + g * BS);
            }
        }
#pragma unroll
        for (int g = 0; g < G; g++)
            pl[g] = hsumS(al[g]);
        for (int x = j * (NV / V_GROUPS); x < (j + 1) * (NV / V_GROUPS);
             x++) {
            floatV a[G];
#pragma unroll
            for (int g = 0; g < G; g++)
                a[g] = st->acc[g][x] + pl[g];
            for (int t = t0; t < t1; t++) {
                floatV cx = v_codes(v, (size_t)(t * NV + x));
#pragma unroll
                for (int g = 0; g < G; g++)
                    a[g] = fma((floatV)w[g * BS + t], cx, a[g]);
            }
#pragma unroll
            for (int g = 0; g < G; g++)
                st->acc[g][x] = a[g];
        }
    }
#else
    /* acc_c += sum_t p (lo_c + sc_c code) = sc_c sum_t p code + lo_c sum p */
    float ps[G];
#pragma unroll
    for (int g = 0; g < G; g++) {
        floatS pv = 0.0f;
        for (int c = 0; c < BS / SW; c++)
            pv += vloadS(c, s + g * BS);
        ps[g] = hsumS(pv);
    }
    for (int x = 0; x < NV; x++) {
        floatV bsum[G];
#pragma unroll
        for (int g = 0; g < G; g++)
            bsum[g] = 0.0f;
        for (int t = t0; t < t1; t++) {
            floatV cx = v_codes(v, (size_t)(t * NV + x));
#pragma unroll
            for (int g = 0; g < G; g++)
                bsum[g] = fma((floatV)s[g * BS + t], cx, bsum[g]);
        }
        floatV lx = V_ORDER(vload_halfV(x, vlo));
        floatV sx = V_ORDER(vload_halfV(x, vsc));
#pragma unroll
        for (int g = 0; g < G; g++)
            st->acc[g][x] =
                fma(sx, bsum[g], fma(lx, (floatV)ps[g], st->acc[g][x]));
    }
#endif
}
#endif

kernel void pkv_decode_partial(PKV_DECODE_PARTIAL_ARGS)
{
    decode_unit u = THIS_UNIT();
    uint t_begin = u.range.x, t_end = u.range.y;
    size_t row0 = u.row0;

    /* The query rows, pre-scaled, in the lane order of K. */
    floatV qv[G * NV];
    float qsum[G];
    ulong qrow = q_off + row0 * D;
    for (int g = 0; g < G; g++) {
        floatV sum = 0.0f;
        for (int x = 0; x < NV; x++) {
            ulong e = qrow + (ulong)(g * NV + x) * VW;
            qv[g * NV + x] = K_ORDER(
                (Q_F16(flags) ? vload_halfV(0, (global const half *)q + e)
                              : vloadV(0, q + e)) *
                scale);
            sum += qv[g * NV + x];
        }
        qsum[g] = hsum(sum);
    }

    state st;
    for (int g = 0; g < G; g++) {
        st.m[g] = -INFINITY;
        st.l[g] = 0.0f;
        st.accl[g] = 0.0f;
        for (int x = 0; x < NV; x++)
            st.acc[g][x] = 0.0f;
    }

    for (uint b0 = t_begin / BS * BS; b0 < t_end; b0 += BS) {
        int t0 = (int)(max(b0, t_begin) - b0);
        int t1 = (int)(min(b0 + BS, t_end) - b0);
        int dtype, next_dtype;
        global const uchar *vp, *nvp;
        global const uchar *kp = decode_block(&u, b0 / BS, &dtype, &vp);
        global const uchar *nxt =
            b0 + BS < t_end ? decode_block(&u, b0 / BS + 1, &next_dtype, &nvp)
                            : NULL;
#if QUANTIZED
        if (dtype != PKV_LAYOUT_F32)
            block_quant(kp, vp, t0, t1, qv, qsum, nxt, &st);
        else /* the staging tail */
            block_float(kp, vp, 0, t0, t1, qv, NULL, &st);
#else
        block_float(kp, vp, PKV_KV_DTYPE == PKV_LAYOUT_F16, t0, t1, qv, nxt,
                    &st);
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    for (int g = 0; g < G; g++) {
        decode_dest d = decode_dest_of(&u, row0 + g, st.m[g], st.l[g], 1, out,
                                       out_off, flags, part_acc, part_ml);
        for (int x = 0; x < NV; x++) {
            floatV y = V_UNORDER(st.acc[g][x] + st.accl[g]) * d.mul;
            ulong e = d.off + (ulong)x * VW;
            if (d.f16)
                vstore_halfV_rte(y, 0, (global half *)d.p + e);
            else
                vstoreV(y, 0, d.p + e);
        }
    }
}
