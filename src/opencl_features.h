/* SPDX-License-Identifier: MIT */
/* Which kernel variant a device gets, from its extension string. Pure
 * functions, so the choice is tested without the device. */
#ifndef PKV_OPENCL_FEATURES_H
#define PKV_OPENCL_FEATURES_H

#include <stddef.h>
#include <stdint.h>

/* Whether the space-separated extension list holds exactly `name`. */
int pkv__cl_has_extension(const char *extensions, const char *name);

/* Build options of the decode program's Intel GPU path
 * (kernels/paged_decode.cl): "-cl-std=CL2.0 -DPKV_INTEL_SUBGROUPS", plus
 * "-DPKV_INTEL_FP16" with cl_khr_fp16, written to buf when the device has
 * cl_intel_subgroups and cl_intel_subgroups_short and head_dim is 32, 64,
 * 128 or 256; "" otherwise. Returns the launch's subgroup width: 16 on
 * the Intel path (local size (16, 1, 1)), 1 on the generic one. */
uint32_t pkv__decode_variant(const char *extensions, uint32_t head_dim,
                             char *buf, size_t size);

#endif
