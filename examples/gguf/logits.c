/* SPDX-License-Identifier: MIT */
/* The logits (logits.h). */
#include "logits.h"

#include <ggml-cpu.h>

#include <stddef.h>
#include <string.h>

enum {
    QK = 32,         /* values in a Q8_0 block */
    MAX_ROWS = 8,    /* rows computed in one pass over the matrix */
    MAX_BLOCKS = 64, /* blocks in a row: 2,048 columns */
};

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#include <stdatomic.h>

/* ggml's block_q8_0: a half-precision scale, then 32 signed bytes. */
typedef struct {
    uint16_t d;
    int8_t qs[QK];
} q8_block;

#define LOGITS_TARGET __attribute__((target("avx2,fma,f16c")))

/* Logits r0 to r1 of the matrix w (rows of nb blocks, stride w_stride
 * bytes) for the quantized rows y (nb blocks each, their scales as floats
 * in dy, block b's at dy[b * MAX_ROWS]), into dst (row j at dst + j * ld).
 * ggml's vec_dot_q8_0_q8_0 on AVX2 sums a block into 8 integer lanes of 4
 * products each, adds each block's lanes, times the product of the two
 * scales, into 8 float accumulators by FMA, block after block, then the 8
 * lanes in a fixed order. This does the same operations in the same
 * order (the lanes as ggml's AVX2 path makes them: |x| times y with x's
 * sign, pairs summed in 16 bits, which Q8_0's bytes of at most 127 in
 * magnitude cannot overflow, then pairs of pairs), so the bits are
 * ggml's, with each block of w read once for every row. Inlined with a
 * constant g, so that the g accumulators live in registers. */
LOGITS_TARGET static inline __attribute__((always_inline)) void
logits_rows(const char *w, size_t w_stride, uint32_t nb, const q8_block *y,
            const float *dy, uint32_t g, float *dst, size_t ld, size_t r0,
            size_t r1)
{
    const __m256i ones = _mm256_set1_epi16(1);
    for (size_t r = r0; r < r1; r++) {
        const q8_block *wr = (const q8_block *)(const void *)(w + r * w_stride);
        __m256 acc[MAX_ROWS];
        _Pragma("GCC unroll 8") for (uint32_t j = 0; j < g; j++)
            acc[j] = _mm256_setzero_ps();
        for (uint32_t b = 0; b < nb; b++) {
            __m256i x =
                _mm256_loadu_si256((const __m256i *)(const void *)wr[b].qs);
            __m256i ax = _mm256_sign_epi8(x, x);
            /* Each row's scale product, as ggml's: float times float. */
            float scale[MAX_ROWS] __attribute__((aligned(32)));
            _mm256_store_ps(scale,
                            _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(wr[b].d)),
                                          _mm256_load_ps(&dy[b * MAX_ROWS])));
            _Pragma("GCC unroll 8") for (uint32_t j = 0; j < g; j++) {
                __m256i sy = _mm256_sign_epi8(
                    _mm256_loadu_si256(
                        (const __m256i *)(const void *)y[j * nb + b].qs),
                    x);
                __m256i lanes =
                    _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), ones);
                acc[j] = _mm256_fmadd_ps(_mm256_broadcast_ss(&scale[j]),
                                         _mm256_cvtepi32_ps(lanes), acc[j]);
            }
        }
        /* ggml's hsum_float_8. */
        _Pragma("GCC unroll 8") for (uint32_t j = 0; j < g; j++) {
            __m128 s = _mm256_extractf128_ps(acc[j], 1);
            s = _mm_add_ps(s, _mm256_castps256_ps128(acc[j]));
            s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            s = _mm_add_ss(s, _mm_movehdup_ps(s));
            dst[j * ld + r] = _mm_cvtss_f32(s);
        }
    }
}

/* The node: every thread of ggml's pool quantizes the rows as
 * ggml_mul_mat does (the CPU backend's own Q8_0 quantizer, the bits its
 * product sees) and computes its share of the matrix's rows. */
