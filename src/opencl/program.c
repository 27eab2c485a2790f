/* SPDX-License-Identifier: MIT */
/*
 * Programs for the OpenCL backend (program.h), built from the kernel files
 * embedded at build time (cmake/embed.cmake), or read from
 * pkv__ocl_kernel_dir. When pkv owns the context, contexts and programs
 * are shared by every engine of the process, one per (device, build key),
 * and kept until it exits or calls pkv_opencl_release_programs: building
 * takes seconds on some drivers, creating an engine should not. Binaries
 * can be cached on disk, keyed by the sources, the options and the device
 * and driver; a cache file is checked (magic, key, size, checksum) and
 * never trusted: a bad one is rebuilt and rewritten. The checksum is no
 * defence against a crafted file (PoCL's deserializer crashes on half a
 * binary under a valid header), so only a directory and files that this
 * user alone can write are used, and a file appears under its name only
 * once written whole (a temporary name, then rename).
 */
#define _POSIX_C_SOURCE 200809L /* fdopen, fstat, O_NOFOLLOW, geteuid */
#include "program.h"

#include "error.h"
#include "lock.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#define CACHE_MAGIC "PKVCLB01"
#define CACHE_MAX_BYTES (256u << 20)

#ifdef PKV_KERNELS_DIR
const char *pkv__ocl_kernel_dir = PKV_KERNELS_DIR;
#else
const char *pkv__ocl_kernel_dir = NULL;
#endif

/* --------------------------------------------- process-wide programs */

/* pkv's own contexts and programs, one per (device, build key), shared by
 * every engine of the process and kept until it exits: building a program
 * takes seconds on some drivers, creating an engine should not. shared_lock
 * guards the table, never a build. */
typedef struct shared_program {
    cl_device_id device;
    uint64_t key;
    cl_context context;
    cl_program program;
} shared_program;

#define MAX_SHARED 64u
static shared_program shared[MAX_SHARED];
static unsigned num_shared;
static pkv__lock shared_lock;
static pkv__once shared_once = PKV__ONCE_INIT;
static int shared_lock_ok;

