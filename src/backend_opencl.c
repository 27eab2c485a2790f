/* SPDX-License-Identifier: MIT */
/*
 * The OpenCL backend: the KV cache in device buffers (one arena per layer,
 * kv_layout.h), kernels from the kernels/ files, one in-order queue.
 *
 * Host-memory tensors are borrowed for the call, so append and attend wait
 * for their work before returning; on a device that shares the host's
 * memory (CL_DEVICE_HOST_UNIFIED_MEMORY) a suitably aligned tensor is
 * wrapped with CL_MEM_USE_HOST_PTR instead of copied. cl_mem tensors
 * (pkv__opencl_attend_device) are only enqueued.
 *
 * Programs: one program per device holds every kernel; geometry and dtype
 * are kernel arguments, so one build serves every engine on the device.
 * pkv's own contexts are shared by the engines of a process (one context
 * and program per device and build), and binaries can be cached on disk.
 */
#include "backend_opencl.h"

#include "error.h"
#include "kv_layout.h"
#include "decode_plan.h"
#include "kv_step.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

#define LOCAL_ROWS 16u /* work-group width of the per-row kernels */
#define NAME_MAX_LEN 256
#define MAX_PLATFORMS 16u
#define MAX_DEVICES 32u
#define CACHE_MAGIC "PKVCLB01"
#define CACHE_MAX_BYTES (256u << 20)

#ifdef PKV_KERNELS_DIR
const char *pkv__opencl_kernel_dir = PKV_KERNELS_DIR;
#else
const char *pkv__opencl_kernel_dir = NULL;
#endif

/* ------------------------------------------------------------ CL errors */

static const char *cl_error_name(cl_int e)
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

static pkv_status cl_status(cl_int e)
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
static pkv_status cl_fail(cl_int err, const char *call)
{
    return pkv__fail(cl_status(err), "%s: %s (%d)", call, cl_error_name(err),
                     (int)err);
}

/* -------------------------------------------------------------- backend */

typedef struct host_mem {
    cl_mem mem;   /* a device copy or a wrap of the host pointer */
    int wrapped;  /* CL_MEM_USE_HOST_PTR */
    int temporary; /* released after the call */
} host_mem;

struct pkv__backend {
    pkv__backend_config cfg;
    pkv__allocator alloc;
    pkv_log_fn log;
    void *log_user;
    int32_t log_level;

    cl_device_id device;
    cl_context context;
    cl_command_queue queue;
    cl_program program;
    cl_kernel k_append, k_seal, k_attend, k_copy;
    size_t local_append, local_seal, local_attend, local_copy;
    int unified;         /* CL_DEVICE_HOST_UNIFIED_MEMORY */
    size_t host_align;   /* alignment a USE_HOST_PTR wrap needs */
    char device_name[4 * NAME_MAX_LEN];
    /* pkv__backend_opencl named after the device, for the engine's log. */
    pkv__backend_ops ops;
    char ops_name[4 * NAME_MAX_LEN + 16];

    uint32_t layer_block_bytes;
    uint32_t head_bytes;
    uint32_t k_part_bytes;
    uint32_t stage_floats;
    size_t arena_bytes;
    cl_mem *arenas; /* [num_layers] */
    cl_mem stages;  /* [num_stages][stage_floats] f32, or NULL */

    /* The step, packed (kv_step.h), its device copy and the upload. */
    pkv__step step;
    int have_step;
    uint32_t num_seals;
    uint32_t *step_host;
    size_t step_host_cap; /* uints */
    cl_mem step_mem;
    size_t step_mem_cap; /* uints */
    cl_event upload;

    /* The split-K decode kernels (kernels/paged_decode.cl) for steps whose
     * rows are one per sequence: specialised by -D on the geometry, built
     * on the first such step. decode_state: 0 not built yet, 1 ready, -1
     * not used (PKV_OPENCL_DECODE_KERNEL=0, or it did not build). */
    int decode_state;
    int step_is_decode;
    int own_context;
    char cache_dir[1024]; /* "" for none */
    cl_uint compute_units;
    cl_program decode_program;
    cl_kernel k_partial, k_reduce;
    cl_mem dec_lens, dec_tables, dec_stages; /* this step's arrays */
    size_t dec_cap[3];                       /* uints */
    cl_mem part_acc, part_ml;
    size_t part_cap[2]; /* bytes */
    uint32_t max_context;

    /* Device copies of host tensors where no wrap is possible. */
    cl_mem tensor_mem[4];
    size_t tensor_cap[4];
};

static void blog(const pkv__backend *b, int32_t level, const char *fmt, ...)
    PKV__PRINTF(3, 4);
static void blog(const pkv__backend *b, int32_t level, const char *fmt, ...)
{
    if (b->log == NULL || level > b->log_level)
        return;
    char line[PKV__ERROR_MAX];
    va_list args;
    va_start(args, fmt);
    vsnprintf(line, sizeof line, fmt, args);
    va_end(args);
    b->log(b->log_user, level, line);
}

/* --------------------------------------------- process-wide programs */

/* pkv's own contexts and programs, one per (device, build key), shared by
 * every engine of the process and kept until it exits: building a program
 * takes seconds on some drivers, creating an engine should not. */
typedef struct shared_program {
    cl_device_id device;
    uint64_t key;
    cl_context context;
    cl_program program;
} shared_program;

#define MAX_SHARED 64u
static shared_program shared[MAX_SHARED];
static unsigned num_shared;
static mtx_t shared_lock;
static once_flag shared_once = ONCE_FLAG_INIT;
static int shared_lock_ok;

