/* SPDX-License-Identifier: MIT */
/*
 * OpenCL errors and device choice (device.h): error names and the pkv
 * status of each, the device an engine runs on, the host's queue, and the
 * ICD files the loader reads.
 */
#include "device.h"

#include "internal.h"

#include "error.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_PLATFORMS 16u
#define MAX_DEVICES 32u

/* ------------------------------------------------------------ CL errors */

const char *pkv__ocl_error_name(cl_int e)
{
    switch (e) {
#define N(x) \
    case x:  \
        return #x;
        N(CL_SUCCESS) N(CL_DEVICE_NOT_FOUND) N(CL_DEVICE_NOT_AVAILABLE)
        N(CL_COMPILER_NOT_AVAILABLE) N(CL_MEM_OBJECT_ALLOCATION_FAILURE)
        N(CL_OUT_OF_RESOURCES) N(CL_OUT_OF_HOST_MEMORY)
        N(CL_PROFILING_INFO_NOT_AVAILABLE) N(CL_MEM_COPY_OVERLAP)
        N(CL_IMAGE_FORMAT_MISMATCH) N(CL_IMAGE_FORMAT_NOT_SUPPORTED)
        N(CL_BUILD_PROGRAM_FAILURE) N(CL_MAP_FAILURE)
        N(CL_MISALIGNED_SUB_BUFFER_OFFSET)
        N(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
        N(CL_COMPILE_PROGRAM_FAILURE) N(CL_LINKER_NOT_AVAILABLE)
        N(CL_LINK_PROGRAM_FAILURE) N(CL_DEVICE_PARTITION_FAILED)
        N(CL_KERNEL_ARG_INFO_NOT_AVAILABLE) N(CL_INVALID_VALUE)
        N(CL_INVALID_DEVICE_TYPE) N(CL_INVALID_PLATFORM) N(CL_INVALID_DEVICE)
        N(CL_INVALID_CONTEXT) N(CL_INVALID_QUEUE_PROPERTIES)
        N(CL_INVALID_COMMAND_QUEUE) N(CL_INVALID_HOST_PTR)
        N(CL_INVALID_MEM_OBJECT) N(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR)
        N(CL_INVALID_IMAGE_SIZE) N(CL_INVALID_SAMPLER) N(CL_INVALID_BINARY)
        N(CL_INVALID_BUILD_OPTIONS) N(CL_INVALID_PROGRAM)
        N(CL_INVALID_PROGRAM_EXECUTABLE) N(CL_INVALID_KERNEL_NAME)
        N(CL_INVALID_KERNEL_DEFINITION) N(CL_INVALID_KERNEL)
        N(CL_INVALID_ARG_INDEX) N(CL_INVALID_ARG_VALUE) N(CL_INVALID_ARG_SIZE)
        N(CL_INVALID_KERNEL_ARGS) N(CL_INVALID_WORK_DIMENSION)
        N(CL_INVALID_WORK_GROUP_SIZE) N(CL_INVALID_WORK_ITEM_SIZE)
        N(CL_INVALID_GLOBAL_OFFSET) N(CL_INVALID_EVENT_WAIT_LIST)
        N(CL_INVALID_EVENT) N(CL_INVALID_OPERATION) N(CL_INVALID_GL_OBJECT)
        N(CL_INVALID_BUFFER_SIZE) N(CL_INVALID_MIP_LEVEL)
        N(CL_INVALID_GLOBAL_WORK_SIZE) N(CL_INVALID_PROPERTY)
        N(CL_INVALID_IMAGE_DESCRIPTOR) N(CL_INVALID_COMPILER_OPTIONS)
        N(CL_INVALID_LINKER_OPTIONS) N(CL_INVALID_DEVICE_PARTITION_COUNT)
#undef N
    case -1001:
        return "CL_PLATFORM_NOT_FOUND_KHR";
    default:
        return "unknown OpenCL error";
    }
}

pkv_status pkv__ocl_status(cl_int e)
{
    switch (e) {
    case CL_OUT_OF_HOST_MEMORY:
        return PKV_ERR_OUT_OF_MEMORY;
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
    case CL_OUT_OF_RESOURCES:
    case CL_INVALID_BUFFER_SIZE:
        return PKV_ERR_DEVICE_MEMORY;
    case CL_BUILD_PROGRAM_FAILURE:
    case CL_COMPILE_PROGRAM_FAILURE:
    case CL_LINK_PROGRAM_FAILURE:
    case CL_COMPILER_NOT_AVAILABLE:
    case CL_LINKER_NOT_AVAILABLE:
    case CL_INVALID_BINARY:
    case CL_INVALID_BUILD_OPTIONS:
    case CL_INVALID_PROGRAM_EXECUTABLE:
    case CL_INVALID_KERNEL_NAME:
        return PKV_ERR_BUILD;
    case CL_INVALID_MEM_OBJECT:
    case CL_INVALID_CONTEXT:
    case CL_INVALID_COMMAND_QUEUE:
        /* Only the host's handles can be invalid: pkv's own are not. */
        return PKV_ERR_INVALID_ARGUMENT;
    default:
        return PKV_ERR_DEVICE;
    }
}

/* Fail with the call and the CL error's name in the message. */
pkv_status pkv__ocl_fail(cl_int err, const char *call)
{
    return pkv__fail(pkv__ocl_status(err), "%s: %s (%d)", call,
                     pkv__ocl_error_name(err), (int)err);
}

/* ------------------------------------------------------ device choice */

static int contains_nocase(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay != '\0'; hay++) {
        size_t i = 0;
        while (i < n && hay[i] != '\0' &&
               tolower((unsigned char)hay[i]) ==
                   tolower((unsigned char)needle[i]))
            i++;
        if (i == n)
            return 1;
    }
    return n == 0;
}