static void shared_init(void)
{
    shared_lock_ok = pkv__lock_init(&shared_lock) == 0;
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

/* The files of the generic program, of the decode programs and of the
 * Intel prefill program. */
static const char *const generic_files[] = {
    "src/kv_layout.h",         "src/kv_step.h",
    "kernels/pkv_common.cl",   "kernels/tensor_io.cl",
    "kernels/kv_append.cl",    "kernels/paged_attention.cl",
    "kernels/paged_attention_tiled.cl", "kernels/block_copy.cl"};
static const char *const decode_files[] = {
    "src/kv_layout.h", "kernels/tensor_io.cl", "kernels/decode_common.cl",
    "kernels/paged_decode.cl"};
static const char *const decode_gpu_files[] = {
    "src/kv_layout.h", "kernels/tensor_io.cl", "kernels/decode_common.cl",
    "kernels/decode_gpu.cl"};
static const char *const decode_intel_files[] = {
    "src/kv_layout.h", "kernels/tensor_io.cl", "kernels/decode_common.cl",
    "kernels/decode_intel.cl"};
/* The DPAS prefill program: paged_attention.cl for its helpers (its
 * kernel comes along, unused), the builtin's emulation where the device
 * lacks the extension, the kernel. */
static const char *const prefill_dpas_files[] = {
    "src/kv_layout.h", "src/kv_step.h", "kernels/pkv_common.cl",
    "kernels/tensor_io.cl", "kernels/paged_attention.cl",
    "kernels/dpas_emulation.cl", "kernels/prefill_dpas.cl"};
static const char *const prefill_intel_files[] = {
    "src/kv_layout.h", "src/kv_step.h", "kernels/tensor_io.cl",
    "kernels/prefill_intel.cl"};
#define NUM_FILES(list) ((unsigned)(sizeof list / sizeof list[0]))

/* Read a kernel file from pkv__ocl_kernel_dir into dst (size bytes), or
 * only measure it (dst NULL). */
static pkv_status read_kernel_file(const char *name, char *dst, size_t *size)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", pkv__ocl_kernel_dir, name);
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
 * from pkv__ocl_kernel_dir. */
static pkv_status load_source(pkv__ocl_target *t, const char *const *names,
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
        if (pkv__ocl_kernel_dir != NULL) {
            pkv_status st = read_kernel_file(names[i], NULL, &sizes[i]);
            if (st != PKV_OK)
                return st;
        }
        total += sizes[i] + 1;
    }
    char *src = pkv__calloc(&t->alloc, total, 1);
    if (src == NULL)
        return pkv__fail(PKV_ERR_OUT_OF_MEMORY, "kernel source: no memory");
    size_t at = 0;
    for (unsigned i = 0; i < n; i++) {
        if (pkv__ocl_kernel_dir == NULL) {
            memcpy(src + at, files[i]->data, sizes[i]);
        } else {
            pkv_status st = read_kernel_file(names[i], src + at, &sizes[i]);
            if (st != PKV_OK) {
                pkv__free(&t->alloc, src, total, 1);
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

static void build_options(const pkv__ocl_target *t, const char *extra,
                          char *buf, size_t size)
{
    cl_device_fp_config fp = 0;
    clGetDeviceInfo(t->device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp,
                    NULL);
    /* A correctly rounded division makes the u8 freeze's codes equal the
     * CPU backend's (kv_append.cl). */
    snprintf(buf, size, "-cl-std=CL1.2%s%s",
             (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT)
                 ? " -cl-fp32-correctly-rounded-divide-sqrt"
                 : "",
             extra);
}

/* The key of a build: sources, device, driver and options. */
static uint64_t build_key(const pkv__ocl_target *t, const char *src,
                          size_t src_size, const char *options)
{
    char buf[PKV__CL_NAME_MAX];
    uint64_t h = fnv1a(FNV_START, src, src_size);
    h = fnv1a(h, options, strlen(options) + 1);
    const cl_device_info infos[] = {CL_DEVICE_NAME, CL_DEVICE_VENDOR,
                                    CL_DEVICE_VERSION, CL_DRIVER_VERSION};
    for (size_t i = 0; i < sizeof infos / sizeof infos[0]; i++) {
        pkv__ocl_device_string(t->device, infos[i], buf, sizeof buf);
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

/* Whether st (a cache directory's or file's) may be written by another
 * user than this one and root: its owner, or its mode's group and other
 * write bits. 1 with why[] saying so, or 0. */
static int writable_by_others(const struct stat *st, char *why,
                              size_t why_size)
{
    if (st->st_uid != geteuid() && st->st_uid != 0) {
        snprintf(why, why_size, "is owned by uid %u, not by this user "
                 "(uid %u) or root", (unsigned)st->st_uid,
                 (unsigned)geteuid());
        return 1;
    }
    if ((st->st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        snprintf(why, why_size, "is writable by its group or others "
                 "(mode %03o; chmod go-w)", (unsigned)(st->st_mode & 0777));
        return 1;
    }
    return 0;
}

int pkv__ocl_cache_dir_unsafe(const char *dir, char *why, size_t why_size)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return 0;
    if (!S_ISDIR(st.st_mode)) {
        snprintf(why, why_size, "is not a directory");
        return 1;
    }
    return writable_by_others(&st, why, why_size);
}

/* A program from a cache file, or NULL when there is none or it does not
 * pass: magic, key, size and checksum (FNV-1a) checked, then the driver
 * must accept and build the binary. A bad file is logged and rebuilt. */
static cl_program cache_load(pkv__ocl_target *t, const char *path, uint64_t key,
                             const char *options)
{
    /* Not through a link: it could name a file anyone may write. */
    int fd = open(path, O_RDONLY | O_NOFOLLOW);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "rb");
    if (f == NULL) {
        close(fd);
        return NULL;
    }
    unsigned char head[32];
    const char *why = NULL;
    char owner[128];
    unsigned char *bin = NULL;
    uint64_t size = 0;
    cl_program prog = NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        why = "not a regular file";
    else if (writable_by_others(&st, owner, sizeof owner))
        why = owner;
    if (why == NULL && (fread(head, 1, sizeof head, f) != sizeof head ||
        memcmp(head, CACHE_MAGIC, 8) != 0 || get_u64(head + 8) != key))
        why = "bad header";
    if (why == NULL) {
        size = get_u64(head + 16);
        if (size == 0 || size > CACHE_MAX_BYTES)
            why = "bad size";
    }
    if (why == NULL) {
        bin = pkv__calloc(&t->alloc, (size_t)size, 1);
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
        prog = clCreateProgramWithBinary(t->context, 1, &t->device, &n, bins,
                                         &bstatus, &err);
        if (err != CL_SUCCESS || bstatus != CL_SUCCESS) {
            why = "rejected by the driver";
            if (prog != NULL)
                clReleaseProgram(prog);
            prog = NULL;
        } else if (clBuildProgram(prog, 1, &t->device, options, NULL, NULL) !=
                   CL_SUCCESS) {
            why = "does not build";
            clReleaseProgram(prog);
            prog = NULL;
        }
    }
    if (bin != NULL)
        pkv__free(&t->alloc, bin, (size_t)size, 1);
    if (why != NULL)
        pkv__ocl_log(t, PKV_LOG_LEVEL_WARN, "program cache %s: %s; rebuilding",
                     path, why);
    else
        pkv__ocl_log(t, PKV_LOG_LEVEL_DEBUG, "program cache hit: %s", path);
    return prog;
}

/* Write the built program's binary (best effort: a cache that cannot be
 * written costs a rebuild next time, nothing else). */
static void cache_store(pkv__ocl_target *t, const char *path, uint64_t key,
                        cl_program prog)
{
    size_t size = 0;
    if (clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size,
                         NULL) != CL_SUCCESS ||
        size == 0 || size > CACHE_MAX_BYTES)
        return;
    unsigned char *bin = pkv__calloc(&t->alloc, size, 1);
    if (bin == NULL)
        return;
    unsigned char *bins[1] = {bin};
    /* A name of this process and target alone, created afresh (O_EXCL:
     * never through a file or link already there), readable by this user
     * alone; cache_load never opens it, and the rename makes the whole
     * file appear at once. */
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.%ld.%p.tmp", path, (long)getpid(),
             (void *)t);
    FILE *f = NULL;
    int ok = clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bins, bins,
                              NULL) == CL_SUCCESS;
    int fd = ok ? open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600)
                : -1;
    if (fd >= 0) {
        f = fdopen(fd, "wb");
        if (f == NULL) {
            close(fd);
            remove(tmp);
        }
    }
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
        pkv__ocl_log(t, ok ? PKV_LOG_LEVEL_DEBUG : PKV_LOG_LEVEL_WARN,
                     "program cache %s: %s", path,
                     ok ? "written" : "cannot be written");
    }
    pkv__free(&t->alloc, bin, size, 1);
}