static void shared_init(void)
{
    shared_lock_ok = mtx_init(&shared_lock, mtx_plain) == thrd_success;
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

static void info_string(cl_device_id d, cl_device_info what, char *buf,
                        size_t size)
{
    buf[0] = '\0';
    if (clGetDeviceInfo(d, what, size - 1, buf, NULL) != CL_SUCCESS)
        buf[0] = '\0';
    buf[size - 1] = '\0';
}

static void platform_name(cl_platform_id p, char *buf, size_t size)
{
    buf[0] = '\0';
    if (clGetPlatformInfo(p, CL_PLATFORM_NAME, size - 1, buf, NULL) !=
        CL_SUCCESS)
        buf[0] = '\0';
    buf[size - 1] = '\0';
}

/* The device named by `want` (a substring of platform or device name), or
 * the first GPU, or the first device. */
static pkv_status pick_device(const char *want, cl_device_id *out)
{
    cl_platform_id plats[MAX_PLATFORMS];
    cl_uint np = 0;
    cl_int err = clGetPlatformIDs(MAX_PLATFORMS, plats, &np);
    if (err == -1001 || (err == CL_SUCCESS && np == 0))
        return pkv__fail(PKV_ERR_DEVICE, "no OpenCL platform is installed");
    if (err != CL_SUCCESS)
        return cl_fail(err, "clGetPlatformIDs");
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
        char pname[NAME_MAX_LEN];
        platform_name(plats[p], pname, sizeof pname);
        for (cl_uint i = 0; i < nd; i++) {
            char dname[NAME_MAX_LEN];
            info_string(devs[i], CL_DEVICE_NAME, dname, sizeof dname);
            size_t used = strlen(seen);
            snprintf(seen + used, sizeof seen - used, "%s'%s / %s'",
                     used ? ", " : "", pname, dname);
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

/* ------------------------------------------------------------ program */

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

#define FNV_START 0xcbf29ce484222325ull

/* The files of the generic program and of the decode program. */
static const char *const generic_files[] = {
    "src/kv_layout.h",       "src/kv_step.h",
    "kernels/pkv_common.cl", "kernels/kv_append.cl",
    "kernels/paged_attention.cl", "kernels/block_copy.cl"};
static const char *const decode_files[] = {"src/kv_layout.h",
                                           "kernels/paged_decode.cl"};
#define NUM_FILES(list) ((unsigned)(sizeof list / sizeof list[0]))

/* Read a kernel file from pkv__opencl_kernel_dir into dst (size bytes), or
 * only measure it (dst NULL). */
static pkv_status read_kernel_file(const char *name, char *dst, size_t *size)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", pkv__opencl_kernel_dir, name);
    FILE *f = fopen(path, "rb");
    long n = -1;
    if (f != NULL && dst == NULL && fseek(f, 0, SEEK_END) == 0)
        n = ftell(f);
    if (f != NULL && dst != NULL)
        n = fread(dst, 1, *size, f) == *size ? (long)*size : -1;
    if (f != NULL)
        fclose(f);
    if (n < 0)
        return pkv__fail(PKV_ERR_BUILD, "kernel source %s cannot be read",
                         path);
    *size = (size_t)n;
    return PKV_OK;
}

/* A program's source: its kernel files, concatenated, embedded or read
 * from pkv__opencl_kernel_dir. */
static pkv_status load_source(pkv__backend *b, const char *const *names,
                              unsigned n, char **out, size_t *out_size)
{
    const pkv__kernel_file *files[8];
    size_t sizes[8];
    size_t total = 1;
    if (n > 8)
        return pkv__fail(PKV_ERR_INTERNAL, "too many kernel files");
    for (unsigned i = 0; i < n; i++) {
        files[i] = NULL;
        for (unsigned j = 0; j < pkv__kernel_num_files; j++)
            if (strcmp(pkv__kernel_files[j].name, names[i]) == 0)
                files[i] = &pkv__kernel_files[j];
        if (files[i] == NULL)
            return pkv__fail(PKV_ERR_INTERNAL, "kernel %s is not embedded",
                             names[i]);
        sizes[i] = files[i]->size;
        if (pkv__opencl_kernel_dir != NULL) {
            pkv_status st = read_kernel_file(names[i], NULL, &sizes[i]);
            if (st != PKV_OK)
                return st;
        }
        total += sizes[i] + 1;
    }
    char *src = pkv__calloc(&b->alloc, total, 1);
    if (src == NULL)
        return pkv__fail(PKV_ERR_OUT_OF_MEMORY, "kernel source: no memory");
    size_t at = 0;
    for (unsigned i = 0; i < n; i++) {
        if (pkv__opencl_kernel_dir == NULL) {
            memcpy(src + at, files[i]->data, sizes[i]);
        } else {
            pkv_status st = read_kernel_file(names[i], src + at, &sizes[i]);
            if (st != PKV_OK) {
                pkv__free(&b->alloc, src, total, 1);
                return st;
            }
        }
        at += sizes[i];
        src[at++] = '\n';
    }
    src[at] = '\0';
    *out = src;
    *out_size = total;
    return PKV_OK;
}

static void build_options(const pkv__backend *b, const char *extra,
                          char *buf, size_t size)
{
    cl_device_fp_config fp = 0;
    clGetDeviceInfo(b->device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp,
                    NULL);
    /* A correctly rounded division makes the u8 seal's codes equal the
     * CPU backend's (kv_append.cl). */
    snprintf(buf, size, "-cl-std=CL1.2%s%s",
             (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT)
                 ? " -cl-fp32-correctly-rounded-divide-sqrt"
                 : "",
             extra);
}

/* The key of a build: sources, device, driver and options. */
static uint64_t build_key(const pkv__backend *b, const char *src,
                          size_t src_size, const char *options)
{
    char buf[NAME_MAX_LEN];
    uint64_t h = fnv1a(FNV_START, src, src_size);
    h = fnv1a(h, options, strlen(options) + 1);
    const cl_device_info infos[] = {CL_DEVICE_NAME, CL_DEVICE_VENDOR,
                                    CL_DEVICE_VERSION, CL_DRIVER_VERSION};
    for (size_t i = 0; i < sizeof infos / sizeof infos[0]; i++) {
        info_string(b->device, infos[i], buf, sizeof buf);
        h = fnv1a(h, buf, strlen(buf) + 1);
    }
    return h;
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* A program from a cache file, or NULL when there is none or it does not
 * pass: magic, key, size and checksum (FNV-1a) checked, then the driver
 * must accept and build the binary. A bad file is logged and rebuilt. */
static cl_program cache_load(pkv__backend *b, const char *path, uint64_t key,
                             const char *options)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    unsigned char head[32];
    const char *why = NULL;
    unsigned char *bin = NULL;
    uint64_t size = 0;
    cl_program prog = NULL;
    if (fread(head, 1, sizeof head, f) != sizeof head ||
        memcmp(head, CACHE_MAGIC, 8) != 0 || get_u64(head + 8) != key)
        why = "bad header";
    if (why == NULL) {
        size = get_u64(head + 16);
        if (size == 0 || size > CACHE_MAX_BYTES)
            why = "bad size";
    }
    if (why == NULL) {
        bin = pkv__calloc(&b->alloc, (size_t)size, 1);
        if (bin == NULL)
            why = "no memory";
        else if (fread(bin, 1, (size_t)size, f) != size)
            why = "truncated";
        else if (fnv1a(FNV_START, bin, (size_t)size) != get_u64(head + 24))
            why = "checksum mismatch";
    }
    fclose(f);
    if (why == NULL) {
        size_t n = (size_t)size;
        const unsigned char *bins[1] = {bin};
        cl_int bstatus = CL_SUCCESS, err;
        prog = clCreateProgramWithBinary(b->context, 1, &b->device, &n, bins,
                                         &bstatus, &err);
        if (err != CL_SUCCESS || bstatus != CL_SUCCESS) {
            why = "rejected by the driver";
            if (prog != NULL)
                clReleaseProgram(prog);
            prog = NULL;
        } else if (clBuildProgram(prog, 1, &b->device, options, NULL, NULL) !=
                   CL_SUCCESS) {
            why = "does not build";
            clReleaseProgram(prog);
            prog = NULL;
        }
    }
    if (bin != NULL)
        pkv__free(&b->alloc, bin, (size_t)size, 1);
    if (why != NULL)
        blog(b, PKV_LOG_WARN, "program cache %s: %s; rebuilding", path, why);
    else
        blog(b, PKV_LOG_DEBUG, "program cache hit: %s", path);
    return prog;
}

/* Write the built program's binary (best effort: a cache that cannot be
 * written costs a rebuild next time, nothing else). */
static void cache_store(pkv__backend *b, const char *path, uint64_t key,
                        cl_program prog)
{
    size_t size = 0;
    if (clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size,
                         NULL) != CL_SUCCESS ||
        size == 0 || size > CACHE_MAX_BYTES)
        return;
    unsigned char *bin = pkv__calloc(&b->alloc, size, 1);
    if (bin == NULL)
        return;
    unsigned char *bins[1] = {bin};
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.%p.tmp", path, (void *)b);
    FILE *f = NULL;
    int ok = clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bins, bins,
                              NULL) == CL_SUCCESS;
    if (ok)
        f = fopen(tmp, "wb");
    if (f != NULL) {
        unsigned char head[32];
        memcpy(head, CACHE_MAGIC, 8);
        put_u64(head + 8, key);
        put_u64(head + 16, size);
        put_u64(head + 24, fnv1a(FNV_START, bin, size));
        ok = fwrite(head, 1, sizeof head, f) == sizeof head &&
             fwrite(bin, 1, size, f) == size;
        ok &= fclose(f) == 0;
        ok = ok && rename(tmp, path) == 0;
        if (!ok)
            remove(tmp);
        blog(b, ok ? PKV_LOG_DEBUG : PKV_LOG_WARN, "program cache %s: %s",
             path, ok ? "written" : "cannot be written");
    }
    pkv__free(&b->alloc, bin, size, 1);
}

