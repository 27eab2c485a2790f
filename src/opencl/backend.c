/* SPDX-License-Identifier: MIT */
/*
 * The OpenCL backend object: create and destroy, the kernels of the generic
 * program, the attention kernel for steps with more rows than sequences,
 * the ops table and what tests read of the backend.
 */
#include "internal.h"

#include "features.h"
#include "kv_layout.h"
#include "prefill_dpas.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* The Intel prefill kernel (kernels/prefill_intel.cl), built for this
 * geometry: its program, kernel and shape; PKV_ERR_UNSUPPORTED when it
 * does not fit the device. */
static pkv_status intel_prefill_build(pkv__backend *b, uint64_t local_mem,
                                      size_t max_group, char *opts,
                                      size_t opts_size)
{
    const pkv__backend_config *c = &b->cfg;
    uint32_t group = c->num_q_heads / c->num_kv_heads;
    pkv__prefill_intel_setup s;
    if (pkv__prefill_intel_shape(c->head_dim, group, c->block_size,
                                 local_mem, max_group, &s) != 0)
        return pkv__fail(PKV_ERR_UNSUPPORTED,
                         "it does not fit the device: %llu bytes of local "
                         "memory (%llu needed with chunks of 4 tokens), "
                         "work-groups of %zu",
                         (unsigned long long)local_mem,
                         (unsigned long long)pkv__prefill_intel_local_bytes(
                             c->head_dim, 4),
                         max_group);
    int quantized = pkv__backend_quantized(c);
    char own[96];
    pkv__prefill_intel_options(&s, own, sizeof own);
    pkv__decode_build_options(
        c->head_dim, c->block_size, group, (int)c->kv_dtype,
        quantized ? (int)c->key_quant : PKV_LAYOUT_PER_CHANNEL,
        quantized ? (int)c->value_quant : PKV_LAYOUT_PER_CHANNEL,
        c->u4_group != 0 ? c->u4_group : c->head_dim, own, opts, opts_size);
    size_t local = 0;
    pkv_status st = pkv__ocl_program(&b->cl, PKV__CL_PREFILL_INTEL, opts,
                                     &b->prefill_program);
    if (st == PKV_OK)
        st = pkv__ocl_make_kernel(b, b->prefill_program, "pkv_prefill_intel",
                                  &b->k_prefill, &local, s.lanes);
    if (st == PKV_OK && local < s.lanes)
        st = pkv__fail(PKV_ERR_UNSUPPORTED,
                       "the kernel's work-groups hold %zu items, %u needed",
                       local, (unsigned)s.lanes);
    if (st == PKV_OK) {
        b->tile_rows = s.rows;
        b->tile_chunk = s.chunk;
        b->prefill_lanes = s.lanes;
        b->prefill_slices = s.slices;
    }
    return st;
}

/* The DPAS kernel, asked for: built where the device's work-groups and
 * local memory take the geometry, else PKV_ERR_UNSUPPORTED with the
 * reason. */
static pkv_status dpas_prefill_build(pkv__backend *b, uint64_t local_mem,
                                     size_t max_group)
{
    const pkv__backend_config *c = &b->cfg;
    char why[200];
    if (!pkv__dpas_takes(c->head_dim, c->num_q_heads / c->num_kv_heads,
                         max_group, local_mem, why, sizeof why))
        return pkv__fail(PKV_ERR_UNSUPPORTED, "%s", why);
    return pkv__ocl_dpas_build(b);
}

/* The attention kernel of steps with more rows than sequences, from
 * PKV_OPENCL_PREFILL (request) and the device: Intel's where it can run
 * (else the tiled one), the tiled one where it fits, else
 * pkv_paged_attention; the DPAS kernel only when asked for. Built here,
 * at create, as the decode program is. */
