/* SPDX-License-Identifier: MIT */
/* binary16 <-> binary32 conversion, bit-exact, in portable C (half.h). */
#include "half.h"

#include <string.h>

static uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

float pkv__f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    if (e == 0x1fu)
        return bits_f32(sign | 0x7f800000u | (m << 13));
    if (e != 0)
        return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
    if (m == 0)
        return bits_f32(sign);
    /* Subnormal f16 (m * 2^-24): normalise into an f32 exponent. */
    e = 113u;
    while ((m & 0x400u) == 0) {
        m <<= 1;
        e--;
    }
    return bits_f32(sign | (e << 23) | ((m & 0x3ffu) << 13));
}

uint16_t pkv__f32_to_f16(float x)
{
    uint32_t u = f32_bits(x);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) /* inf, or NaN kept quiet and non-zero */
        return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
    if (a >= 0x477ff000u) /* >= 65520: rounds past the largest finite */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: an f16 subnormal or zero */
        uint32_t e = a >> 23;
        if (e < 102u) /* below 2^-25, half the smallest subnormal */
            return (uint16_t)sign;
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14..24 */
        uint32_t q = m >> shift;
        uint32_t r = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (r > half || (r == half && (q & 1u)))
            q++; /* may carry into the smallest normal: still correct */
        return (uint16_t)(sign | q);
    }
    /* Normal: rebias the exponent by 127 - 15; the rounding carry may
     * propagate into the exponent, which is the right result. */
    uint32_t q = (a >> 13) - (112u << 10);
    uint32_t r = a & 0x1fffu;
    if (r > 0x1000u || (r == 0x1000u && (q & 1u)))
        q++;
    return (uint16_t)(sign | q);
}

/* Directed rounding from the nearest value: it is at most one step from the
 * directed result, on the wrong side only when it is not exact. */
static uint16_t f16_next_up(uint16_t h)
{
    if (h == 0x8000u)
        return 0x0001u;
    return (uint16_t)((h & 0x8000u) ? h - 1u : h + 1u);
}

static uint16_t f16_next_down(uint16_t h)
{
    if (h == 0x0000u)
        return 0x8001u;
    return (uint16_t)((h & 0x8000u) ? h + 1u : h - 1u);
}

uint16_t pkv__f32_to_f16_down(float x)
{
    uint16_t h = pkv__f32_to_f16(x);
    if (x == x && pkv__f16_to_f32(h) > x)
        h = f16_next_down(h);
    return h;
}

uint16_t pkv__f32_to_f16_up(float x)
{
    uint16_t h = pkv__f32_to_f16(x);
    if (x == x && pkv__f16_to_f32(h) < x)
        h = f16_next_up(h);
    return h;
}

void pkv__f32_to_f16_n(const float *src, uint16_t *dst, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        dst[i] = pkv__f32_to_f16(src[i]);
}

void pkv__f16_to_f32_n(const uint16_t *src, float *dst, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        dst[i] = pkv__f16_to_f32(src[i]);
}
