/* SPDX-License-Identifier: MIT */
/*
 * The OpenCL backend (src/opencl/) as the rest of pkv sees it: the
 * pkv__backend_ops of backend.h on an OpenCL 1.2 device, created with the
 * engine's device options. No OpenCL type appears here: only the files of
 * src/opencl/ include the OpenCL headers (internal.h).
 */
#ifndef PKV_OPENCL_OPENCL_H
#define PKV_OPENCL_OPENCL_H

#include "backend.h"

#include <stdint.h>

extern const pkv__backend_ops pkv__backend_opencl;

/* What the engine passes beyond the backend config. */
typedef struct pkv__ocl_options {
    const char *device;    /* substring of the platform or device name
                              (case-insensitive); NULL: the environment
                              variable PKV_OPENCL_DEVICE, else the first
                              GPU, else the first device */
    const char *cache_dir; /* program binaries are cached there; NULL: no
                              on-disk cache */
    void *context;         /* the host's cl_context, with its
                              cl_command_queue; both NULL: pkv's */
    void *queue;
    pkv_log_fn log;        /* where device choice and cache events go */
    void *log_user;
    int32_t log_level;
} pkv__ocl_options;

/* Nonzero when an OpenCL device exists at all (PKV_BACKEND_KIND_AUTO tries
 * OpenCL only then, and falls back quietly otherwise). */
int pkv__ocl_available(void);

/* Whether the device that pkv__ocl_create would pick with these options
 * (the host's queue's device, or the named or first-GPU-else-any one) is a
 * GPU: *is_gpu 1 or 0. Errors as device choice reports them. */
pkv_status pkv__ocl_device_is_gpu(const pkv__ocl_options *options,
                                     int *is_gpu);

/* ops->create with options. */
pkv_status pkv__ocl_create(const pkv__backend_config *config,
                              const pkv__allocator *alloc,
                              const pkv__ocl_options *options,
                              pkv__backend **out);

/* pkv__backend_opencl named "opencl (platform / device (driver))", owned
 * by the backend: the engine uses it as its ops table, so that its log
 * line says which device runs. */
const pkv__backend_ops *pkv__ocl_ops(pkv__backend *backend);

/* The ICD files the OpenCL loader reads at its first call, with the
 * library each names: OCL_ICD_VENDORS (a file or a directory) or
 * /etc/OpenCL/vendors (device.c). For the log line before pkv's first
 * OpenCL call: a runtime that aborts the process as it loads (Intel's
 * under AddressSanitizer) is then named. */
void pkv__ocl_icd_summary(char *buf, size_t size);

/* Whether an ops table is the OpenCL backend's (or a copy of it). */
int pkv__ocl_is(const pkv__backend_ops *ops);

/* The backend's cl_context and cl_command_queue (borrowed). */
void pkv__ocl_handles(const pkv__backend *backend, void **context,
                         void **queue);

/* Release the programs shared across the process (pkv_opencl.h's
 * pkv_opencl_release_programs). */
void pkv__ocl_release_programs(void);

/* The decode kernel variant the backend chose at create, and why.
 * Borrowed, valid while the backend lives. */
const char *pkv__ocl_decode_variant(const pkv__backend *backend);

/* The attention kernel of steps with more rows than sequences that the
 * backend chose at create ("rows: ...", "tiles: ..." or "intel: ..."),
 * and why. Borrowed, valid while the backend lives. */
const char *pkv__ocl_prefill_variant(const pkv__backend *backend);

/* Block-table words the steps uploaded so far (each uploads only the
 * rows that changed since the previous step): for tests. */
uint64_t pkv__ocl_table_words(const pkv__backend *backend);

/* clFinish calls the host-tensor layer calls made so far (append,
 * attend, append_attend: one each): for tests. */
uint64_t pkv__ocl_finishes(const pkv__backend *backend);

/* clCreateBuffer calls the backend made so far: for tests (none per layer
 * once its buffers have grown to a step's size). */
uint64_t pkv__ocl_buffers_created(const pkv__backend *backend);

#endif
