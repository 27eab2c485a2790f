/* SPDX-License-Identifier: MIT */
/*
 * OpenCL programs (program.c): built from the embedded kernel files,
 * shared across the process and cached on disk (docs/design.md, "OpenCL
 * backend").
 */
#ifndef PKV_OPENCL_PROGRAM_H
#define PKV_OPENCL_PROGRAM_H

#include "alloc.h"
#include "device.h"
#include "error.h"

/* Where programs are built. */
typedef struct pkv__ocl_target {
    pkv__allocator alloc;  /* scratch: sources, binaries */
    cl_device_id device;
    cl_context context;    /* NULL (own_context only): pkv__ocl_program
                              adopts the process's context for the device
                              or creates it; the caller then owns a
                              reference */
    int own_context;       /* pkv's context: programs shared process-wide */
    const char *cache_dir; /* program binaries cached there; NULL: none */
    pkv_log_fn log;
    void *log_user;
    int32_t log_level;
} pkv__ocl_target;

/* The programs pkv builds. */
enum pkv__ocl_program_kind {
    PKV__CL_GENERIC = 0,       /* kv_append, paged_attention, block_copy */
    PKV__CL_DECODE = 1,        /* paged_decode.cl, specialised by -D options */
    PKV__CL_DECODE_GPU = 2,    /* decode_gpu.cl, specialised by -D options */
    PKV__CL_DECODE_INTEL = 3,  /* decode_intel.cl, specialised by -D options */
    PKV__CL_PREFILL_DPAS = 4,  /* prefill_dpas.cl, specialised by -D options */
    PKV__CL_PREFILL_INTEL = 5  /* prefill_intel.cl, specialised by -D
                                  options */
};

/* Whether dir may not hold program binaries this process loads: it
 * exists and is not a directory, or is owned by another user than this
 * one or root, or is writable by its group or others (anyone who can
 * write there could plant a file the driver deserializes). 1 with why[]
 * saying so, or 0 (an absent directory is 0: nothing is read from it). */
int pkv__ocl_cache_dir_unsafe(const char *dir, char *why, size_t why_size);

/* Drop the process-wide table of pkv's own contexts and programs
 * (pkv_opencl_release_programs). */
void pkv__ocl_release_shared(void);

/* Send a line to the target's log callback if level is enabled. */
void pkv__ocl_log(const pkv__ocl_target *target, int32_t level,
                 const char *fmt, ...) PKV__PRINTF(3, 4);

/* Build (or find) a program of `kind` with extra build options. */
pkv_status pkv__ocl_program(pkv__ocl_target *target, int kind,
                           const char *extra, cl_program *out);

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
extern const char *pkv__ocl_kernel_dir;

#endif