static pkv_status prefill_prepare(pkv__backend *b, int request)
{
    const pkv__backend_config *c = &b->cfg;
    cl_device_type type = 0;
    cl_ulong local_mem = 0;
    size_t max_group = 0;
    char extensions[4096], why[320], opts[512];
    clGetDeviceInfo(b->cl.device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    clGetDeviceInfo(b->cl.device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local_mem,
                    &local_mem, NULL);
    clGetDeviceInfo(b->cl.device, CL_DEVICE_MAX_WORK_GROUP_SIZE,
                    sizeof max_group, &max_group, NULL);
    pkv__ocl_device_string(b->cl.device, CL_DEVICE_EXTENSIONS, extensions,
                           sizeof extensions);
    uint32_t group = c->num_q_heads / c->num_kv_heads;
    pkv__prefill_kind kind = pkv__prefill_choose(
        request, (type & CL_DEVICE_TYPE_CPU) != 0,
        pkv__ocl_has_extension(extensions, "cl_intel_subgroups"),
        pkv__prefill_intel_takes(c->head_dim, group, c->block_size), why,
        sizeof why);
    b->tile_rows = 0;
    b->prefill_kind = kind;
    pkv_status built = PKV_OK;
    if (kind == PKV__PREFILL_DPAS) {
        built = dpas_prefill_build(b, local_mem, max_group);
        if (built == PKV_OK) {
            snprintf(b->prefill_variant, sizeof b->prefill_variant,
                     "dpas: %u sub-groups of 8 per (tile of %u rows, kv "
                     "head), the products on the matrix engines%s (%s)",
                     (unsigned)group, (unsigned)b->tile_rows,
                     pkv__ocl_has_extension(extensions, PKV__DPAS_EXTENSION)
                         ? ""
                         : ", emulated: the device has none",
                     why);
            return PKV_OK;
        }
    } else if (kind == PKV__PREFILL_INTEL) {
        built =
            intel_prefill_build(b, local_mem, max_group, opts, sizeof opts);
        if (built == PKV_OK) {
            snprintf(b->prefill_variant, sizeof b->prefill_variant,
                     "intel: a work-group of 16-lane subgroups per (tile of "
                     "%u rows, kv head, slice of %u query heads), K and V "
                     "staged in local memory %u tokens at a time (%s)",
                     (unsigned)b->tile_rows,
                     (unsigned)(group < PKV__PREFILL_INTEL_QUERIES
                                    ? group
                                    : PKV__PREFILL_INTEL_QUERIES),
                     (unsigned)b->tile_chunk, why);
            pkv__ocl_log(&b->cl, PKV_LOG_LEVEL_INFO,
                         "opencl: prefill kernel %s;%s", b->prefill_variant,
                         opts);
            return PKV_OK;
        }
    }
    if (built != PKV_OK) {
        /* The tiled kernel serves where Intel's or the DPAS kernel does
         * not build. */
        snprintf(why, sizeof why, "the %s prefill kernel is unavailable: %s",
                 kind == PKV__PREFILL_DPAS ? "dpas" : "intel",
                 pkv_last_error());
        pkv__ocl_log(&b->cl, PKV_LOG_LEVEL_WARN, "opencl: prefill kernel: %s",
                     why);
        kind = PKV__PREFILL_TILES;
        b->prefill_kind = kind;
    } else if (request == PKV__PREFILL_INTEL ||
               request == PKV__PREFILL_DPAS) {
        pkv__ocl_log(&b->cl, PKV_LOG_LEVEL_WARN, "opencl: prefill kernel: %s",
                     why);
    }
    if (kind == PKV__PREFILL_ROWS) {
        snprintf(b->prefill_variant, sizeof b->prefill_variant,
                 "rows: a work-item per row and query head (%s)", why);
        return PKV_OK;
    }
    pkv_status st =
        pkv__ocl_make_kernel(b, b->program, "pkv_paged_attention_tiled",
                             &b->k_tiled, &max_group, 1024);
    uint32_t rows = 0, chunk = 0;
    if (st == PKV_OK &&
        pkv__prefill_tile_shape(group, c->head_dim, c->block_size, local_mem,
                                max_group, &rows, &chunk) == 0) {
        b->tile_rows = rows;
        b->tile_chunk = chunk;
        snprintf(b->prefill_variant, sizeof b->prefill_variant,
                 "tiles: %u rows x %u query heads per work-group, %u tokens "
                 "staged at a time (%s)",
                 (unsigned)rows, (unsigned)group, (unsigned)chunk, why);
        pkv__ocl_log(&b->cl, PKV_LOG_LEVEL_INFO, "opencl: prefill kernel %s",
                     b->prefill_variant);
    } else if (st == PKV_OK) {
        b->prefill_kind = PKV__PREFILL_ROWS;
        snprintf(b->prefill_variant, sizeof b->prefill_variant,
                 "rows: the tiled kernel does not fit the device (%llu bytes "
                 "of local memory, work-groups of %zu)",
                 (unsigned long long)local_mem, max_group);
        pkv__ocl_log(&b->cl, PKV_LOG_LEVEL_WARN, "opencl: prefill kernel %s",
                     b->prefill_variant);
    }
    return st;
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
    for (uint32_t g = 0; b->groups != NULL && g < b->num_groups; g++) {
        pkv__ocl_group *grp = &b->groups[g];
        if (grp->step_mem != NULL)
            clReleaseMemObject(grp->step_mem);
        if (grp->tables != NULL)
            clReleaseMemObject(grp->tables);
        pkv__free(&b->alloc, grp->step_host, grp->step_host_cap,
                  sizeof(uint32_t));
        pkv__free(&b->alloc, grp->table_mirror, grp->table_mirror_cap,
                  sizeof(uint32_t));
        pkv__tables_seen_release(&grp->device_rows, &b->alloc);
    }
    pkv__free(&b->alloc, b->groups, b->num_groups, sizeof *b->groups);
    if (b->transfer != NULL)
        clReleaseMemObject(b->transfer);
    if (b->units != NULL)
        clReleaseMemObject(b->units);
    pkv__free(&b->alloc, b->units_host, b->units_cap, 1);
    cl_mem decode_mems[] = {b->dec_lens, b->dec_stages, b->part_acc,
                            b->part_ml};
    for (size_t i = 0; i < 4; i++)
        if (decode_mems[i] != NULL)
            clReleaseMemObject(decode_mems[i]);
    if (b->k_prefill != NULL)
        clReleaseKernel(b->k_prefill);
    if (b->prefill_program != NULL)
        clReleaseProgram(b->prefill_program);
    if (b->k_partial != NULL)
        clReleaseKernel(b->k_partial);
    if (b->k_reduce != NULL)
        clReleaseKernel(b->k_reduce);
    if (b->decode_program != NULL)
        clReleaseProgram(b->decode_program);
    if (b->stages != NULL)
        clReleaseMemObject(b->stages);
    if (b->arenas != NULL) {
        for (uint32_t a = 0; a < b->num_arenas; a++)
            if (b->arenas[a] != NULL)
                clReleaseMemObject(b->arenas[a]);
        pkv__free(&b->alloc, b->arenas, b->num_arenas, sizeof *b->arenas);
    }
    cl_kernel ks[] = {b->k_append, b->k_freeze, b->k_attend, b->k_copy,
                      b->k_tiled};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        if (ks[i] != NULL)
            clReleaseKernel(ks[i]);
    if (b->program != NULL)
        clReleaseProgram(b->program);
    if (b->queue != NULL)
        clReleaseCommandQueue(b->queue);
    if (b->cl.context != NULL)
        clReleaseContext(b->cl.context);
    pkv__tables_seen_release(&b->checked, &b->alloc);
    pkv__allocator a = b->alloc;
    pkv__free(&a, b, 1, sizeof *b);
}


/* The most blocks a sequence of the config can hold. */
static uint32_t config_max_blocks(const pkv__backend_config *c)
{
    return (uint32_t)(((uint64_t)c->max_seq_tokens + c->block_size - 1) /
                      c->block_size);
}

/* Sizes against the device's limits, before anything is allocated. */
static pkv_status check_fit(pkv__backend *b)
{
    const pkv__backend_config *c = &b->cfg;
    cl_ulong max_alloc = 0, global = 0;
    clGetDeviceInfo(b->cl.device, CL_DEVICE_MAX_MEM_ALLOC_SIZE,
                    sizeof max_alloc, &max_alloc, NULL);
    clGetDeviceInfo(b->cl.device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global,
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
    uint64_t total = arena * pkv__backend_num_arenas(c) + stages;
    if (arena > max_alloc || stages > max_alloc || total > global)
        return pkv__fail(PKV_ERR_DEVICE_MEMORY,
                         "opencl: %u arenas of %u blocks need %llu bytes per "
                         "arena (%llu of staging tails), %llu in all; the "
                         "device '%s' allows %llu per buffer and %llu in "
                         "all: lower num_blocks or cache_bytes",
                         (unsigned)pkv__backend_num_arenas(c),
                         (unsigned)c->num_blocks,
                         (unsigned long long)arena,
                         (unsigned long long)stages,
                         (unsigned long long)total, b->device_name,
                         (unsigned long long)max_alloc,
                         (unsigned long long)global);
    /* The largest step's block tables (of one group: each group has a
     * buffer of its own), rows of a power-of-two stride. Its
     * other arrays (kv_step.h) stay far below the 2^32 words the kernels
     * index: at most 65,536 sequences and 2^20 rows (engine.c) pack into
     * fewer than 2^24 words. */
    uint64_t tables = (uint64_t)c->max_step_seqs *
                      pkv__ocl_table_stride_for(0, config_max_blocks(c)) *
                      sizeof(uint32_t);
    if (tables > max_alloc)
        return pkv__fail(PKV_ERR_DEVICE_MEMORY,
                         "opencl: the block tables of %u sequences of up to "
                         "%u tokens need %llu bytes; the device '%s' allows "
                         "%llu per buffer: lower max_num_seqs or "
                         "max_model_len",
                         (unsigned)c->max_step_seqs,
                         (unsigned)c->max_seq_tokens,
                         (unsigned long long)tables, b->device_name,
                         (unsigned long long)max_alloc);
    b->layer_block_bytes = (uint32_t)lbb;
    b->arena_bytes = (size_t)arena;
    b->stage_floats = (uint32_t)(stage_bytes / 4);
    b->head_bytes = (uint32_t)(lbb / c->num_kv_heads);
    b->k_part_bytes = (uint32_t)pkv__backend_part_bytes(c, 0);
    return PKV_OK;
}

pkv_status pkv__ocl_create(const pkv__backend_config *config,
                              const pkv__allocator *alloc,
                              const pkv__ocl_options *o,
                              pkv__backend **out)
{
    *out = NULL;
    pkv_status st = pkv__backend_config_check(config);
    if (st != PKV_OK)
        return st;
    /* Refused, not skipped: the host asked for a cache, and a warning in
     * a log that is silent by default would leave it unaware that it runs
     * without one, or that its directory is open to others. */
    char unsafe[160];
    if (o->cache_dir != NULL &&
        pkv__ocl_cache_dir_unsafe(o->cache_dir, unsafe, sizeof unsafe))
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "program_cache_dir %s %s: a file planted there "
                         "would be loaded as a kernel binary",
                         o->cache_dir, unsafe);
    pkv__backend *b = pkv__calloc(alloc, 1, sizeof *b);
    if (b == NULL)
        return pkv__fail(PKV_ERR_OUT_OF_MEMORY, "opencl backend: no memory");
    b->cfg = *config;
    b->alloc = *alloc;
    b->cl.alloc = *alloc;
    b->cl.log = o->log;
    b->cl.log_user = o->log_user;
    b->cl.log_level = o->log_level;
    int own = o->context == NULL && o->queue == NULL;
    b->cl.own_context = own;
    if (o->cache_dir != NULL) {
        snprintf(b->cache_dir, sizeof b->cache_dir, "%s", o->cache_dir);
        b->cl.cache_dir = b->cache_dir;
    }
    const char *dk = getenv("PKV_OPENCL_DECODE");
    b->decode_request = pkv__decode_parse(dk);
    const char *pf = getenv("PKV_OPENCL_PREFILL");
    int prefill_request = pkv__prefill_parse(pf);
    if (b->decode_request < 0 || prefill_request < 0) {
        pkv_status bad =
            b->decode_request < 0
                ? pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                            "PKV_OPENCL_DECODE=%s: expected auto, cpu, gpu, "
                            "intel or off",
                            dk)
                : pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                            "PKV_OPENCL_PREFILL=%s: expected auto, rows, "
                            "tiles, intel or dpas",
                            pf);
        pkv__free(alloc, b, 1, sizeof *b);
        return bad;
    }
    if (own)
        st = pkv__ocl_pick_device(pkv__ocl_wanted_device(o->device),
                                 &b->cl.device);
    else
        st = pkv__ocl_adopt_host_queue(b, (cl_context)o->context,
                                       (cl_command_queue)o->queue);
    if (st == PKV_OK) {
        char dname[PKV__CL_NAME_MAX], driver[PKV__CL_NAME_MAX];
        char pname[PKV__CL_NAME_MAX];
        cl_platform_id plat = NULL;
        clGetDeviceInfo(b->cl.device, CL_DEVICE_PLATFORM, sizeof plat, &plat,
                        NULL);
        pkv__ocl_platform_name(plat, pname, sizeof pname);
        pkv__ocl_device_string(b->cl.device, CL_DEVICE_NAME, dname,
                              sizeof dname);
        pkv__ocl_device_string(b->cl.device, CL_DRIVER_VERSION, driver,
                              sizeof driver);
        snprintf(b->device_name, sizeof b->device_name, "%s / %s (driver %s)",
                 pname, dname, driver);
        cl_bool unified = CL_FALSE;
        clGetDeviceInfo(b->cl.device, CL_DEVICE_HOST_UNIFIED_MEMORY,
                        sizeof unified, &unified, NULL);
        b->unified = unified == CL_TRUE;
        clGetDeviceInfo(b->cl.device, CL_DEVICE_MAX_COMPUTE_UNITS,
                        sizeof b->compute_units, &b->compute_units, NULL);
        st = check_fit(b);
    }
    if (st == PKV_OK) {
        b->groups = pkv__calloc(alloc, pkv__backend_num_groups(config),
                                sizeof *b->groups);
        if (b->groups == NULL)
            st = pkv__fail(PKV_ERR_OUT_OF_MEMORY, "opencl backend: no memory");
        else
            b->num_groups = pkv__backend_num_groups(config);
    }
    for (uint32_t g = 0; st == PKV_OK && g < b->num_groups; g++)
        st = pkv__tables_seen_init(&b->groups[g].device_rows, alloc,
                                   config->max_step_seqs);
    if (st == PKV_OK)
        st = pkv__tables_seen_init(&b->checked, alloc,
                                   config->max_step_seqs * b->num_groups);
    if (st == PKV_OK)
        st = pkv__ocl_program(&b->cl, PKV__CL_GENERIC, "", &b->program);
    if (st == PKV_OK && own) {
        cl_int err;
        b->queue = clCreateCommandQueue(b->cl.context, b->cl.device, 0, &err);
        if (err != CL_SUCCESS) {
            b->queue = NULL;
            st = pkv__ocl_fail(err, "clCreateCommandQueue");
        }
    }
    if (st == PKV_OK)
        st = pkv__ocl_make_kernel(b, b->program, "pkv_kv_append", &b->k_append,
                                  &b->local_append, LOCAL_ROWS);
    if (st == PKV_OK)
        st = pkv__ocl_make_kernel(b, b->program, "pkv_kv_freeze", &b->k_freeze,
                                  &b->local_freeze, 1);
    if (st == PKV_OK)
        st = pkv__ocl_make_kernel(b, b->program, "pkv_paged_attention",
                                  &b->k_attend, &b->local_attend, LOCAL_ROWS);
    if (st == PKV_OK)
        st = pkv__ocl_make_kernel(b, b->program, "pkv_block_copy", &b->k_copy,
                                  &b->local_copy, 64);
    if (st == PKV_OK)
        st = prefill_prepare(b, prefill_request);
    /* The decode kernels too, here where the geometry is known, so that
     * the first all-decode step pays no build in the host's latency (a
     * program cache directory turns later processes' builds into a binary
     * load). Where they do not build, the generic kernel takes decode
     * steps. */
    if (st == PKV_OK)
        pkv__ocl_decode_prepare(b);

    if (st == PKV_OK) {
        uint32_t arenas = pkv__backend_num_arenas(config);
        b->arenas = pkv__calloc(alloc, arenas, sizeof *b->arenas);
        if (b->arenas == NULL)
            st = pkv__fail(PKV_ERR_OUT_OF_MEMORY, "opencl backend: no memory");
        else
            b->num_arenas = arenas;
    }
    for (uint32_t a = 0; st == PKV_OK && a < b->num_arenas; a++)
        st = pkv__ocl_new_zeroed(b, b->arena_bytes, CL_MEM_READ_WRITE,
                                 &b->arenas[a], "arena");
    if (st == PKV_OK && config->num_stages > 0)
        st = pkv__ocl_new_zeroed(
            b, (size_t)b->stage_floats * 4 * config->num_stages,
            CL_MEM_READ_WRITE, &b->stages, "staging tails");
    if (st == PKV_OK) {
        /* Allocation is often lazy: make it happen now, where a failure
         * has a clear place. */
        cl_int err = clFinish(b->queue);
        if (err != CL_SUCCESS)
            st = pkv__ocl_fail(err, "clFinish(zero the arenas)");
    }
    if (st != PKV_OK) {
        char why[PKV__ERROR_MAX];
        snprintf(why, sizeof why, "%s", pkv_last_error());
        ocl_destroy(b);
        return pkv__fail(st, "%s", why);
    }
    pkv__ocl_log(&b->cl, PKV_LOG_LEVEL_DEBUG,
                 "opencl: %s%s, %u arenas of %zu bytes", b->device_name,
                 b->unified ? ", unified memory" : "",
                 (unsigned)b->num_arenas, b->arena_bytes);
    *out = b;
    return PKV_OK;
}

