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
typedef struct pkv__opencl_options {
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
} pkv__opencl_options;

/* Nonzero when an OpenCL device exists at all (PKV_BACKEND_AUTO tries
 * OpenCL only then, and falls back quietly otherwise). */
int pkv__opencl_available(void);

/* Whether the device that pkv__opencl_create would pick with these options
 * (the host's queue's device, or the named or first-GPU-else-any one) is a
 * GPU: *is_gpu 1 or 0. Errors as device choice reports them. */
pkv_status pkv__opencl_device_is_gpu(const pkv__opencl_options *options,
                                     int *is_gpu);

/* ops->create with options. */
pkv_status pkv__opencl_create(const pkv__backend_config *config,
                              const pkv__allocator *alloc,
                              const pkv__opencl_options *options,
                              pkv__backend **out);

/* pkv__backend_opencl named "opencl (platform / device (driver))", owned
 * by the backend: the engine uses it as its ops table, so that its log
 * line says which device runs. */
const pkv__backend_ops *pkv__opencl_ops(pkv__backend *backend);

/* The ICD files the OpenCL loader reads at its first call, with the
 * library each names: OCL_ICD_VENDORS (a file or a directory) or
 * /etc/OpenCL/vendors (device.c). For the log line before pkv's first
 * OpenCL call: a runtime that aborts the process as it loads (Intel's
 * under AddressSanitizer) is then named. */
void pkv__opencl_icd_summary(char *buf, size_t size);

/* The decode kernel variant the backend chose, and why: set at the first
 * all-decode step (NULL before it). Borrowed, valid while the backend
 * lives. */
const char *pkv__opencl_decode_variant(const pkv__backend *backend);

/* Block-table words the steps uploaded so far (each uploads only the
 * rows that changed since the previous step): for tests. */
uint64_t pkv__opencl_table_words(const pkv__backend *backend);

/* clFinish calls the host-tensor layer calls made so far (append,
 * attend, append_attend: one each): for tests. */
uint64_t pkv__opencl_finishes(const pkv__backend *backend);

/* clCreateBuffer calls the backend made so far: for tests (none per layer
 * once its buffers have grown to a step's size). */
uint64_t pkv__opencl_buffers_created(const pkv__backend *backend);

#endif