void pkv__ocl_device_string(cl_device_id d, cl_device_info what, char *buf,
                           size_t size)
{
    buf[0] = '\0';
    if (clGetDeviceInfo(d, what, size - 1, buf, NULL) != CL_SUCCESS)
        buf[0] = '\0';
    buf[size - 1] = '\0';
}

void pkv__ocl_platform_name(cl_platform_id p, char *buf, size_t size)
{
    buf[0] = '\0';
    if (clGetPlatformInfo(p, CL_PLATFORM_NAME, size - 1, buf, NULL) !=
        CL_SUCCESS)
        buf[0] = '\0';
    buf[size - 1] = '\0';
}

/* The device named by `want` (a substring of platform or device name), or
 * the first GPU, or the first device. */
pkv_status pkv__ocl_pick_device(const char *want, cl_device_id *out)
{
    cl_platform_id plats[MAX_PLATFORMS];
    cl_uint np = 0;
    cl_int err = clGetPlatformIDs(MAX_PLATFORMS, plats, &np);
    if (err == -1001 || (err == CL_SUCCESS && np == 0))
        return pkv__fail(PKV_ERR_DEVICE, "no OpenCL platform is installed");
    if (err != CL_SUCCESS)
        return pkv__ocl_fail(err, "clGetPlatformIDs");
    if (np > MAX_PLATFORMS)
        np = MAX_PLATFORMS;
    cl_device_id first = NULL, gpu = NULL, named = NULL;
    char seen[PKV__ERROR_MAX / 2] = "";
    for (cl_uint p = 0; p < np; p++) {
        cl_device_id devs[MAX_DEVICES];
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, MAX_DEVICES, devs,
                           &nd) != CL_SUCCESS)
            continue;
        if (nd > MAX_DEVICES)
            nd = MAX_DEVICES;
        char pname[PKV__CL_NAME_MAX];
        pkv__ocl_platform_name(plats[p], pname, sizeof pname);
        for (cl_uint i = 0; i < nd; i++) {
            char dname[PKV__CL_NAME_MAX];
            pkv__ocl_device_string(devs[i], CL_DEVICE_NAME, dname,
                                  sizeof dname);
            /* The list is for a message: a long one is cut, and an
             * encoding error leaves it as it was. */
            size_t used = strlen(seen);
            if (snprintf(seen + used, sizeof seen - used, "%s'%s / %s'",
                         used ? ", " : "", pname, dname) < 0)
                seen[used] = '\0';
            cl_device_type type = 0;
            clGetDeviceInfo(devs[i], CL_DEVICE_TYPE, sizeof type, &type,
                            NULL);
            if (first == NULL)
                first = devs[i];
            if (gpu == NULL && (type & CL_DEVICE_TYPE_GPU))
                gpu = devs[i];
            if (want != NULL && named == NULL &&
                (contains_nocase(pname, want) || contains_nocase(dname, want)))
                named = devs[i];
        }
    }
    if (want != NULL) {
        if (named == NULL)
            return pkv__fail(PKV_ERR_DEVICE,
                             "no OpenCL device matches '%s' (devices: %s)",
                             want, first ? seen : "none");
        *out = named;
        return PKV_OK;
    }
    if (first == NULL)
        return pkv__fail(PKV_ERR_DEVICE, "no OpenCL device found");
    *out = gpu != NULL ? gpu : first;
    return PKV_OK;
}

