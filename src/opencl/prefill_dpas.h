/* SPDX-License-Identifier: MIT */
/*
 * The prefill variant on Intel's matrix engines (kernels/prefill_dpas.cl):
 * whether a device and geometry take it, its build, its launch. It runs
 * only when PKV_OPENCL_PREFILL=dpas asks for it (backend.c): no runtime
 * here executes DPAS, so it is checked through the emulated builtin and
 * the offline compiler's dumps only, and staging K and V, not the
 * products, is most of its instructions (docs/performance.md, "Prefill on
 * DG2's matrix engines"); AUTO keeps the intel kernel until it is
 * measured on a DG2.
 */
#ifndef PKV_OPENCL_PREFILL_DPAS_H
#define PKV_OPENCL_PREFILL_DPAS_H

#include "internal.h"

/* Rows of a tile at head_dim (4 up to 64, else 2: the accumulators then
 * fit in registers on DG2). */
uint32_t pkv__dpas_rows(uint32_t head_dim);

/* Local memory of a work-group, in bytes. */
uint64_t pkv__dpas_local_bytes(uint32_t head_dim, uint32_t group);

/* The extension whose builtin the kernel calls: where a device lacks it,
 * the program carries kernels/dpas_emulation.cl's. */
#define PKV__DPAS_EXTENSION "cl_intel_subgroup_matrix_multiply_accumulate"

/* Whether a device whose work-groups hold up to max_group items and
 * local_mem bytes takes the variant for this geometry: 1, or 0 with why[]
 * saying why not. */
int pkv__dpas_takes(uint32_t head_dim, uint32_t group, size_t max_group,
                    uint64_t local_mem, char *why, size_t why_size);

/* Build the variant for the backend's geometry as its prefill kernel
 * (b->prefill_program, b->k_prefill; b->tile_rows its rows a tile,
 * b->prefill_lanes its work-group). Where the device lacks the extension
 * the builtin is emulated: the test's path on Intel's CPU runtime. */
pkv_status pkv__ocl_dpas_build(pkv__backend *b);

/* Attention of one layer over the step's tiles (b->num_tiles). */
pkv_status pkv__ocl_dpas_enqueue(pkv__backend *b, uint32_t layer, kt q,
                                 kt out, float scale, uint32_t window);

#endif