/* Build the program for t->context/t->device, through the disk cache. */
static pkv_status build_program(pkv__ocl_target *t, const char *cache_dir,
                                const char *src, size_t src_size,
                                const char *options, uint64_t key,
                                cl_program *out)
{
    char path[1024] = "";
    if (cache_dir != NULL) {
        snprintf(path, sizeof path, "%s/pkv-%016llx.clbin", cache_dir,
                 (unsigned long long)key);
        *out = cache_load(t, path, key, options);
        if (*out != NULL)
            return PKV_OK;
    }
    cl_int err;
    const char *srcs[1] = {src};
    size_t lens[1] = {src_size - 1};
    cl_program prog =
        clCreateProgramWithSource(t->context, 1, srcs, lens, &err);
    if (err != CL_SUCCESS)
        return pkv__ocl_fail(err, "clCreateProgramWithSource");
    err = clBuildProgram(prog, 1, &t->device, options, NULL, NULL);
    if (err != CL_SUCCESS) {
        char log[PKV__ERROR_MAX];
        log[0] = '\0';
        clGetProgramBuildInfo(prog, t->device, CL_PROGRAM_BUILD_LOG,
                              sizeof log - 1, log, NULL);
        log[sizeof log - 1] = '\0';
        clReleaseProgram(prog);
        return pkv__fail(pkv__ocl_status(err) == PKV_ERR_DEVICE
                             ? PKV_ERR_BUILD
                             : pkv__ocl_status(err),
                         "clBuildProgram: %s (%d): %s",
                         pkv__ocl_error_name(err), (int)err, log);
    }
    if (cache_dir != NULL)
        cache_store(t, path, key, prog);
    *out = prog;
    return PKV_OK;
}

/* A program from the given files and extra options, for t->device. When
 * pkv owns the context (own), programs are shared process-wide: the first
 * one fixes the context (created here when t->context is NULL), later ones
 * are looked up in the same context. */
void pkv__ocl_release_shared(void)
{
    pkv__call_once(&shared_once, shared_init);
    if (!shared_lock_ok)
        return;
    pkv__lock_take(&shared_lock);
    for (unsigned i = 0; i < num_shared; i++) {
        clReleaseProgram(shared[i].program);
        clReleaseContext(shared[i].context);
    }
    num_shared = 0;
    pkv__lock_give(&shared_lock);
}