/* Build the program for b->context/b->device, through the disk cache. */
static pkv_status build_program(pkv__backend *b, const char *cache_dir,
                                const char *src, size_t src_size,
                                const char *options, uint64_t key,
                                cl_program *out)
{
    char path[1024] = "";
    if (cache_dir != NULL) {
        snprintf(path, sizeof path, "%s/pkv-%016llx.clbin", cache_dir,
                 (unsigned long long)key);
        *out = cache_load(b, path, key, options);
        if (*out != NULL)
            return PKV_OK;
    }
    cl_int err;
    const char *srcs[1] = {src};
    size_t lens[1] = {src_size - 1};
    cl_program prog =
        clCreateProgramWithSource(b->context, 1, srcs, lens, &err);
    if (err != CL_SUCCESS)
        return cl_fail(err, "clCreateProgramWithSource");
    err = clBuildProgram(prog, 1, &b->device, options, NULL, NULL);
    if (err != CL_SUCCESS) {
        char log[PKV__ERROR_MAX];
        log[0] = '\0';
        clGetProgramBuildInfo(prog, b->device, CL_PROGRAM_BUILD_LOG,
                              sizeof log - 1, log, NULL);
        log[sizeof log - 1] = '\0';
        clReleaseProgram(prog);
        return pkv__fail(cl_status(err) == PKV_ERR_DEVICE ? PKV_ERR_BUILD
                                                          : cl_status(err),
                         "clBuildProgram: %s (%d): %s", cl_error_name(err),
                         (int)err, log);
    }
    if (cache_dir != NULL)
        cache_store(b, path, key, prog);
    *out = prog;
    return PKV_OK;
}

/* A program from the given files and extra options, for b->device. When
 * pkv owns the context (own), programs are shared process-wide: the first
 * one fixes the context (created here when b->context is NULL), later ones
 * are looked up in the same context. */
static pkv_status get_program(pkv__backend *b, const char *const *names,
                              unsigned n, const char *extra,
                              const char *cache_dir, int own, cl_program *out)
{
    char *src = NULL;
    size_t src_size = 0;
    pkv_status st = load_source(b, names, n, &src, &src_size);
    if (st != PKV_OK)
        return st;
    char options[512];
    build_options(b, extra, options, sizeof options);
    uint64_t key = build_key(b, src, src_size, options);
    if (!own) {
        st = build_program(b, cache_dir, src, src_size, options, key, out);
        pkv__free(&b->alloc, src, src_size, 1);
        return st;
    }
    call_once(&shared_once, shared_init);
    if (!shared_lock_ok) {
        pkv__free(&b->alloc, src, src_size, 1);
        return pkv__fail(PKV_ERR_INTERNAL, "program table lock");
    }
    mtx_lock(&shared_lock);
    unsigned i = 0;
    while (i < num_shared &&
           (shared[i].device != b->device || shared[i].key != key ||
            (b->context != NULL && shared[i].context != b->context)))
        i++;
    if (i < num_shared) {
        if (b->context == NULL) {
            b->context = shared[i].context;
            clRetainContext(b->context);
        }
        *out = shared[i].program;
        clRetainProgram(*out);
    } else {
        cl_int err = CL_SUCCESS;
        if (b->context == NULL) {
            b->context =
                clCreateContext(NULL, 1, &b->device, NULL, NULL, &err);
            if (err != CL_SUCCESS) {
                b->context = NULL;
                st = cl_fail(err, "clCreateContext");
            }
        }
        if (st == PKV_OK)
            st = build_program(b, cache_dir, src, src_size, options, key,
                               out);
        if (st == PKV_OK && num_shared < MAX_SHARED) {
            shared_program *s = &shared[num_shared++];
            s->device = b->device;
            s->key = key;
            s->context = b->context;
            s->program = *out;
            clRetainContext(s->context);
            clRetainProgram(s->program);
        }
    }
    mtx_unlock(&shared_lock);
    pkv__free(&b->alloc, src, src_size, 1);
    return st;
}

static pkv_status make_kernel(pkv__backend *b, cl_program prog,
                              const char *name, cl_kernel *out, size_t *local,
                              size_t want)
{
    cl_int err;
    *out = clCreateKernel(prog, name, &err);
    if (err != CL_SUCCESS) {
        *out = NULL;
        char call[96];
        snprintf(call, sizeof call, "clCreateKernel(%s)", name);
        return cl_fail(err, call);
    }
    size_t max = 0;
    err = clGetKernelWorkGroupInfo(*out, b->device, CL_KERNEL_WORK_GROUP_SIZE,
                                   sizeof max, &max, NULL);
    *local = err == CL_SUCCESS && max < want && max > 0 ? max : want;
    return PKV_OK;
}

/* ------------------------------------------------------- create/destroy */

static void ocl_destroy(pkv__backend *b)
{
    if (b == NULL)
        return;
    if (b->queue != NULL)
        clFinish(b->queue);
    if (b->upload != NULL)
        clReleaseEvent(b->upload);
    for (int i = 0; i < 4; i++)
        if (b->tensor_mem[i] != NULL)
            clReleaseMemObject(b->tensor_mem[i]);
    if (b->step_mem != NULL)
        clReleaseMemObject(b->step_mem);
    cl_mem decode_mems[] = {b->dec_lens, b->dec_tables, b->dec_stages,
                            b->part_acc, b->part_ml};
    for (size_t i = 0; i < 5; i++)
        if (decode_mems[i] != NULL)
            clReleaseMemObject(decode_mems[i]);
    if (b->k_partial != NULL)
        clReleaseKernel(b->k_partial);
    if (b->k_reduce != NULL)
        clReleaseKernel(b->k_reduce);
    if (b->decode_program != NULL)
        clReleaseProgram(b->decode_program);
    if (b->stages != NULL)
        clReleaseMemObject(b->stages);
    if (b->arenas != NULL) {
        for (uint32_t l = 0; l < b->cfg.num_layers; l++)
            if (b->arenas[l] != NULL)
                clReleaseMemObject(b->arenas[l]);
        pkv__free(&b->alloc, b->arenas, b->cfg.num_layers,
                  sizeof *b->arenas);
    }
    cl_kernel ks[] = {b->k_append, b->k_seal, b->k_attend, b->k_copy};
    for (size_t i = 0; i < 4; i++)
        if (ks[i] != NULL)
            clReleaseKernel(ks[i]);
    if (b->program != NULL)
        clReleaseProgram(b->program);
    if (b->queue != NULL)
        clReleaseCommandQueue(b->queue);
    if (b->context != NULL)
        clReleaseContext(b->context);
    pkv__free(&b->alloc, b->step_host, b->step_host_cap, sizeof(uint32_t));
    pkv__allocator a = b->alloc;
    pkv__free(&a, b, 1, sizeof *b);
}

/* The host's context and queue: the queue must belong to the context and
 * run in order. */
static pkv_status adopt_host_queue(pkv__backend *b, cl_context ctx,
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
        return cl_fail(err, "clGetCommandQueueInfo(host queue)");
    if (qctx != ctx)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "the host's queue does not belong to its context");
    cl_command_queue_properties props = 0;
    err = clGetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof props,
                                &props, NULL);
    if (err == CL_SUCCESS)
        err = clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof b->device,
                                    &b->device, NULL);
    if (err != CL_SUCCESS)
        return cl_fail(err, "clGetCommandQueueInfo(host queue)");
    if (props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)
        return pkv__fail(PKV_ERR_UNSUPPORTED,
                         "the host's queue is out of order; pkv needs an "
                         "in-order queue");
    clRetainContext(ctx);
    b->context = ctx;
    clRetainCommandQueue(queue);
    b->queue = queue;
    return PKV_OK;
}