LOGITS_TARGET static void logits_node(struct ggml_tensor *dst, int ith,
                                      int nth, void *user)
{
    (void)user;
    const struct ggml_tensor *w = dst->src[0], *x = dst->src[1];
    uint32_t nb = (uint32_t)(w->ne[0] / QK), g = (uint32_t)x->ne[1];
    size_t m = (size_t)w->ne[1];
    q8_block y[MAX_ROWS * MAX_BLOCKS];
    float dy[MAX_BLOCKS * MAX_ROWS] __attribute__((aligned(32)));
    memset(dy, 0, sizeof dy);
    ggml_from_float_t quantize = ggml_get_type_traits_cpu(GGML_TYPE_Q8_0)
                                     ->from_float;
    for (uint32_t j = 0; j < g; j++) {
        quantize((const float *)(const void *)((const char *)x->data +
                                               j * x->nb[1]),
                 &y[j * nb], w->ne[0]);
        for (uint32_t b = 0; b < nb; b++)
            dy[b * MAX_ROWS + j] = _cvtsh_ss(y[j * nb + b].d);
    }
    size_t share = (m + (size_t)nth - 1) / (size_t)nth;
    size_t r0 = share * (size_t)ith;
    size_t r1 = r0 + share < m ? r0 + share : m;
    if (r0 >= r1)
        return;
    const char *wd = w->data;
    float *out = dst->data;
    size_t ld = dst->nb[1] / sizeof *out;
    switch (g) {
#define LOGITS_CASE(k)                                                      \
    case k:                                                                 \
        logits_rows(wd, w->nb[1], nb, y, dy, k, out, ld, r0, r1);           \
        break;
        LOGITS_CASE(2)
        LOGITS_CASE(3)
        LOGITS_CASE(4)
        LOGITS_CASE(5)
        LOGITS_CASE(6)
        LOGITS_CASE(7)
        LOGITS_CASE(8)
#undef LOGITS_CASE
    default:
        break;
    }
}

/* Whether this CPU has AVX2, FMA and F16C. Asked once (cpuid traps to
 * the hypervisor in a VM, and every step of 2 to 8 logit rows asks twice);
 * F16C through cpuid (leaf 1, ecx bit 29): clang's __builtin_cpu_supports
 * does not know it. */
static bool cpu_has_avx2(void)
{
    static _Atomic int known; /* 0 not asked yet, 1 no, 2 yes */
    int k = atomic_load_explicit(&known, memory_order_relaxed);
    if (k == 0) {
        unsigned int eax, ebx, ecx, edx;
        __builtin_cpu_init();
        bool has = __get_cpuid(1, &eax, &ebx, &ecx, &edx) &&
                   (ecx & (1u << 29)) && __builtin_cpu_supports("avx2") &&
                   __builtin_cpu_supports("fma");
        k = has ? 2 : 1;
        atomic_store_explicit(&known, k, memory_order_relaxed);
    }
    return k == 2;
}

bool gg_logits_own(const struct ggml_tensor *output, uint32_t rows)
{
    return rows >= 2 && rows <= MAX_ROWS &&
           output->type == GGML_TYPE_Q8_0 &&
           ggml_blck_size(GGML_TYPE_Q8_0) == QK &&
           ggml_type_size(GGML_TYPE_Q8_0) == sizeof(q8_block) &&
           output->ne[0] % QK == 0 && output->ne[0] / QK <= MAX_BLOCKS &&
           output->ne[2] == 1 && output->ne[3] == 1 && cpu_has_avx2();
}

struct ggml_tensor *gg_logits(struct ggml_context *ctx,
                              struct ggml_tensor *output,
                              struct ggml_tensor *x)
{
    if (x->ne[0] != output->ne[0] || x->ne[2] != 1 || x->ne[3] != 1 ||
        x->type != GGML_TYPE_F32 || x->nb[0] != sizeof(float) ||
        !gg_logits_own(output, (uint32_t)x->ne[1]))
        return ggml_mul_mat(ctx, output, x);
    struct ggml_tensor *args[2] = {output, x};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, output->ne[1], x->ne[1], 1, 1,
                          args, 2, logits_node, GGML_N_TASKS_MAX, NULL);
}

#else /* no x86 intrinsics: ggml's product throughout */

bool gg_logits_own(const struct ggml_tensor *output, uint32_t rows)
{
    (void)output;
    (void)rows;
    return false;
}

struct ggml_tensor *gg_logits(struct ggml_context *ctx,
                              struct ggml_tensor *output,
                              struct ggml_tensor *x)
{
    return ggml_mul_mat(ctx, output, x);
}

#endif
