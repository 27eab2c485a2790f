/* SPDX-License-Identifier: MIT */
/* The public functions of pkv_opencl.h: the OpenCL context and queue an
 * engine is given or runs on, and the programs shared across engines.
 * Built only with the OpenCL backend. */
#include "pkv/pkv_opencl.h"

#include "engine.h"
#include "opencl/opencl.h"

pkv_status pkv_engine_params_set_opencl(pkv_engine_params *params,
                                        cl_context context,
                                        cl_command_queue queue)
{
    if (params == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "params is NULL");
    if ((context == NULL) != (queue == NULL))
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "context and queue must be given together");
    params->opencl_context = (void *)context;
    params->opencl_queue = (void *)queue;
    return PKV_OK;
}

pkv_status pkv_engine_get_opencl(const pkv_engine *engine,
                                 cl_context *context, cl_command_queue *queue)
{
    if (context != NULL)
        *context = NULL;
    if (queue != NULL)
        *queue = NULL;
    if (engine == NULL || context == NULL || queue == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "engine, context or queue is NULL");
    if (!pkv__ocl_is(engine->device.ops))
        return pkv__fail(PKV_ERR_UNSUPPORTED,
                         "the engine runs on the %s backend",
                         engine->device.ops->name);
    void *c, *q;
    pkv__ocl_handles(engine->device.backend, &c, &q);
    *context = (cl_context)c;
    *queue = (cl_command_queue)q;
    return PKV_OK;
}

void pkv_opencl_release_programs(void)
{
    pkv__ocl_release_programs();
}
