/* SPDX-License-Identifier: MIT */
/*
 * pkv OpenCL interop: run pkv on the host's own OpenCL context and queue,
 * and pass cl_mem tensors to pkv_engine_attend so that nothing crosses to
 * host memory. Requires a pkv built with OpenCL (PKV_WITH_OPENCL) and the
 * OpenCL headers (define CL_TARGET_OPENCL_VERSION before including this if
 * you use the 1.2 API, as pkv does).
 *
 * cl_mem tensors: set pkv_tensor.memory to PKV_TENSOR_MEMORY_OPENCL and data
 * to the cl_mem (pkv_tensor_opencl below does both); offset is in bytes and
 * must be a multiple of 4 elements. q, k, v and out must then all be cl_mem
 * buffers of the engine's context (pkv_engine_get_opencl), f32 or f16. attend
 * checks the buffers' context and size, then only enqueues work on the
 * engine's queue: it does not wait, so the host's kernels and pkv's run back
 * to back on an in-order queue. Unlike host tensors, cl_mem K and V are not
 * scanned for NaN, infinity or (f16 and u8 caches) values beyond +-65504:
 * keeping them finite is the host's job, and a non-finite value written to a
 * block shared by a prefix can reach other sequences.
 *
 * Host memory without a copy: host tensors (PKV_TENSOR_MEMORY_HOST) are
 * borrowed for one call, so pkv copies them through its own buffers. On a
 * device that shares host memory (CL_DEVICE_HOST_UNIFIED_MEMORY: Intel iGPUs),
 * a host that keeps its q, k, v and out buffers can wrap each once with
 * clCreateBuffer(CL_MEM_USE_HOST_PTR) in the engine's context, at the device's
 * CL_DEVICE_MEM_BASE_ADDR_ALIGN, pass the wraps as cl_mem tensors, and map out
 * (clEnqueueMapBuffer) to read the results. The host knows how long its memory
 * lives; pkv could not (`pkv-bench interop`).
 */
#ifndef PKV_PKV_OPENCL_H
#define PKV_PKV_OPENCL_H

#include "pkv/pkv.h"

#include <CL/cl.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Make the engine run on the host's context and queue: stores them in
 * params->opencl_context and opencl_queue. The queue must belong to the
 * context and execute in order. The engine retains both until it is
 * destroyed. Pass NULL, NULL to go back to pkv's own context.
 * Errors: PKV_ERR_INVALID_ARGUMENT for a NULL params or only one of the
 * two handles set (pkv_last_error).
 * Thread-safety: safe from any thread. Ownership: writes *params only.
 */
PKV_API pkv_status pkv_engine_params_set_opencl(pkv_engine_params *params,
                                                cl_context context,
                                                cl_command_queue queue);

/*
 * The context and queue an engine on the OpenCL backend runs on (its own
 * or the host's), to create cl_mem tensors in and to order the host's work
 * with pkv's.
 * Errors: PKV_ERR_UNSUPPORTED when the engine runs on the CPU backend;
 * PKV_ERR_INVALID_ARGUMENT for a NULL argument (pkv_last_error).
 * Thread-safety: as any engine call.
 * Ownership: borrowed, valid until the engine is destroyed; retain them to
 * keep them longer.
 */
PKV_API pkv_status pkv_engine_get_opencl(const pkv_engine *engine,
                                         cl_context *context,
                                         cl_command_queue *queue);

/*
 * Release the OpenCL contexts and programs pkv keeps for the process.
 * Engines on pkv's own context share them (one per device and build
 * options) so that a second engine compiles nothing; they are otherwise
 * kept until the process exits. Engines alive keep what they use and run
 * on; the next engine builds again (or loads program_cache_dir). Call it
 * after the last engine to give the memory back, or before unloading pkv.
 * Since 0.2.0.
 * Thread-safety: safe from any thread, also while engines are created.
 * Ownership: nothing is retained.
 */
PKV_API void pkv_opencl_release_programs(void);

/* A pkv_tensor over a cl_mem buffer (no call into pkv). */
static inline pkv_tensor pkv_tensor_opencl(cl_mem mem, uint64_t offset,
                                           int32_t dtype, uint32_t rows,
                                           uint32_t heads, uint32_t head_dim)
{
    pkv_tensor t =
        pkv_tensor_host((void *)mem, offset, dtype, rows, heads, head_dim);
    t.memory = PKV_TENSOR_MEMORY_OPENCL;
    return t;
}

#ifdef __cplusplus
}
#endif

#endif /* PKV_PKV_OPENCL_H */
