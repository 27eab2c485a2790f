/* SPDX-License-Identifier: MIT */
/*
 * The OpenCL backend (backend_opencl.c): the pkv__backend_ops of
 * backend.h on an OpenCL 1.2 device, plus what the ops table has no room
 * for: the engine's device options at creation, and attend with the host's
 * cl_mem tensors (pkv_opencl.h).
 */
#ifndef PKV_BACKEND_OPENCL_H
#define PKV_BACKEND_OPENCL_H

#include "backend.h"

/* pkv is OpenCL 1.2 code; say so, or the headers note their default. */
#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <stddef.h>
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
    cl_context context;    /* the host's, with queue; both NULL: pkv's */
    cl_command_queue queue;
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

/* Whether an ops table is the OpenCL backend's (or a copy of it). */
int pkv__opencl_is(const pkv__backend_ops *ops);

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

/* The backend's context and queue (borrowed). */
void pkv__opencl_handles(const pkv__backend *backend, cl_context *context,
                         cl_command_queue *queue);

/* One cl_mem attend tensor: [rows][heads][head_dim] of f32 or f16 from
 * byte offset `offset` of `mem`. */
typedef struct pkv__device_tensor {
    cl_mem mem;
    uint64_t offset;
    int32_t dtype; /* pkv_tensor_dtype */
} pkv__device_tensor;

/* append + attend of one layer with cl_mem tensors: checks the buffers
 * (context, size, alignment), then only enqueues work on the queue; no
 * wait. K and V are not scanned for non-finite values. */
pkv_status pkv__opencl_attend_device(pkv__backend *backend, uint32_t layer,
                                     const pkv__device_tensor *q,
                                     const pkv__device_tensor *k,
                                     const pkv__device_tensor *v,
                                     const pkv__device_tensor *out,
                                     float scale, uint32_t sliding_window);

/* The kernel sources, embedded at build time (cmake/embed.cmake), in the
 * order they are concatenated into the program. */
typedef struct pkv__kernel_file {
    const char *name; /* path relative to the source tree */
    const unsigned char *data;
    size_t size;
} pkv__kernel_file;
extern const pkv__kernel_file pkv__kernel_files[];
extern const unsigned pkv__kernel_num_files;

/* Test hook: when set, the kernel files are read from this directory (the
 * same relative names) instead of the embedded copies. Builds with
 * PKV_KERNELS_FROM_SOURCE read them from the source tree by default. */
extern const char *pkv__opencl_kernel_dir;

#endif
