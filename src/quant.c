/* SPDX-License-Identifier: MIT */
/* The U8 and U4 quantizer, the reference every kernel follows (quant.h). */
#include "quant.h"

#include "half.h"
#include "kv_layout.h"

#include <math.h>
#include <string.h>

int pkv__u4_group_ok(uint32_t width, uint32_t head_dim)
{
    return width != 0 && head_dim % width == 0 &&
           (width % 8 == 0 || width == head_dim);
}

uint32_t pkv__quant_levels(int32_t dtype)
{
    return dtype == PKV_KV_DTYPE_U4 ? 15u : 255u;
}

void pkv__quant_params(float lo, float hi, uint32_t levels, uint16_t *lo16,
                       uint16_t *scale16)
{
    uint16_t l = pkv__f32_to_f16_down(lo);
    double lf = (double)pkv__f16_to_f32(l);
    double n = (double)levels;
    /* The f32 quotient may land just below the exact one; rounding up to
     * f16 then usually covers it, and the exact check below (lf + n * s
     * is exact in double: an f16 times n < 256 plus an f16) settles the
     * rest. */
    uint16_t s = pkv__f32_to_f16_up((float)(((double)hi - lf) / n));
    if (s == 0)
        s = 1; /* hi == lo exactly: any positive scale; codes are all 0 */
    while (lf + n * (double)pkv__f16_to_f32(s) < (double)hi)
        s++; /* positive finite f16 bits grow with the value */
    *lo16 = l;
    *scale16 = s;
}

uint8_t pkv__quant_code(float x, float lo, float scale, uint32_t levels)
{
    float t = floorf((x - lo) / scale + 0.5f);
    if (t <= 0.0f)
        return 0;
    if (t >= (float)levels)
        return (uint8_t)levels;
    return (uint8_t)t;
}

float pkv__quant_value(uint8_t q, float lo, float scale)
{
    return lo + (float)q * scale;
}

uint8_t pkv__quant_code_at(const uint8_t *row, int32_t dtype, uint32_t c)
{
    if (dtype == PKV_KV_DTYPE_U4)
        return (uint8_t)(((uint32_t)row[c / 2] >> (4u * (c % 2u))) & 15u);
    return row[c];
}

/* Channels of one group of f's per-token layout. */
static uint32_t token_width(const pkv__qformat *f, uint32_t head_dim)
{
    return PKV_LAYOUT_Q_WIDTH((uint32_t)f->dtype, f->u4_group, head_dim);
}

/* Where f's lo and scale arrays start in a part. */
static size_t lo_at(const pkv__qformat *f, uint32_t bs, uint32_t d)
{
    return PKV_LAYOUT_Q_LO_OFFSET((uint32_t)f->dtype, bs, d);
}

static size_t scale_at(const pkv__qformat *f, uint32_t bs, uint32_t d)
{
    return PKV_LAYOUT_Q_SCALE_OFFSET((uint32_t)f->dtype, f->group,
                                     f->u4_group, bs, d);
}

static size_t row_bytes(const pkv__qformat *f, uint32_t head_dim)
{
    return f->dtype == PKV_KV_DTYPE_U4 ? head_dim / 2 : head_dim;
}

/* Set code q of channel c in a row of codes. */
static void put_code(uint8_t *row, int32_t dtype, uint32_t c, uint8_t q)
{
    if (dtype != PKV_KV_DTYPE_U4)
        row[c] = q;
    else if (c % 2 == 0)
        row[c / 2] = q; /* the odd channel's nibble is or-ed in next */
    else
        row[c / 2] = (uint8_t)(row[c / 2] | q << 4);
}

/* The groups of one pass: n groups, group g covering channels
 * [c0[g], c0[g] + width) of tokens [t0, t0 + tokens) when per-token, or
 * channel g of every token when per-channel. Computes the stored
 * parameters of each (lo16/scale16 at index first + g in the part's
 * arrays) and the codes. */
