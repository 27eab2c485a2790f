/* SPDX-License-Identifier: MIT */
/*
 * IEEE 754 binary16 <-> binary32 conversion in portable C (no _Float16, no
 * F16C), bit-exact on every platform so that the CPU oracle, the stored
 * cache and the OpenCL kernels agree on what an f16 holds.
 */
#ifndef PKV_HALF_H
#define PKV_HALF_H

#include <stdint.h>

/* Largest finite f16. */
#define PKV__F16_MAX 65504.0f

/* Exact widening (every f16 is an f32). NaN stays NaN, inf stays inf. */
float pkv__f16_to_f32(uint16_t h);

/* Round to nearest, ties to even; |x| >= 65520 becomes inf, as IEEE says. */
uint16_t pkv__f32_to_f16(float x);

/* Round toward -inf: the largest f16 <= x (-inf when x < -65504). */
uint16_t pkv__f32_to_f16_down(float x);

/* Round toward +inf: the smallest f16 >= x (+inf when x > 65504). */
uint16_t pkv__f32_to_f16_up(float x);

/* Convert n elements each way (the f16 KV dtype's storage path). */
void pkv__f32_to_f16_n(const float *src, uint16_t *dst, uint32_t n);
void pkv__f16_to_f32_n(const uint16_t *src, float *dst, uint32_t n);

#endif