/* Under shared_lock: the shared program for t's device and key (in t's
 * context, or any when t has none yet, which t then adopts), retained into
 * *out. Returns 1 if found. */
static int find_shared(pkv__ocl_target *t, uint64_t key, cl_program *out)
{
    for (unsigned i = 0; i < num_shared; i++) {
        if (shared[i].device != t->device || shared[i].key != key ||
            (t->context != NULL && shared[i].context != t->context))
            continue;
        if (t->context == NULL) {
            t->context = shared[i].context;
            clRetainContext(t->context);
        }
        *out = shared[i].program;
        clRetainProgram(*out);
        return 1;
    }
    return 0;
}

static pkv_status get_program(pkv__ocl_target *t, const char *const *names,
                              unsigned n, const char *extra,
                              const char *cache_dir, int own, cl_program *out)
{
    char *src = NULL;
    size_t src_size = 0;
    pkv_status st = load_source(t, names, n, &src, &src_size);
    if (st != PKV_OK)
        return st;
    char options[512];
    build_options(t, extra, options, sizeof options);
    uint64_t key = build_key(t, src, src_size, options);
    if (!own) {
        st = build_program(t, cache_dir, src, src_size, options, key, out);
        pkv__free(&t->alloc, src, src_size, 1);
        return st;
    }
    pkv__call_once(&shared_once, shared_init);
    if (!shared_lock_ok) {
        pkv__free(&t->alloc, src, src_size, 1);
        return pkv__fail(PKV_ERR_INTERNAL, "program table lock");
    }
    /* The lock guards the table only: a build can take seconds and must
     * not hold up other engines. Two engines that miss at once both build;
     * the second to finish keeps the first one's program. */
    pkv__lock_take(&shared_lock);
    int hit = find_shared(t, key, out);
    pkv__lock_give(&shared_lock);
    if (!hit) {
        cl_int err = CL_SUCCESS;
        if (t->context == NULL) {
            t->context =
                clCreateContext(NULL, 1, &t->device, NULL, NULL, &err);
            if (err != CL_SUCCESS) {
                t->context = NULL;
                st = pkv__ocl_fail(err, "clCreateContext");
            }
        }
        if (st == PKV_OK)
            st = build_program(t, cache_dir, src, src_size, options, key,
                               out);
        if (st == PKV_OK) {
            cl_program built = *out;
            pkv__lock_take(&shared_lock);
            if (find_shared(t, key, out)) {
                clReleaseProgram(built);
            } else if (num_shared < MAX_SHARED) {
                shared_program *s = &shared[num_shared++];
                s->device = t->device;
                s->key = key;
                s->context = t->context;
                s->program = built;
                clRetainContext(s->context);
                clRetainProgram(s->program);
            }
            pkv__lock_give(&shared_lock);
        }
    }
    pkv__free(&t->alloc, src, src_size, 1);
    return st;
}

void pkv__ocl_log(const pkv__ocl_target *t, int32_t level, const char *fmt,
                 ...)
{
    va_list args;
    va_start(args, fmt);
    pkv__vlog(t->log, t->log_user, t->log_level, level, fmt, args);
    va_end(args);
}

pkv_status pkv__ocl_program(pkv__ocl_target *t, int kind, const char *extra,
                           cl_program *out)
{
    if (kind == PKV__CL_DECODE)
        return get_program(t, decode_files, NUM_FILES(decode_files), extra,
                           t->cache_dir, t->own_context, out);
    if (kind == PKV__CL_DECODE_GPU)
        return get_program(t, decode_gpu_files, NUM_FILES(decode_gpu_files),
                           extra, t->cache_dir, t->own_context, out);
    if (kind == PKV__CL_PREFILL_DPAS)
        return get_program(t, prefill_dpas_files,
                           NUM_FILES(prefill_dpas_files), extra, t->cache_dir,
                           t->own_context, out);
    if (kind == PKV__CL_DECODE_INTEL)
        return get_program(t, decode_intel_files,
                           NUM_FILES(decode_intel_files), extra, t->cache_dir,
                           t->own_context, out);
    if (kind == PKV__CL_PREFILL_INTEL)
        return get_program(t, prefill_intel_files,
                           NUM_FILES(prefill_intel_files), extra,
                           t->cache_dir, t->own_context, out);
    return get_program(t, generic_files, NUM_FILES(generic_files), extra,
                       t->cache_dir, t->own_context, out);
}