/* Sizes against the device's limits, before anything is allocated. */
static pkv_status check_fit(pkv__backend *b)
{
    const pkv__backend_config *c = &b->cfg;
    cl_ulong max_alloc = 0, global = 0;
    clGetDeviceInfo(b->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc,
                    &max_alloc, NULL);
    clGetDeviceInfo(b->device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global,
                    &global, NULL);
    size_t lbb = pkv__backend_layer_block_bytes(c);
    size_t stage_bytes = pkv__backend_stage_bytes(c);
    if (lbb > UINT32_MAX || stage_bytes / 4 > UINT32_MAX ||
        (uint64_t)lbb * c->num_blocks / c->num_blocks != lbb)
        return pkv__fail(PKV_ERR_UNSUPPORTED,
                         "opencl: a block of %zu bytes or a staging tail of "
                         "%zu bytes is beyond what the kernels address",
                         lbb, stage_bytes);
    uint64_t arena = (uint64_t)lbb * c->num_blocks;
    uint64_t stages = (uint64_t)stage_bytes * c->num_stages;
    uint64_t total = arena * c->num_layers + stages;
    if (arena > max_alloc || stages > max_alloc || total > global)
        return pkv__fail(PKV_ERR_DEVICE_MEMORY,
                         "opencl: %u layers of %u blocks need %llu bytes per "
                         "layer arena (%llu of staging tails), %llu in all; "
                         "the device '%s' allows %llu per buffer and %llu in "
                         "all: lower num_blocks or cache_bytes",
                         (unsigned)c->num_layers, (unsigned)c->num_blocks,
                         (unsigned long long)arena,
                         (unsigned long long)stages,
                         (unsigned long long)total, b->device_name,
                         (unsigned long long)max_alloc,
                         (unsigned long long)global);
    b->layer_block_bytes = (uint32_t)lbb;
    b->arena_bytes = (size_t)arena;
    b->stage_floats = (uint32_t)(stage_bytes / 4);
    b->head_bytes = (uint32_t)(lbb / c->num_kv_heads);
    b->k_part_bytes = (uint32_t)PKV_LAYOUT_PART_BYTES(
        (size_t)c->kv_dtype, (size_t)c->key_quant, (size_t)c->block_size,
        (size_t)c->head_dim);
    return PKV_OK;
}

