/* SPDX-License-Identifier: MIT */
#include "dense_ref.h"

#include <math.h>
#include <stdlib.h>

void dense_ref_attention(const float *q, const float *k, const float *v,
                         uint32_t nq, uint32_t ctx, uint32_t hq, uint32_t hkv,
                         uint32_t d, double scale, uint32_t window,
                         const uint32_t *rows, uint32_t n_rows, double *out)
{
    if (scale == 0.0)
        scale = 1.0 / sqrt((double)d);
    double *s = malloc((size_t)ctx * sizeof *s);
    uint32_t group = hq / hkv;
    for (uint32_t i = 0; i < n_rows; i++) {
        uint32_t r = rows[i], tok = ctx - nq + r;
        uint32_t lo = window > 0 && tok + 1 > window ? tok + 1 - window : 0;
        for (uint32_t h = 0; h < hq; h++) {
            const float *qr = q + ((size_t)r * hq + h) * d;
            uint32_t g = h / group;
            double m = -INFINITY, l = 0.0;
            for (uint32_t j = lo; j <= tok; j++) {
                const float *kr = k + ((size_t)j * hkv + g) * d;
                double acc = 0.0;
                for (uint32_t c = 0; c < d; c++)
                    acc += (double)qr[c] * (double)kr[c];
                s[j] = acc * scale;
                m = s[j] > m ? s[j] : m;
            }
            double *o = out + ((size_t)i * hq + h) * d;
            for (uint32_t c = 0; c < d; c++)
                o[c] = 0.0;
            for (uint32_t j = lo; j <= tok; j++) {
                double p = exp(s[j] - m);
                const float *vr = v + ((size_t)j * hkv + g) * d;
                l += p;
                for (uint32_t c = 0; c < d; c++)
                    o[c] += p * (double)vr[c];
            }
            for (uint32_t c = 0; c < d; c++)
                o[c] /= l;
        }
    }
    free(s);
}
