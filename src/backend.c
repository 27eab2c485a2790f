/* SPDX-License-Identifier: MIT */
/* Which backend an engine runs on (backend.h): the choice that
 * pkv_engine_params asks for, its creation, and the block size that
 * follows the device. */
#include "backend.h"

#include "error.h"

#ifdef PKV_HAVE_OPENCL
#include "opencl/opencl.h"
#endif

#include <string.h>

#ifdef PKV_HAVE_OPENCL
static pkv__ocl_options opencl_options(const pkv_engine_params *p)
{
    pkv__ocl_options o;
    memset(&o, 0, sizeof o);
    o.device = p->opencl_device;
    o.cache_dir = p->program_cache_dir;
    o.context = p->opencl_context;
    o.queue = p->opencl_queue;
    o.log = p->log;
    o.log_user = p->log_user;
    o.log_level = p->log_level;
    return o;
}

/* AUTO on a machine without any OpenCL device takes the CPU backend. */
static int no_device_for_auto(const pkv_engine_params *p)
{
    return p->backend == PKV_BACKEND_KIND_AUTO && p->opencl_context == NULL &&
           p->opencl_queue == NULL && !pkv__ocl_available();
}

/* AUTO takes the CPU backend also where the OpenCL device is the CPU
 * itself (PoCL, Intel's CPU runtime) and the host lends its threads: the
 * CPU backend then runs on those threads, and is faster there
 * (docs/performance.md, "The default backend on a CPU"). A host that
 * lends none keeps the OpenCL runtime's own threads. */
static int cpu_device_with_threads(const pkv_engine_params *p)
{
    if (p->backend != PKV_BACKEND_KIND_AUTO || p->opencl_context != NULL ||
        p->opencl_queue != NULL || p->parallel == NULL ||
        p->parallel_workers < 2)
        return 0;
    pkv__ocl_options o = opencl_options(p);
    int gpu = 1;
    return pkv__ocl_device_is_gpu(&o, &gpu) == PKV_OK && !gpu;
}
#endif

void pkv__backend_log_loader(const pkv_engine_params *p)
{
#ifdef PKV_HAVE_OPENCL
    if (p->backend != PKV_BACKEND_KIND_CPU && p->log != NULL &&
        PKV_LOG_LEVEL_INFO <= p->log_level) {
        char icd[PKV__ERROR_MAX - 64];
        pkv__ocl_icd_summary(icd, sizeof icd);
        pkv__log(p->log, p->log_user, p->log_level, PKV_LOG_LEVEL_INFO,
                 "opencl: the ICD loader reads %s", icd);
    }
#else
    (void)p;
#endif
}

uint32_t pkv__backend_default_block_size(const pkv_engine_params *p)
{
    enum { GPU_BLOCK = 16, CPU_BLOCK = 64 };
#ifdef PKV_HAVE_OPENCL
    if (p->backend == PKV_BACKEND_KIND_CPU ||
        (p->backend == PKV_BACKEND_KIND_AUTO && p->opencl_queue == NULL &&
         !pkv__ocl_available()))
        return CPU_BLOCK;
    pkv__ocl_options o = opencl_options(p);
    int gpu = 0;
    /* A device that cannot be chosen fails (or falls back) in
     * pkv__backend_create_for, with the message; here it only sets the
     * default. */
    if (pkv__ocl_device_is_gpu(&o, &gpu) != PKV_OK)
        return p->backend == PKV_BACKEND_KIND_OPENCL ? GPU_BLOCK : CPU_BLOCK;
    return gpu ? GPU_BLOCK : CPU_BLOCK;
#else
    (void)p;
    return CPU_BLOCK;
#endif
}

pkv_status pkv__backend_create_for(const pkv_engine_params *p,
                                   const pkv__backend_config *config,
                                   const pkv__allocator *alloc,
                                   const pkv__backend_ops **ops,
                                   pkv__backend **backend)
{
    *ops = NULL;
    *backend = NULL;
#ifdef PKV_HAVE_OPENCL
    if (no_device_for_auto(p)) {
        pkv__log(p->log, p->log_user, p->log_level, PKV_LOG_LEVEL_DEBUG,
                 "no OpenCL device; CPU backend");
    } else if (cpu_device_with_threads(p)) {
        pkv__log(p->log, p->log_user, p->log_level, PKV_LOG_LEVEL_INFO,
                 "the OpenCL device is a CPU and the host lends %u threads: "
                 "CPU backend (PKV_BACKEND_KIND_OPENCL runs the device)",
                 (unsigned)p->parallel_workers);
    } else if (p->backend != PKV_BACKEND_KIND_CPU) {
        pkv__ocl_options o = opencl_options(p);
        pkv_status st = pkv__ocl_create(config, alloc, &o, backend);
        if (st == PKV_OK) {
            /* Named after the device: the engine's log line says which. */
            *ops = pkv__ocl_ops(*backend);
            return PKV_OK;
        }
        /* AUTO falls back unless the host handed its own queue, or host
         * memory ran out (the CPU backend needs more of it). */
        if (p->backend == PKV_BACKEND_KIND_OPENCL || o.context != NULL ||
            o.queue != NULL || st == PKV_ERR_OUT_OF_MEMORY)
            return st;
        pkv__log(p->log, p->log_user, p->log_level, PKV_LOG_LEVEL_WARN,
                 "OpenCL backend unavailable (%s); using the CPU backend",
                 pkv_last_error());
    }
#else
    if (p->backend == PKV_BACKEND_KIND_OPENCL)
        return pkv__fail(PKV_ERR_UNSUPPORTED,
                         "the OpenCL backend is not built into this pkv");
#endif
    pkv_status st = pkv__backend_cpu.create(config, alloc, backend);
    if (st == PKV_OK)
        *ops = &pkv__backend_cpu;
    return st;
}