/* Append "name (library)" for one .icd file to buf. */
static void icd_entry(const char *path, char *buf, size_t size)
{
    char lib[256] = "?";
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        if (fgets(lib, sizeof lib, f) == NULL)
            strcpy(lib, "?");
        fclose(f);
    }
    lib[strcspn(lib, "\r\n")] = '\0';
    const char *name = strrchr(path, '/');
    size_t used = strlen(buf);
    snprintf(buf + used, size - used, "%s%s (%s)", used ? ", " : "",
             name ? name + 1 : path, lib);
}

void pkv__ocl_icd_summary(char *buf, size_t size)
{
    buf[0] = '\0';
    const char *env = getenv("OCL_ICD_VENDORS");
    const char *dir = env != NULL ? env : "/etc/OpenCL/vendors";
    struct stat st;
    if (env != NULL && stat(env, &st) == 0 && S_ISREG(st.st_mode)) {
        icd_entry(env, buf, size);
        return;
    }
    DIR *d = opendir(dir);
    if (d == NULL) {
        snprintf(buf, size, "no ICD directory %s", dir);
        return;
    }
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t n = strlen(e->d_name);
        if (n > 4 && strcmp(e->d_name + n - 4, ".icd") == 0) {
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            icd_entry(path, buf, size);
        }
    }
    closedir(d);
    if (buf[0] == '\0')
        snprintf(buf, size, "no .icd file in %s", dir);
}

int pkv__ocl_any_device(void)
{
    cl_platform_id plats[MAX_PLATFORMS];
    cl_uint np = 0;
    if (clGetPlatformIDs(MAX_PLATFORMS, plats, &np) != CL_SUCCESS)
        return 0;
    for (cl_uint p = 0; p < np && p < MAX_PLATFORMS; p++) {
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) ==
                CL_SUCCESS &&
            nd > 0)
            return 1;
    }
    return 0;
}

const char *pkv__ocl_wanted_device(const char *name)
{
    const char *want = name != NULL ? name : getenv("PKV_OPENCL_DEVICE");
    return want != NULL && want[0] != '\0' ? want : NULL;
}

/* The host's context and queue: the queue must belong to the context and
 * run in order. */
pkv_status pkv__ocl_adopt_host_queue(pkv__backend *b, cl_context ctx,
                                     cl_command_queue queue)
{
    if (ctx == NULL || queue == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "opencl_context and opencl_queue must be given "
                         "together");
    cl_context qctx = NULL;
    cl_int err = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof qctx,
                                       &qctx, NULL);
    if (err != CL_SUCCESS)
        return pkv__ocl_fail(err, "clGetCommandQueueInfo(host queue)");
    if (qctx != ctx)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "the host's queue does not belong to its context");
    cl_command_queue_properties props = 0;
    err = clGetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof props,
                                &props, NULL);
    if (err == CL_SUCCESS)
        err = clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE,
                                    sizeof b->cl.device, &b->cl.device, NULL);
    if (err != CL_SUCCESS)
        return pkv__ocl_fail(err, "clGetCommandQueueInfo(host queue)");
    if (props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)
        return pkv__fail(PKV_ERR_UNSUPPORTED,
                         "the host's queue is out of order; pkv needs an "
                         "in-order queue");
    clRetainContext(ctx);
    b->cl.context = ctx;
    clRetainCommandQueue(queue);
    b->queue = queue;
    return PKV_OK;
}

pkv_status pkv__ocl_device_is_gpu(const pkv__ocl_options *o,
                                     int *is_gpu)
{
    *is_gpu = 0;
    cl_device_id device = NULL;
    pkv_status st = PKV_OK;
    if (o->queue != NULL) {
        cl_int err = clGetCommandQueueInfo((cl_command_queue)o->queue,
                                           CL_QUEUE_DEVICE, sizeof device,
                                           &device, NULL);
        if (err != CL_SUCCESS)
            return pkv__ocl_fail(err, "clGetCommandQueueInfo(host queue)");
    } else {
        st = pkv__ocl_pick_device(pkv__ocl_wanted_device(o->device), &device);
        if (st != PKV_OK)
            return st;
    }
    cl_device_type type = 0;
    cl_int err = clGetDeviceInfo(device, CL_DEVICE_TYPE, sizeof type, &type,
                                 NULL);
    if (err != CL_SUCCESS)
        return pkv__ocl_fail(err, "clGetDeviceInfo(CL_DEVICE_TYPE)");
    *is_gpu = (type & CL_DEVICE_TYPE_GPU) != 0;
    return PKV_OK;
}

int pkv__ocl_available(void)
{
    return pkv__ocl_any_device();
}
