/* SPDX-License-Identifier: MIT */
/*
 * OpenCL plumbing of the OpenCL backend (opencl_program.c): error names and
 * statuses, device choice, and programs built from the embedded kernels,
 * shared across the process and cached on disk (docs/design.md, "OpenCL
 * backend").
 */
#ifndef PKV_OPENCL_PROGRAM_H
#define PKV_OPENCL_PROGRAM_H

#include "alloc.h"
#include "error.h"

/* pkv is OpenCL 1.2 code; say so, or the headers note their default. */
#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#define PKV__CL_NAME_MAX 256

/* Where programs are built. */
typedef struct pkv__cl_target {
    pkv__allocator alloc;  /* scratch: sources, binaries */
    cl_device_id device;
    cl_context context;    /* NULL (own_context only): pkv__cl_program
                              adopts the process's context for the device
                              or creates it; the caller then owns a
                              reference */
    int own_context;       /* pkv's context: programs shared process-wide */
    const char *cache_dir; /* program binaries cached there; NULL: none */
    pkv_log_fn log;
    void *log_user;
    int32_t log_level;
} pkv__cl_target;

/* The programs pkv builds. */
enum pkv__cl_program_kind {
    PKV__CL_GENERIC = 0,     /* kv_append, paged_attention, block_copy */
    PKV__CL_DECODE = 1,      /* paged_decode.cl, specialised by -D options */
    PKV__CL_DECODE_GPU = 2,  /* decode_gpu.cl, specialised by -D options */
    PKV__CL_DECODE_INTEL = 3 /* decode_intel.cl, specialised by -D options */
};

/* The ICD files the OpenCL loader reads at its first call, with the
 * library each names: OCL_ICD_VENDORS (a file or a directory) or
 * /etc/OpenCL/vendors. For the log line before pkv's first OpenCL call: a
 * runtime that aborts the process as it loads (Intel's under
 * AddressSanitizer) is then named. */
void pkv__cl_icd_summary(char *buf, size_t size);

/* Drop the process-wide table of pkv's own contexts and programs
 * (pkv_opencl_release_programs). */
void pkv__cl_release_shared(void);

/* The name of an OpenCL error code, e.g. "CL_OUT_OF_RESOURCES". */
const char *pkv__cl_error_name(cl_int err);

/* Fail with the pkv status for err and "call: CL_NAME (code)". */
pkv_status pkv__cl_fail(cl_int err, const char *call);

/* The device whose platform or device name contains want (case-
 * insensitive), or with want NULL the first GPU, else the first device. */
pkv_status pkv__cl_pick_device(const char *want, cl_device_id *out);

/* Nonzero when some OpenCL platform has a device. */
int pkv__cl_any_device(void);

/* A device's or a platform's name string ("" when the query fails). */
void pkv__cl_device_string(cl_device_id device, cl_device_info what,
                           char *buf, size_t size);
void pkv__cl_platform_name(cl_platform_id platform, char *buf, size_t size);

/* Send a line to the target's log callback if level is enabled. */
void pkv__cl_log(const pkv__cl_target *target, int32_t level,
                 const char *fmt, ...) PKV__PRINTF(3, 4);

/* Build (or find) a program of `kind` with extra build options. */
pkv_status pkv__cl_program(pkv__cl_target *target, int kind,
                           const char *extra, cl_program *out);

#endif