static void quant_groups(const float *src, uint32_t block_size,
                         uint32_t head_dim, const pkv__qformat *f,
                         uint32_t t0, uint32_t tokens, uint8_t *part)
{
    int per_channel = f->group == PKV_QUANT_GROUP_PER_CHANNEL;
    uint32_t width = per_channel ? 1 : token_width(f, head_dim);
    uint32_t n = per_channel ? head_dim : head_dim / width;
    uint32_t first = per_channel ? 0 : t0 * n;
    uint32_t levels = pkv__quant_levels(f->dtype);
    float mn[PKV_LAYOUT_MAX_HEAD_DIM], mx[PKV_LAYOUT_MAX_HEAD_DIM];
    for (uint32_t g = 0; g < n; g++) {
        mn[g] = INFINITY;
        mx[g] = -INFINITY;
    }
    for (uint32_t t = t0; t < t0 + tokens; t++)
        for (uint32_t c = 0; c < head_dim; c++) {
            float x = src[(size_t)t * head_dim + c];
            uint32_t g = c / width;
            mn[g] = x < mn[g] ? x : mn[g];
            mx[g] = x > mx[g] ? x : mx[g];
        }
    float lo[PKV_LAYOUT_MAX_HEAD_DIM], scale[PKV_LAYOUT_MAX_HEAD_DIM];
    for (uint32_t g = 0; g < n; g++) {
        uint16_t l16, s16;
        pkv__quant_params(mn[g], mx[g], levels, &l16, &s16);
        lo[g] = pkv__f16_to_f32(l16);
        scale[g] = pkv__f16_to_f32(s16);
        /* memcpy: the parameter arrays are only 2-byte aligned. */
        memcpy(part + lo_at(f, block_size, head_dim) + 2u * (first + g),
               &l16, 2);
        memcpy(part + scale_at(f, block_size, head_dim) + 2u * (first + g),
               &s16, 2);
    }
    for (uint32_t t = t0; t < t0 + tokens; t++) {
        uint8_t *codes = part + t * row_bytes(f, head_dim);
        for (uint32_t c = 0; c < head_dim; c++) {
            uint32_t g = c / width;
            put_code(codes, f->dtype, c,
                     pkv__quant_code(src[(size_t)t * head_dim + c], lo[g],
                                     scale[g], levels));
        }
    }
}

void pkv__quant_part(const float *src, uint32_t block_size,
                     uint32_t head_dim, const pkv__qformat *f, uint8_t *part)
{
    if (f->group == PKV_QUANT_GROUP_PER_CHANNEL) {
        quant_groups(src, block_size, head_dim, f, 0, block_size, part);
        return;
    }
    for (uint32_t t = 0; t < block_size; t++)
        quant_groups(src, block_size, head_dim, f, t, 1, part);
}

/* n stored parameters (f32) from index first of the array at byte `at`. */
static void params(const uint8_t *part, size_t at, uint32_t first,
                   uint32_t n, float *out)
{
    uint16_t h[PKV_LAYOUT_MAX_HEAD_DIM];
    memcpy(h, part + at + 2u * first, 2u * n);
    pkv__f16_to_f32_n(h, out, n);
}

void pkv__dequant_part(const uint8_t *part, uint32_t block_size,
                       uint32_t head_dim, const pkv__qformat *f, float *dst)
{
    int per_channel = f->group == PKV_QUANT_GROUP_PER_CHANNEL;
    uint32_t width = per_channel ? 1 : token_width(f, head_dim);
    uint32_t n = per_channel ? head_dim : head_dim / width;
    size_t lo_off = lo_at(f, block_size, head_dim);
    size_t scale_off = scale_at(f, block_size, head_dim);
    float lo[PKV_LAYOUT_MAX_HEAD_DIM], scale[PKV_LAYOUT_MAX_HEAD_DIM];
    /* Each channel's lo and scale, so that the rows below are one plain
     * loop that the compiler vectorises: pkv__quant_value's arithmetic,
     * lo + code * scale, element by element. */
    float lo_c[PKV_LAYOUT_MAX_HEAD_DIM], scale_c[PKV_LAYOUT_MAX_HEAD_DIM];
    for (uint32_t t = 0; t < block_size; t++) {
        if (t == 0 || !per_channel) {
            params(part, lo_off, per_channel ? 0 : t * n, n, lo);
            params(part, scale_off, per_channel ? 0 : t * n, n, scale);
            for (uint32_t c = 0; c < head_dim; c++) {
                lo_c[c] = lo[c / width];
                scale_c[c] = scale[c / width];
            }
        }
        const uint8_t *codes = part + t * row_bytes(f, head_dim);
        float *out = dst + (size_t)t * head_dim;
        if (f->dtype == PKV_KV_DTYPE_U4) {
            for (uint32_t c = 0; c < head_dim; c += 2) {
                out[c] = lo_c[c] + (float)(codes[c / 2] & 15u) * scale_c[c];
                out[c + 1] =
                    lo_c[c + 1] + (float)(codes[c / 2] >> 4) * scale_c[c + 1];
            }
        } else {
            for (uint32_t c = 0; c < head_dim; c++)
                out[c] = lo_c[c] + (float)codes[c] * scale_c[c];
        }
    }
}