static pkv_status new_zeroed(pkv__backend *b, size_t bytes, cl_mem *out,
                             const char *what)
{
    cl_int err;
    *out = clCreateBuffer(b->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
    char call[96];
    if (err != CL_SUCCESS) {
        *out = NULL;
        snprintf(call, sizeof call, "clCreateBuffer(%s, %zu bytes)", what,
                 bytes);
        return cl_fail(err, call);
    }
    cl_uint zero = 0;
    err = clEnqueueFillBuffer(b->queue, *out, &zero, sizeof zero, 0, bytes, 0,
                              NULL, NULL);
    if (err != CL_SUCCESS) {
        snprintf(call, sizeof call, "clEnqueueFillBuffer(%s)", what);
        return cl_fail(err, call);
    }
    return PKV_OK;
}

pkv_status pkv__opencl_create(const pkv__backend_config *config,
                              const pkv__allocator *alloc,
                              const pkv__opencl_options *o,
                              pkv__backend **out)
{
    *out = NULL;
    pkv_status st = pkv__backend_config_check(config);
    if (st != PKV_OK)
        return st;
    pkv__backend *b = pkv__calloc(alloc, 1, sizeof *b);
    if (b == NULL)
        return pkv__fail(PKV_ERR_OUT_OF_MEMORY, "opencl backend: no memory");
    b->cfg = *config;
    b->alloc = *alloc;
    b->log = o->log;
    b->log_user = o->log_user;
    b->log_level = o->log_level;
    int own = o->context == NULL && o->queue == NULL;
    b->own_context = own;
    if (o->cache_dir != NULL)
        snprintf(b->cache_dir, sizeof b->cache_dir, "%s", o->cache_dir);
    const char *dk = getenv("PKV_OPENCL_DECODE_KERNEL");
    b->decode_state = dk != NULL && strcmp(dk, "0") == 0 ? -1 : 0;
    if (own) {
        const char *want = o->device;
        if (want == NULL)
            want = getenv("PKV_OPENCL_DEVICE");
        if (want != NULL && want[0] == '\0')
            want = NULL;
        st = pick_device(want, &b->device);
    } else {
        st = adopt_host_queue(b, o->context, o->queue);
    }
    if (st == PKV_OK) {
        char dname[NAME_MAX_LEN], driver[NAME_MAX_LEN], pname[NAME_MAX_LEN];
        cl_platform_id plat = NULL;
        clGetDeviceInfo(b->device, CL_DEVICE_PLATFORM, sizeof plat, &plat,
                        NULL);
        platform_name(plat, pname, sizeof pname);
        info_string(b->device, CL_DEVICE_NAME, dname, sizeof dname);
        info_string(b->device, CL_DRIVER_VERSION, driver, sizeof driver);
        snprintf(b->device_name, sizeof b->device_name, "%s / %s (driver %s)",
                 pname, dname, driver);
        cl_bool unified = CL_FALSE;
        cl_uint align_bits = 0;
        clGetDeviceInfo(b->device, CL_DEVICE_HOST_UNIFIED_MEMORY,
                        sizeof unified, &unified, NULL);
        clGetDeviceInfo(b->device, CL_DEVICE_MEM_BASE_ADDR_ALIGN,
                        sizeof align_bits, &align_bits, NULL);
        b->unified = unified == CL_TRUE;
        clGetDeviceInfo(b->device, CL_DEVICE_MAX_COMPUTE_UNITS,
                        sizeof b->compute_units, &b->compute_units, NULL);
        b->host_align = align_bits >= 8 ? align_bits / 8 : 128;
        st = check_fit(b);
    }
    if (st == PKV_OK)
        st = get_program(b, generic_files, NUM_FILES(generic_files), "",
                         b->cache_dir[0] ? b->cache_dir : NULL, own,
                         &b->program);
    if (st == PKV_OK && own) {
        cl_int err;
        b->queue = clCreateCommandQueue(b->context, b->device, 0, &err);
        if (err != CL_SUCCESS) {
            b->queue = NULL;
            st = cl_fail(err, "clCreateCommandQueue");
        }
    }
    if (st == PKV_OK)
        st = make_kernel(b, b->program, "pkv_kv_append", &b->k_append,
                         &b->local_append, LOCAL_ROWS);
    if (st == PKV_OK)
        st = make_kernel(b, b->program, "pkv_kv_seal", &b->k_seal,
                         &b->local_seal, 1);
    if (st == PKV_OK)
        st = make_kernel(b, b->program, "pkv_paged_attention", &b->k_attend,
                         &b->local_attend, LOCAL_ROWS);
    if (st == PKV_OK)
        st = make_kernel(b, b->program, "pkv_block_copy", &b->k_copy,
                         &b->local_copy, 64);
    if (st == PKV_OK) {
        b->arenas = pkv__calloc(alloc, config->num_layers, sizeof *b->arenas);
        if (b->arenas == NULL)
            st = pkv__fail(PKV_ERR_OUT_OF_MEMORY, "opencl backend: no memory");
    }
    for (uint32_t l = 0; st == PKV_OK && l < config->num_layers; l++)
        st = new_zeroed(b, b->arena_bytes, &b->arenas[l], "arena");
    if (st == PKV_OK && config->num_stages > 0)
        st = new_zeroed(b, (size_t)b->stage_floats * 4 * config->num_stages,
                        &b->stages, "staging tails");
    if (st == PKV_OK) {
        /* Allocation is often lazy: make it happen now, where a failure
         * has a clear place. */
        cl_int err = clFinish(b->queue);
        if (err != CL_SUCCESS)
            st = cl_fail(err, "clFinish(zero the arenas)");
    }
    if (st != PKV_OK) {
        char why[PKV__ERROR_MAX];
        snprintf(why, sizeof why, "%s", pkv_last_error());
        ocl_destroy(b);
        return pkv__fail(st, "%s", why);
    }
    blog(b, PKV_LOG_DEBUG, "opencl: %s%s, %u layer arenas of %zu bytes",
         b->device_name, b->unified ? ", unified memory" : "",
         (unsigned)config->num_layers, b->arena_bytes);
    *out = b;
    return PKV_OK;
}

static pkv_status ocl_create(const pkv__backend_config *config,
                             const pkv__allocator *alloc, pkv__backend **out)
{
    pkv__opencl_options o;
    memset(&o, 0, sizeof o);
    return pkv__opencl_create(config, alloc, &o, out);
}

const pkv__backend_ops *pkv__opencl_ops(pkv__backend *b)
{
    b->ops = pkv__backend_opencl;
    snprintf(b->ops_name, sizeof b->ops_name, "opencl (%s)", b->device_name);
    b->ops.name = b->ops_name;
    return &b->ops;
}

int pkv__opencl_is(const pkv__backend_ops *ops)
{
    return ops != NULL && ops->begin_step == pkv__backend_opencl.begin_step;
}

void pkv__opencl_handles(const pkv__backend *b, cl_context *context,
                         cl_command_queue *queue)
{
    *context = b->context;
    *queue = b->queue;
}

/* ------------------------------------------------------------- the step */

/* Make *mem hold at least `bytes` (contents not kept). */
static pkv_status grow_buffer(pkv__backend *b, cl_mem *mem, size_t *cap,
                              size_t bytes, cl_mem_flags flags,
                              const char *what)
{
    if (bytes <= *cap && *mem != NULL)
        return PKV_OK;
    size_t want = *cap ? *cap : 256;
    while (want < bytes)
        want *= 2;
    cl_int err;
    cl_mem m = clCreateBuffer(b->context, flags, want, NULL, &err);
    if (err != CL_SUCCESS) {
        char call[96];
        snprintf(call, sizeof call, "clCreateBuffer(%s, %zu bytes)", what,
                 want);
        return cl_fail(err, call);
    }
    if (*mem != NULL)
        clReleaseMemObject(*mem);
    *mem = m;
    *cap = want;
    return PKV_OK;
}

static pkv_status grow_step(pkv__backend *b, size_t words)
{
    if (words > b->step_host_cap) {
        size_t cap = b->step_host_cap ? b->step_host_cap : 256;
        while (cap < words)
            cap *= 2;
        uint32_t *grown = pkv__calloc(&b->alloc, cap, sizeof *grown);
        if (grown == NULL)
            return pkv__fail(PKV_ERR_OUT_OF_MEMORY, "step arrays: no memory");
        pkv__free(&b->alloc, b->step_host, b->step_host_cap, sizeof *grown);
        b->step_host = grown;
        b->step_host_cap = cap;
    }
    if (words > b->step_mem_cap) {
        size_t cap = b->step_host_cap;
        cl_int err;
        cl_mem m = clCreateBuffer(b->context, CL_MEM_READ_ONLY,
                                  cap * sizeof(uint32_t), NULL, &err);
        if (err != CL_SUCCESS)
            return cl_fail(err, "clCreateBuffer(step arrays)");
        if (b->step_mem != NULL)
            clReleaseMemObject(b->step_mem);
        b->step_mem = m;
        b->step_mem_cap = cap;
    }
    return PKV_OK;
}

static pkv_status ocl_begin_step(pkv__backend *b, const pkv__step *s)
{
    pkv_status st = pkv__backend_step_check(&b->cfg, s);
    if (st != PKV_OK)
        return st;
    /* The previous upload reads step_host: let it finish first. */
    if (b->upload != NULL) {
        cl_int err = clWaitForEvents(1, &b->upload);
        clReleaseEvent(b->upload);
        b->upload = NULL;
        if (err != CL_SUCCESS)
            return cl_fail(err, "clWaitForEvents(step upload)");
    }
    const pkv__backend_config *c = &b->cfg;
    uint32_t n = s->num_seqs, t = s->num_tokens, bs = c->block_size;
    int u8 = c->kv_dtype == PKV_KV_U8;
    uint32_t seals = 0;
    for (uint32_t i = 0; u8 && i < n; i++) {
        uint32_t ctx = s->context_lens[i];
        uint32_t first = ctx - (s->query_start[i + 1] - s->query_start[i]);
        /* Blocks whose last token is one of this step's rows. */
        seals += ctx / bs - first / bs;
    }
    size_t off[PKV_STEP_HEADER];
    size_t at = PKV_STEP_HEADER;
    size_t lens[PKV_STEP_HEADER] = {
        (size_t)n + 1, n, (size_t)n * s->max_blocks_per_seq, n, t, t,
        2 * (size_t)t, (size_t)seals * PKV_SEAL_WORDS};
    for (int i = 0; i < PKV_STEP_HEADER; i++) {
        off[i] = at;
        at += lens[i];
    }
    if (at > UINT32_MAX)
        return pkv__fail(PKV_ERR_UNSUPPORTED, "step of %zu words", at);
    st = grow_step(b, at);
    if (st != PKV_OK)
        return st;
    uint32_t *w = b->step_host;
    for (int i = 0; i < PKV_STEP_HEADER; i++)
        w[i] = (uint32_t)off[i];
    if (n > 0) {
        memcpy(w + off[PKV_STEP_QUERY_START], s->query_start,
               lens[PKV_STEP_QUERY_START] * 4);
        memcpy(w + off[PKV_STEP_CONTEXT_LENS], s->context_lens, (size_t)n * 4);
        memcpy(w + off[PKV_STEP_BLOCK_TABLES], s->block_tables,
               lens[PKV_STEP_BLOCK_TABLES] * 4);
        if (u8)
            memcpy(w + off[PKV_STEP_STAGES], s->stages, (size_t)n * 4);
        else
            memset(w + off[PKV_STEP_STAGES], 0, (size_t)n * 4);
    }
    uint32_t *seal = w + off[PKV_STEP_SEALS];
    for (uint32_t i = 0; i < n; i++) {
        uint32_t q0 = s->query_start[i], q1 = s->query_start[i + 1];
        uint32_t ctx = s->context_lens[i], first = ctx - (q1 - q0);
        const uint32_t *table =
            s->block_tables + (size_t)i * s->max_blocks_per_seq;
        for (uint32_t r = q0; r < q1; r++) {
            uint32_t tok = first + (r - q0);
            w[off[PKV_STEP_ROW_SEQ] + r] = i;
            int sealed = (tok / bs + 1) * (uint64_t)bs <= ctx;
            w[off[PKV_STEP_ROW_TAIL] + r] =
                u8 && !sealed ? s->stages[i] : PKV_STEP_NO_TAIL;
            w[off[PKV_STEP_SLOTS] + 2 * (size_t)r] = (uint32_t)s->slots[r];
            w[off[PKV_STEP_SLOTS] + 2 * (size_t)r + 1] =
                (uint32_t)(s->slots[r] >> 32);
        }
        for (uint32_t j = first / bs; u8 && j < ctx / bs; j++) {
            uint32_t b0 = j * bs;
            uint32_t in_tail = first > b0 ? first - b0 : 0;
            seal[PKV_SEAL_BLOCK] = table[j];
            seal[PKV_SEAL_STAGE] = s->stages[i];
            seal[PKV_SEAL_IN_TAIL] = in_tail;
            seal[PKV_SEAL_FIRST_ROW] = q0 + (b0 + in_tail - first);
            seal += PKV_SEAL_WORDS;
        }
    }
    int decode = n > 0 && t == n && b->decode_state >= 0;
    uint32_t longest = 0;
    for (uint32_t i = 0; i < n; i++) {
        decode &= s->query_start[i + 1] - s->query_start[i] == 1;
        longest = s->context_lens[i] > longest ? s->context_lens[i] : longest;
    }
    if (decode) {
        /* The decode kernels take these arrays as separate buffers. The
         * main upload below comes last on the in-order queue: its event
         * covers these writes too. */
        const int which[3] = {PKV_STEP_CONTEXT_LENS, PKV_STEP_BLOCK_TABLES,
                              PKV_STEP_STAGES};
        cl_mem *mems[3] = {&b->dec_lens, &b->dec_tables, &b->dec_stages};
        for (int i = 0; i < 3; i++) {
            st = grow_buffer(b, mems[i], &b->dec_cap[i], lens[which[i]] * 4,
                             CL_MEM_READ_ONLY, "decode step arrays");
            if (st != PKV_OK)
                return st;
            cl_int err = clEnqueueWriteBuffer(b->queue, *mems[i], CL_FALSE, 0,
                                              lens[which[i]] * 4,
                                              w + off[which[i]], 0, NULL,
                                              NULL);
            if (err != CL_SUCCESS)
                return cl_fail(err, "clEnqueueWriteBuffer(decode arrays)");
        }
    }
    cl_int err = clEnqueueWriteBuffer(b->queue, b->step_mem, CL_FALSE, 0,
                                      at * 4, w, 0, NULL, &b->upload);
    if (err != CL_SUCCESS) {
        b->upload = NULL;
        b->have_step = 0;
        return cl_fail(err, "clEnqueueWriteBuffer(step arrays)");
    }
    b->step = *s;
    b->num_seals = seals;
    b->step_is_decode = decode;
    b->max_context = longest;
    b->have_step = 1;
    return PKV_OK;
}

/* ---------------------------------------------------------- launching */

typedef struct karg {
    size_t size;
    const void *value;
} karg;
#define KA(x) {sizeof(x), &(x)}

static pkv_status launch(pkv__backend *b, cl_kernel k, const char *name,
                         const karg *args, unsigned n, size_t g0, size_t g1,
                         size_t local)
{
    char call[96];
    for (unsigned i = 0; i < n; i++) {
        cl_int err = clSetKernelArg(k, i, args[i].size, args[i].value);
        if (err != CL_SUCCESS) {
            snprintf(call, sizeof call, "clSetKernelArg(%s, %u)", name, i);
            return cl_fail(err, call);
        }
    }
    if (g0 == 0 || g1 == 0)
        return PKV_OK;
    size_t global[2] = {(g0 + local - 1) / local * local, g1};
    size_t lws[2] = {local, 1};
    cl_int err =
        clEnqueueNDRangeKernel(b->queue, k, 2, NULL, global, lws, 0, NULL,
                               NULL);
    if (err != CL_SUCCESS) {
        snprintf(call, sizeof call, "clEnqueueNDRangeKernel(%s)", name);
        return cl_fail(err, call);
    }
    return PKV_OK;
}

/* A tensor reference as the kernels take it. */
typedef struct kt {
    cl_mem mem;
    cl_ulong off; /* elements */
    cl_uint f16;
} kt;

static pkv_status enqueue_append(pkv__backend *b, uint32_t layer, kt k, kt v)
{
    const pkv__backend_config *c = &b->cfg;
    cl_uint hkv = c->num_kv_heads, d = c->head_dim, bs = c->block_size;
    cl_uint dtype = (cl_uint)c->kv_dtype, lyr = layer;
    cl_uint ntok = b->step.num_tokens, nseal = b->num_seals;
    cl_mem arena = b->arenas[layer];
    for (cl_uint kv = 0; kv < 2 && c->kv_dtype == PKV_KV_U8 && nseal; kv++) {
        kt src = kv ? v : k;
        cl_uint group = (cl_uint)(kv ? c->value_quant : c->key_quant);
        karg a[] = {KA(arena), KA(b->stages), KA(src.mem), KA(src.off),
                    KA(src.f16), KA(b->step_mem), KA(nseal), KA(kv),
                    KA(group), KA(hkv), KA(d), KA(bs), KA(b->head_bytes),
                    KA(b->k_part_bytes), KA(b->layer_block_bytes),
                    KA(b->stage_floats), KA(lyr)};
        pkv_status st = launch(b, b->k_seal, "pkv_kv_seal", a,
                               sizeof a / sizeof a[0], nseal, hkv,
                               b->local_seal);
        if (st != PKV_OK)
            return st;
    }
    for (cl_uint kv = 0; kv < 2; kv++) {
        kt src = kv ? v : k;
        karg a[] = {KA(arena), KA(b->stages), KA(src.mem), KA(src.off),
                    KA(src.f16), KA(b->step_mem), KA(ntok), KA(kv),
                    KA(dtype), KA(hkv), KA(d), KA(bs), KA(b->head_bytes),
                    KA(b->k_part_bytes), KA(b->layer_block_bytes),
                    KA(b->stage_floats), KA(lyr)};
        pkv_status st = launch(b, b->k_append, "pkv_kv_append", a,
                               sizeof a / sizeof a[0], ntok, hkv,
                               b->local_append);
        if (st != PKV_OK)
            return st;
    }
    return PKV_OK;
}

static pkv_status enqueue_attend(pkv__backend *b, uint32_t layer, kt q,
                                 kt out, float scale, uint32_t window)
{
    const pkv__backend_config *c = &b->cfg;
    cl_uint hq = c->num_q_heads, hkv = c->num_kv_heads, d = c->head_dim;
    cl_uint bs = c->block_size, dtype = (cl_uint)c->kv_dtype;
    cl_uint kq = (cl_uint)c->key_quant, vq = (cl_uint)c->value_quant;
    cl_uint flags = q.f16 | out.f16 << 1, lyr = layer, win = window;
    cl_uint ntok = b->step.num_tokens, maxb = b->step.max_blocks_per_seq;
    cl_float sc = scale == 0.0f ? 1.0f / sqrtf((float)d) : scale;
    karg a[] = {KA(b->arenas[layer]), KA(b->stages), KA(q.mem), KA(q.off),
                KA(out.mem), KA(out.off), KA(flags), KA(b->step_mem),
                KA(ntok), KA(maxb), KA(hq), KA(hkv), KA(d), KA(bs),
                KA(dtype), KA(kq), KA(vq), KA(b->head_bytes),
                KA(b->k_part_bytes), KA(b->layer_block_bytes),
                KA(b->stage_floats), KA(lyr), KA(sc), KA(win)};
    return launch(b, b->k_attend, "pkv_paged_attention", a,
                  sizeof a / sizeof a[0], ntok, hq, b->local_attend);
}

/* Build the decode program for this geometry on its first use. A build
 * failure is not an error: the generic kernel serves decode steps too. */
static void decode_prepare(pkv__backend *b)
{
    if (b->decode_state != 0)
        return;
    const pkv__backend_config *c = &b->cfg;
    int u8 = c->kv_dtype == PKV_KV_U8;
    char extra[256];
    snprintf(extra, sizeof extra,
             " -DPKV_HEAD_DIM=%u -DPKV_BLOCK_SIZE=%u -DPKV_GROUP=%u "
             "-DPKV_KV_DTYPE=%d -DPKV_KEY_QUANT=%d -DPKV_VALUE_QUANT=%d",
             (unsigned)c->head_dim, (unsigned)c->block_size,
             (unsigned)(c->num_q_heads / c->num_kv_heads), (int)c->kv_dtype,
             u8 ? (int)c->key_quant : PKV_LAYOUT_PER_CHANNEL,
             u8 ? (int)c->value_quant : PKV_LAYOUT_PER_CHANNEL);
    size_t local = 0;
    pkv_status st = get_program(b, decode_files, NUM_FILES(decode_files),
                                extra, b->cache_dir[0] ? b->cache_dir : NULL,
                                b->own_context, &b->decode_program);
    if (st == PKV_OK)
        st = make_kernel(b, b->decode_program, "pkv_decode_partial",
                         &b->k_partial, &local, c->num_kv_heads);
    if (st == PKV_OK && local < c->num_kv_heads)
        st = pkv__fail(PKV_ERR_UNSUPPORTED,
                       "%u kv heads exceed the work-group size %zu",
                       (unsigned)c->num_kv_heads, local);
    if (st == PKV_OK)
        st = make_kernel(b, b->decode_program, "pkv_decode_reduce",
                         &b->k_reduce, &local, 1);
    if (st == PKV_OK) {
        b->decode_state = 1;
        return;
    }
    blog(b, PKV_LOG_WARN,
         "opencl: the decode kernel is unavailable (%s); the generic kernel "
         "serves decode steps",
         pkv_last_error());
    b->decode_state = -1;
}

/* The split-K decode of an all-decode step: kernels/paged_decode.cl's
 * partial kernel over (partition, kv head, sequence), then its reduction
 * when there is more than one partition. */
static pkv_status enqueue_decode(pkv__backend *b, uint32_t layer, cl_mem q,
                                 cl_mem out, float scale, uint32_t window)
{
    const pkv__backend_config *c = &b->cfg;
    cl_uint n = b->step.num_seqs, hq = c->num_q_heads, hkv = c->num_kv_heads;
    pkv__decode_plan plan =
        pkv__decode_plan_make(n, hkv, b->max_context, window, c->block_size,
                              b->compute_units);
    cl_uint parts = plan.num_partitions, psize = plan.partition_size;
    if (parts > 1) {
        size_t rows = (size_t)n * hq * parts;
        pkv_status st = grow_buffer(b, &b->part_acc, &b->part_cap[0],
                                    rows * c->head_dim * 4, CL_MEM_READ_WRITE,
                                    "decode partitions");
        if (st == PKV_OK)
            st = grow_buffer(b, &b->part_ml, &b->part_cap[1], rows * 2 * 4,
                             CL_MEM_READ_WRITE, "decode partitions");
        if (st != PKV_OK)
            return st;
    }
    cl_uint layer_off = layer * hkv * 2u * c->block_size * c->head_dim;
    cl_uint maxb = b->step.max_blocks_per_seq, win = window;
    cl_float sc = scale == 0.0f ? 1.0f / sqrtf((float)c->head_dim) : scale;
    cl_mem acc = parts > 1 ? b->part_acc : NULL;
    cl_mem ml = parts > 1 ? b->part_ml : NULL;
    karg a[] = {KA(b->arenas[layer]), KA(b->stages), KA(b->stage_floats),
                KA(layer_off), KA(b->dec_stages), KA(q), KA(b->dec_lens),
                KA(b->dec_tables), KA(maxb), KA(hkv), KA(sc), KA(win),
                KA(psize), KA(out), KA(acc), KA(ml)};
    pkv_status st = launch(b, b->k_partial, "pkv_decode_partial", a,
                           sizeof a / sizeof a[0], 0, 0, 1);
    if (st != PKV_OK)
        return st;
    size_t global[3] = {parts, hkv, n}, local[3] = {1, hkv, 1};
    cl_int err = clEnqueueNDRangeKernel(b->queue, b->k_partial, 3, NULL,
                                        global, local, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return cl_fail(err, "clEnqueueNDRangeKernel(pkv_decode_partial)");
    if (parts == 1)
        return PKV_OK;
    karg r[] = {KA(acc), KA(ml), KA(parts), KA(out)};
    return launch(b, b->k_reduce, "pkv_decode_reduce", r, 4, hq, n, 1);
}

/* Attention of one layer: the decode kernels when the step is all
 * decodes and q and out are plain f32 rows, else the generic kernel. */
static pkv_status enqueue_attention(pkv__backend *b, uint32_t layer, kt q,
                                    kt out, float scale, uint32_t window)
{
    if (b->step_is_decode && q.off == 0 && !q.f16 && out.off == 0 &&
        !out.f16) {
        decode_prepare(b);
        if (b->decode_state == 1)
            return enqueue_decode(b, layer, q.mem, out.mem, scale, window);
    }
    return enqueue_attend(b, layer, q, out, scale, window);
}

static pkv_status layer_check(const pkv__backend *b, uint32_t layer,
                              const void *in, const void *out)
{
    if (!b->have_step)
        return pkv__fail(PKV_ERR_BAD_STATE, "no step: call begin_step first");
    if (layer >= b->cfg.num_layers)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "layer %u of %u",
                         (unsigned)layer, (unsigned)b->cfg.num_layers);
    if (b->step.num_tokens > 0 && (in == NULL || out == NULL))
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "a tensor is NULL");
    return PKV_OK;
}

