/* SPDX-License-Identifier: MIT */
/*
 * The prefill variant on Intel's matrix engines (kernels/prefill_dpas.cl):
 * whether a device and geometry take it, its build, its launch. The
 * choice of prefill kernel (backend.c) decides whether to use it.
 */
#ifndef PKV_OPENCL_PREFILL_DPAS_H
#define PKV_OPENCL_PREFILL_DPAS_H

#include "internal.h"

/* A built variant: its program and kernel, and the rows of a tile (the
 * step's tiles must be built with tile_rows = rows). */
typedef struct pkv__ocl_dpas {
    cl_program program;
    cl_kernel kernel;
    uint32_t rows;
} pkv__ocl_dpas;

/* Rows of a tile at head_dim (4 up to 64, else 2: the accumulators then
 * fit in registers on DG2). */
uint32_t pkv__dpas_rows(uint32_t head_dim);

/* Local memory of a work-group, in bytes. */
uint64_t pkv__dpas_local_bytes(uint32_t head_dim, uint32_t group);

/* Whether a device with these extensions (CL_DEVICE_EXTENSIONS), largest
 * work-group and local memory takes the variant for this geometry: 1, or
 * 0 with why[] saying why not. */
int pkv__dpas_accepts(const char *extensions, uint32_t head_dim,
                      uint32_t group, size_t max_group, uint64_t local_mem,
                      char *why, size_t why_size);

/* Build the variant for the backend's geometry into *out (zeroed on
 * failure). Where the device lacks the extension the program carries
 * kernels/dpas_emulation.cl's builtin: the test's path, never chosen. */
pkv_status pkv__ocl_dpas_build(pkv__backend *b, pkv__ocl_dpas *out);

/* Attention of one layer over the step's tiles (b->num_tiles, built with
 * tile_rows = d->rows). */
pkv_status pkv__ocl_dpas_enqueue(pkv__backend *b, const pkv__ocl_dpas *d,
                                 uint32_t layer, kt q, kt out, float scale,
                                 uint32_t window);

void pkv__ocl_dpas_release(pkv__ocl_dpas *d);

#endif