static pkv_status ocl_create(const pkv__backend_config *config,
                             const pkv__allocator *alloc, pkv__backend **out)
{
    pkv__ocl_options o;
    memset(&o, 0, sizeof o);
    return pkv__ocl_create(config, alloc, &o, out);
}

const pkv__backend_ops *pkv__ocl_ops(pkv__backend *b)
{
    b->ops = pkv__backend_opencl;
    snprintf(b->ops_name, sizeof b->ops_name, "opencl (%s)", b->device_name);
    b->ops.name = b->ops_name;
    return &b->ops;
}

int pkv__ocl_is(const pkv__backend_ops *ops)
{
    return ops != NULL && ops->begin_step == pkv__backend_opencl.begin_step;
}

const char *pkv__ocl_decode_variant(const pkv__backend *b)
{
    return b->decode_variant[0] != '\0' ? b->decode_variant : NULL;
}

const char *pkv__ocl_prefill_variant(const pkv__backend *b)
{
    return b->prefill_variant[0] != '\0' ? b->prefill_variant : NULL;
}

uint64_t pkv__ocl_table_words(const pkv__backend *b)
{
    return b->table_words;
}

uint64_t pkv__ocl_finishes(const pkv__backend *b)
{
    return b->finishes;
}

uint64_t pkv__ocl_buffers_created(const pkv__backend *b)
{
    return b->buffers_created;
}

void pkv__ocl_handles(const pkv__backend *b, void **context,
                         void **queue)
{
    *context = (void *)b->cl.context;
    *queue = (void *)b->queue;
}

void pkv__ocl_release_programs(void)
{
    pkv__ocl_release_shared();
}

const pkv__backend_ops pkv__backend_opencl = {
    "opencl",
    ocl_create,
    ocl_destroy,
    pkv__ocl_begin_step,
    pkv__ocl_append,
    pkv__ocl_attend,
    pkv__ocl_copy_blocks,
    pkv__ocl_copy_stages,
    pkv__ocl_swap_out,
    pkv__ocl_swap_in,
    pkv__ocl_stage_out,
    pkv__ocl_stage_in,
    pkv__ocl_append_attend,
    pkv__ocl_attend_device,
};