/* A host tensor for the kernels: wrapped where the device shares host
 * memory and the pointer is aligned, else copied into (or, for an output,
 * later read from) the backend's buffer `slot`. */
static pkv_status host_in(pkv__backend *b, int slot, const void *p,
                          size_t bytes, int output, host_mem *out)
{
    cl_int err;
    memset(out, 0, sizeof *out);
    if (b->unified && (uintptr_t)p % b->host_align == 0) {
        cl_mem_flags f = CL_MEM_USE_HOST_PTR |
                         (output ? CL_MEM_WRITE_ONLY : CL_MEM_READ_ONLY);
        out->mem = clCreateBuffer(b->context, f, bytes, (void *)(uintptr_t)p,
                                  &err);
        if (err == CL_SUCCESS) {
            out->wrapped = out->temporary = 1;
            return PKV_OK;
        }
        out->mem = NULL;
    }
    if (bytes > b->tensor_cap[slot]) {
        cl_mem m = clCreateBuffer(b->context, CL_MEM_READ_WRITE, bytes, NULL,
                                  &err);
        if (err != CL_SUCCESS)
            return cl_fail(err, "clCreateBuffer(tensor)");
        if (b->tensor_mem[slot] != NULL)
            clReleaseMemObject(b->tensor_mem[slot]);
        b->tensor_mem[slot] = m;
        b->tensor_cap[slot] = bytes;
    }
    out->mem = b->tensor_mem[slot];
    if (!output) {
        err = clEnqueueWriteBuffer(b->queue, out->mem, CL_FALSE, 0, bytes, p,
                                   0, NULL, NULL);
        if (err != CL_SUCCESS)
            return cl_fail(err, "clEnqueueWriteBuffer(tensor)");
    }
    return PKV_OK;
}

