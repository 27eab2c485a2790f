/* SPDX-License-Identifier: MIT */
/*
 * OpenCL errors and device choice (device.c): the pkv status and message
 * of an OpenCL error, which device an engine runs on, and the ICD files
 * the loader reads.
 */
#ifndef PKV_OPENCL_DEVICE_H
#define PKV_OPENCL_DEVICE_H

#include "pkv/pkv.h"

/* pkv is OpenCL 1.2 code; say so, or the headers note their default. */
#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <stddef.h>

#define PKV__CL_NAME_MAX 256

/* The name of an OpenCL error code, e.g. "CL_OUT_OF_RESOURCES". */
const char *pkv__ocl_error_name(cl_int err);

/* The pkv status of an OpenCL error code. */
pkv_status pkv__ocl_status(cl_int err);

/* Fail with the pkv status for err and "call: CL_NAME (code)". */
pkv_status pkv__ocl_fail(cl_int err, const char *call);

/* The device an engine asks for: `name` (pkv_engine_params.opencl_device),
 * else the environment variable PKV_OPENCL_DEVICE; NULL (any) when neither
 * is set or the one that is set is empty. */
const char *pkv__ocl_wanted_device(const char *name);

/* The device whose platform or device name contains want (case-
 * insensitive), or with want NULL the first GPU, else the first device. */
pkv_status pkv__ocl_pick_device(const char *want, cl_device_id *out);

/* Nonzero when some OpenCL platform has a device. */
int pkv__ocl_any_device(void);

/* A device's or a platform's name string ("" when the query fails). */
void pkv__ocl_device_string(cl_device_id device, cl_device_info what,
                           char *buf, size_t size);
void pkv__ocl_platform_name(cl_platform_id platform, char *buf, size_t size);

#endif