static void host_release(host_mem *m)
{
    if (m->temporary && m->mem != NULL)
        clReleaseMemObject(m->mem);
    m->mem = NULL;
}

static pkv_status finish(pkv__backend *b, const char *what)
{
    cl_int err = clFinish(b->queue);
    if (err != CL_SUCCESS) {
        char call[96];
        snprintf(call, sizeof call, "clFinish(%s)", what);
        return cl_fail(err, call);
    }
    return PKV_OK;
}

static pkv_status ocl_append(pkv__backend *b, uint32_t layer, const float *k,
                             const float *v)
{
    pkv_status st = layer_check(b, layer, k, v);
    if (st == PKV_OK)
        st = pkv__backend_kv_check(&b->cfg, b->step.num_tokens, k, v);
    if (st != PKV_OK || b->step.num_tokens == 0)
        return st;
    size_t bytes = (size_t)b->step.num_tokens * b->cfg.num_kv_heads *
                   b->cfg.head_dim * sizeof(float);
    host_mem km, vm;
    memset(&vm, 0, sizeof vm);
    st = host_in(b, 0, k, bytes, 0, &km);
    if (st == PKV_OK)
        st = host_in(b, 1, v, bytes, 0, &vm);
    if (st == PKV_OK) {
        kt kk = {km.mem, 0, 0}, vv = {vm.mem, 0, 0};
        st = enqueue_append(b, layer, kk, vv);
    }
    /* k and v are borrowed for this call only. */
    pkv_status fin = finish(b, "append");
    host_release(&km);
    host_release(&vm);
    return st != PKV_OK ? st : fin;
}

static pkv_status ocl_attend(pkv__backend *b, uint32_t layer, const float *q,
                             float *out, float scale, uint32_t window)
{
    pkv_status st = layer_check(b, layer, q, out);
    if (st != PKV_OK)
        return st;
    if (!(scale >= 0.0f) || isinf(scale))
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "attend: scale must be finite and >= 0");
    if (b->step.num_tokens == 0)
        return PKV_OK;
    size_t bytes = (size_t)b->step.num_tokens * b->cfg.num_q_heads *
                   b->cfg.head_dim * sizeof(float);
    host_mem qm, om;
    memset(&om, 0, sizeof om);
    st = host_in(b, 2, q, bytes, 0, &qm);
    if (st == PKV_OK)
        st = host_in(b, 3, out, bytes, 1, &om);
    if (st == PKV_OK) {
        kt qq = {qm.mem, 0, 0}, oo = {om.mem, 0, 0};
        st = enqueue_attention(b, layer, qq, oo, scale, window);
    }
    if (st == PKV_OK && om.wrapped) {
        /* Mapping makes the device's writes visible in the host memory. */
        cl_int err;
        void *p = clEnqueueMapBuffer(b->queue, om.mem, CL_TRUE, CL_MAP_READ,
                                     0, bytes, 0, NULL, NULL, &err);
        if (err != CL_SUCCESS)
            st = cl_fail(err, "clEnqueueMapBuffer(out)");
        else if ((err = clEnqueueUnmapMemObject(b->queue, om.mem, p, 0, NULL,
                                                NULL)) != CL_SUCCESS)
            st = cl_fail(err, "clEnqueueUnmapMemObject(out)");
    } else if (st == PKV_OK) {
        cl_int err = clEnqueueReadBuffer(b->queue, om.mem, CL_TRUE, 0, bytes,
                                         out, 0, NULL, NULL);
        if (err != CL_SUCCESS)
            st = cl_fail(err, "clEnqueueReadBuffer(out)");
    }
    pkv_status fin = finish(b, "attend");
    host_release(&qm);
    host_release(&om);
    return st != PKV_OK ? st : fin;
}

/* ------------------------------------------------------ device tensors */

static pkv_status device_tensor_check(const pkv__backend *b, const char *name,
                                      const pkv__device_tensor *t,
                                      uint32_t heads, kt *out)
{
    if (t->mem == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "%s: cl_mem is NULL",
                         name);
    cl_context ctx = NULL;
    size_t size = 0;
    char call[96];
    snprintf(call, sizeof call, "clGetMemObjectInfo(%s)", name);
    cl_int err =
        clGetMemObjectInfo(t->mem, CL_MEM_CONTEXT, sizeof ctx, &ctx, NULL);
    if (err == CL_SUCCESS)
        err = clGetMemObjectInfo(t->mem, CL_MEM_SIZE, sizeof size, &size,
                                 NULL);
    if (err != CL_SUCCESS)
        return cl_fail(err, call);
    if (ctx != b->context)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "%s: the cl_mem belongs to another context than "
                         "the engine's (pkv_engine_get_opencl)",
                         name);
    size_t elem = t->dtype == PKV_TENSOR_F16 ? 2 : 4;
    uint64_t need = (uint64_t)b->step.num_tokens * heads * b->cfg.head_dim *
                    elem;
    if (t->offset % (4 * elem) != 0 || t->offset > size ||
        size - t->offset < need)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "%s: %zu-byte buffer, offset %llu: needs %llu bytes "
                         "from an offset that is a multiple of %zu",
                         name, size, (unsigned long long)t->offset,
                         (unsigned long long)need, 4 * elem);
    out->mem = t->mem;
    out->off = t->offset / elem;
    out->f16 = t->dtype == PKV_TENSOR_F16;
    return PKV_OK;
}

pkv_status pkv__opencl_attend_device(pkv__backend *b, uint32_t layer,
                                     const pkv__device_tensor *q,
                                     const pkv__device_tensor *k,
                                     const pkv__device_tensor *v,
                                     const pkv__device_tensor *out,
                                     float scale, uint32_t window)
{
    pkv_status st = layer_check(b, layer, q, out);
    if (st != PKV_OK || b->step.num_tokens == 0)
        return st;
    if (!(scale >= 0.0f) || isinf(scale))
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "attend: scale must be finite and >= 0");
    kt tq, tk, tv, to;
    uint32_t hq = b->cfg.num_q_heads, hkv = b->cfg.num_kv_heads;
    st = device_tensor_check(b, "q", q, hq, &tq);
    if (st == PKV_OK)
        st = device_tensor_check(b, "k", k, hkv, &tk);
    if (st == PKV_OK)
        st = device_tensor_check(b, "v", v, hkv, &tv);
    if (st == PKV_OK)
        st = device_tensor_check(b, "out", out, hq, &to);
    if (st == PKV_OK)
        st = enqueue_append(b, layer, tk, tv);
    if (st == PKV_OK)
        st = enqueue_attention(b, layer, tq, to, scale, window);
    return st;
}

/* --------------------------------------------------------- copies, swap */

static pkv_status copy_units(pkv__backend *b, cl_mem buf, uint64_t src,
                             uint64_t dst, size_t unit_bytes)
{
    cl_ulong s = src, d = dst;
    cl_uint words4 = (cl_uint)(unit_bytes / 16);
    karg a[] = {KA(buf), KA(s), KA(d), KA(words4)};
    return launch(b, b->k_copy, "pkv_block_copy", a, 4, words4, 1,
                  b->local_copy);
}

static pkv_status ocl_copy_blocks(pkv__backend *b,
                                  const pkv__block_copy *pairs, uint32_t n)
{
    pkv_status st = pkv__backend_pairs_check(&b->cfg, pairs, n, 1);
    for (uint32_t i = 0; st == PKV_OK && i < n; i++)
        for (uint32_t l = 0; st == PKV_OK && l < b->cfg.num_layers; l++)
            if (pairs[i].src != pairs[i].dst)
                st = copy_units(b, b->arenas[l], pairs[i].src, pairs[i].dst,
                                b->layer_block_bytes);
    return st;
}

static pkv_status ocl_copy_stages(pkv__backend *b,
                                  const pkv__block_copy *pairs, uint32_t n)
{
    pkv_status st = pkv__backend_pairs_check(&b->cfg, pairs, n, 0);
    for (uint32_t i = 0; st == PKV_OK && i < n; i++)
        if (pairs[i].src != pairs[i].dst)
            st = copy_units(b, b->stages, pairs[i].src, pairs[i].dst,
                            (size_t)b->stage_floats * 4);
    return st;
}

static pkv_status ocl_swap(pkv__backend *b, const uint32_t *blocks,
                           uint32_t n, uint8_t *host, int in)
{
    pkv_status st = pkv__backend_ids_check(&b->cfg, blocks, n, in);
    if (st != PKV_OK)
        return st;
    size_t bytes = b->layer_block_bytes;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t l = 0; l < b->cfg.num_layers; l++, host += bytes) {
            size_t at = (size_t)blocks[i] * bytes;
            cl_int err =
                in ? clEnqueueWriteBuffer(b->queue, b->arenas[l], CL_FALSE,
                                          at, bytes, host, 0, NULL, NULL)
                   : clEnqueueReadBuffer(b->queue, b->arenas[l], CL_FALSE, at,
                                         bytes, host, 0, NULL, NULL);
            if (err != CL_SUCCESS) {
                finish(b, "swap");
                return cl_fail(err, in ? "clEnqueueWriteBuffer(swap in)"
                                       : "clEnqueueReadBuffer(swap out)");
            }
        }
    return finish(b, in ? "swap in" : "swap out");
}

static pkv_status ocl_swap_out(pkv__backend *b, const uint32_t *blocks,
                               uint32_t n, void *host)
{
    return ocl_swap(b, blocks, n, host, 0);
}

static pkv_status ocl_swap_in(pkv__backend *b, const void *host,
                              const uint32_t *blocks, uint32_t n)
{
    return ocl_swap(b, blocks, n, (uint8_t *)(uintptr_t)host, 1);
}

static pkv_status ocl_stage(pkv__backend *b, uint32_t stage, void *host,
                            int in)
{
    if (stage >= b->cfg.num_stages)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "staging tail %u of %u",
                         (unsigned)stage, (unsigned)b->cfg.num_stages);
    size_t bytes = (size_t)b->stage_floats * 4;
    cl_int err = in ? clEnqueueWriteBuffer(b->queue, b->stages, CL_TRUE,
                                           stage * bytes, bytes, host, 0,
                                           NULL, NULL)
                    : clEnqueueReadBuffer(b->queue, b->stages, CL_TRUE,
                                          stage * bytes, bytes, host, 0, NULL,
                                          NULL);
    if (err != CL_SUCCESS)
        return cl_fail(err, in ? "clEnqueueWriteBuffer(stage in)"
                               : "clEnqueueReadBuffer(stage out)");
    return PKV_OK;
}

static pkv_status ocl_stage_out(pkv__backend *b, uint32_t stage, void *host)
{
    return ocl_stage(b, stage, host, 0);
}

static pkv_status ocl_stage_in(pkv__backend *b, const void *host,
                               uint32_t stage)
{
    return ocl_stage(b, stage, (void *)(uintptr_t)host, 1);
}

const pkv__backend_ops pkv__backend_opencl = {
    "opencl",        ocl_create,      ocl_destroy,     ocl_begin_step,
    ocl_append,      ocl_attend,      ocl_copy_blocks, ocl_copy_stages,
    ocl_swap_out,    ocl_swap_in,     ocl_stage_out,   ocl_stage_in,
};
