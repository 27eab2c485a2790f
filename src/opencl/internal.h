/* SPDX-License-Identifier: MIT */
/*
 * Inside the OpenCL backend: its state (struct pkv__backend) and what its
 * files share. One job a file: backend.c (create, destroy, the ops table),
 * device.c (errors, device choice), program.c (sources, builds, the disk
 * cache), buffers.c (buffers, launches, waits), step.c (the step's arrays
 * and block tables on the device), attend.c (append and attention of a
 * layer, host or cl_mem tensors), decode.c (the decode kernels: variant,
 * build, launch), copy.c (copy-on-write, swap, staging), features.c and
 * decode_plan.c (pure choices).
 *
 * Host-memory tensors are borrowed for the call, so append and attend wait
 * for their work before returning, and they go through device buffers
 * kept between calls: no buffer is created per call (a wrap of host
 * memory, CL_MEM_USE_HOST_PTR, would outlive the borrow or cost a
 * clCreateBuffer per layer; a host that wants no copy wraps its memory
 * once itself and passes cl_mem tensors). cl_mem tensors are only
 * enqueued.
 *
 * Programs (program.c): one generic program per device holds every
 * kernel but decode, with geometry and dtype as kernel arguments, so one
 * build serves every engine on the device; the decode kernels are
 * specialised per geometry and built at the first all-decode step.
 */
#ifndef PKV_OPENCL_INTERNAL_H
#define PKV_OPENCL_INTERNAL_H

#include "opencl.h"

#include "device.h"
#include "error.h"
#include "program.h"

#include <stddef.h>
#include <stdint.h>

#define LOCAL_ROWS 16u /* work-group width of the per-row kernels */

/* What a group of layers reads of the step on the device: its block
 * tables and its step arrays (kv_step.h; the slots and freezes are the
 * group's, the rest the same in every group). Buffers of their own rather
 * than sections of shared ones: the kernels index both from the start of
 * the buffer they are given, and a sub-buffer at a section would need
 * the device's base-address alignment and a creation per step.
 * The tables are rows of table_stride entries, written from a host
 * mirror; device_rows knows which table versions the buffer holds, row
 * by row, so that a step uploads only the rows that changed. */
typedef struct pkv__ocl_group {
    cl_mem tables;
    size_t tables_cap; /* bytes */
    uint32_t *table_mirror;
    size_t table_mirror_cap; /* uints */
    pkv__tables_seen device_rows;
    uint32_t *step_host;
    size_t step_host_cap; /* uints */
    cl_mem step_mem;
    size_t step_mem_cap; /* uints */
} pkv__ocl_group;

struct pkv__backend {
    pkv__backend_config cfg;
    pkv__allocator alloc;
    pkv__ocl_target cl; /* device, context, log, program cache */
    cl_command_queue queue;
    cl_program program;
    cl_kernel k_append, k_freeze, k_attend, k_copy, k_tiled;
    /* Steps with more rows than sequences: pkv_paged_attention, or with
     * tile_rows > 0 the tiled kernel (prefill_kind TILES: chunk tokens
     * staged at a time) or Intel's (INTEL: k_prefill, of prefill_program,
     * built per geometry at create, prefill_lanes work-items a group,
     * prefill_slices work-groups a tile and kv head). */
    uint32_t tile_rows, tile_chunk, num_tiles;
    int prefill_kind; /* a pkv__prefill_kind */
    cl_program prefill_program;
    cl_kernel k_prefill;
    uint32_t prefill_lanes, prefill_slices;
    char prefill_variant[PKV__ERROR_MAX]; /* what was chosen, and why */
    size_t local_append, local_freeze, local_attend, local_copy;
    int unified;         /* CL_DEVICE_HOST_UNIFIED_MEMORY (for the log) */
    char device_name[4 * PKV__CL_NAME_MAX];
    /* pkv__backend_opencl named after the device, for the engine's log. */
    pkv__backend_ops ops;
    char ops_name[4 * PKV__CL_NAME_MAX + 16];

    uint32_t layer_block_bytes;
    uint32_t head_bytes;
    uint32_t k_part_bytes;
    uint32_t stage_floats;
    size_t arena_bytes;
    uint32_t num_arenas;
    cl_mem *arenas; /* [num_arenas]: pkv__backend_arena(cfg, layer) */
    cl_mem stages;  /* [num_stages][stage_floats] f32, or NULL */

    /* The step (its tables and step arrays: groups[], one per group of
     * layers) and the upload, whose event covers every group's writes. */
    pkv__step step;
    int have_step;
    int uploaded; /* the step's arrays are on the device */
    uint32_t num_freezes;
    cl_event upload;
    uint32_t num_groups;
    pkv__ocl_group *groups; /* [num_groups]: pkv__backend_group(cfg, l) */

    /* The split-K decode kernels (kernels/decode_common.cl) for steps whose
     * rows are one per sequence: the variant asked for by
     * PKV_OPENCL_DECODE (decode_request, a pkv__decode_kind), specialised
     * by -D on the geometry, built at create. decode_state: 1 ready, -1
     * not used (off, or it did not build). */
    int decode_request;
    int decode_state;
    int step_is_decode;
    char cache_dir[1024]; /* cl.cache_dir points here when set */
    cl_uint compute_units;
    cl_program decode_program;
    uint32_t decode_lanes;     /* 1: CPU; 16: Intel; the GPU work-group */
    uint32_t decode_partition; /* the variant's longest partition; 0: any */
    uint32_t decode_split;     /* work-groups a kv head (PKV_GROUP_SPLIT) */
    char decode_variant[PKV__ERROR_MAX]; /* what was chosen, and why */
    cl_kernel k_partial, k_reduce;
    cl_mem dec_lens, dec_stages; /* this decode step's arrays */
    size_t dec_cap[2];           /* bytes */
    /* Every group's block-table rows hold table_stride entries (a stride
     * that only grows); checked knows which table versions begin_step
     * checked, rows [groups][num_seqs] as the step's. */
    uint32_t table_stride;
    pkv__tables_seen checked;
    uint64_t table_words; /* uploaded to tables (tests) */
    uint64_t finishes;    /* clFinish calls of host-tensor layers (tests) */
    uint64_t buffers_created; /* clCreateBuffer calls (tests) */
    cl_mem part_acc, part_ml;
    size_t part_cap[2]; /* bytes */
    uint32_t max_context;

    /* Device copies of host tensors where no wrap is possible. */
    cl_mem tensor_mem[4];
    size_t tensor_cap[4];
    /* Swap and stage bytes to and from the host, copied on by kernels. */
    cl_mem transfer;
    size_t transfer_cap;
    /* pkv_block_copy's list of (dst, src) units: units_host's words,
     * written whole to units (both units_cap bytes). */
    cl_mem units;
    uint32_t *units_host;
    size_t units_cap;
};

/* A kernel argument, for pkv__ocl_launch. */
typedef struct karg {
    size_t size;
    const void *value;
} karg;
#define KA(x) {sizeof(x), &(x)}

/* A tensor reference as the kernels take it. */
typedef struct kt {
    cl_mem mem;
    cl_ulong off; /* elements */
    cl_uint f16;
} kt;

/* device.c: the host's queue */
/* The host's context and queue: the queue must belong to the context and
 * run in order. */
pkv_status pkv__ocl_adopt_host_queue(pkv__backend *b, cl_context ctx,
                                     cl_command_queue queue);

/* buffers.c: buffers, launches, waits */
/* Every buffer the backend creates, counted (pkv__ocl_buffers_created). */
cl_mem pkv__ocl_new_buffer(pkv__backend *b, cl_mem_flags flags, size_t bytes,
                           cl_int *err);

/* A new buffer of `bytes` zeros. Written through one map of the whole
 * buffer rather than clEnqueueFillBuffer: the pages are committed now,
 * where a failure has a clear place, and a simulator that tracks
 * uninitialized memory (oclgrind) sees one host write of the whole
 * buffer; it forgets what it knew of a buffer at any host write that
 * covers only part of it, so pkv makes none (swap-in and stage-in go
 * through the transfer buffer and pkv_block_copy). */
pkv_status pkv__ocl_new_zeroed(pkv__backend *b, size_t bytes,
                               cl_mem_flags flags, cl_mem *out,
                               const char *what);

/* Make *mem hold at least `bytes` (contents not kept; a new buffer starts
 * zeroed, see pkv__ocl_new_zeroed). */
pkv_status pkv__ocl_grow_buffer(pkv__backend *b, cl_mem *mem, size_t *cap,
                                size_t bytes, cl_mem_flags flags,
                                const char *what);

/* Set the kernel's arguments and run it over (g0 rounded up to local,
 * g1) work-items; g0 or g1 0 only sets the arguments. */
pkv_status pkv__ocl_launch(pkv__backend *b, cl_kernel k, const char *name,
                           const karg *args, unsigned n, size_t g0, size_t g1,
                           size_t local);

/* A host tensor for the kernels: the backend's buffer `slot`, grown as
 * needed, with p's bytes written to it (an input) or to be read from it
 * after the kernels ran (an output). */
pkv_status pkv__ocl_host_in(pkv__backend *b, int slot, const void *p,
                            size_t bytes, int output, cl_mem *out);

/* Wait for the queue (counted, pkv__ocl_finishes); `what` names the
 * work in the message. */
pkv_status pkv__ocl_finish(pkv__backend *b, const char *what);

/* A kernel of prog, and its work-group size: `want`, or less where the
 * device allows less for it. */
pkv_status pkv__ocl_make_kernel(pkv__backend *b, cl_program prog,
                                const char *name, cl_kernel *out,
                                size_t *local, size_t want);

/* step.c: the step on the device */
/* Block-table rows hold a power of two entries, at least 16; max_blocks
 * is at most 2^24 (max_model_len, engine.c). */
uint32_t pkv__ocl_table_stride_for(uint32_t stride, uint32_t max_blocks);

/* begin_step only takes the step: everything that can fail on the device
 * (growing the step buffers, the upload) waits for the step's first layer
 * call, which a host may repeat after a failure. So the engine's plan,
 * once made, never has to be undone. */
pkv_status pkv__ocl_begin_step(pkv__backend *b, const pkv__step *s);

/* Every layer call with rows starts here: the step's arrays on the device. */
pkv_status pkv__ocl_need_upload(pkv__backend *b);

/* The buffers a layer's kernels read: its arena, and its group's tables
 * and step arrays. */
cl_mem pkv__ocl_arena(const pkv__backend *b, uint32_t layer);
const pkv__ocl_group *pkv__ocl_group_of(const pkv__backend *b,
                                        uint32_t layer);

/* decode.c: the split-K decode kernels */
/* Build the decode program for this geometry (create). A build failure
 * is not an error: the generic kernel serves decode steps too. */
void pkv__ocl_decode_prepare(pkv__backend *b);

/* The split-K decode of an all-decode step: the variant's partial kernel
 * over (partition, kv head, sequence), then the reduction when there is
 * more than one partition. */
pkv_status pkv__ocl_enqueue_decode(pkv__backend *b, uint32_t layer, kt q,
                                   kt out, float scale, uint32_t window);

/* attend.c: append and attention of one layer */
pkv_status pkv__ocl_append(pkv__backend *b, uint32_t layer, const float *k,
                           const float *v);

pkv_status pkv__ocl_attend(pkv__backend *b, uint32_t layer, const float *q,
                           float *out, float scale, uint32_t window);

/* The attend_device op (backend.h). */
pkv_status pkv__ocl_attend_device(pkv__backend *b, uint32_t layer,
                                  const pkv_tensor *q, const pkv_tensor *k,
                                  const pkv_tensor *v, const pkv_tensor *out,
                                  float scale, uint32_t window);

pkv_status pkv__ocl_append_attend(pkv__backend *b, uint32_t layer,
                                  const float *k, const float *v,
                                  const float *q, float *out, float scale,
                                  uint32_t window);

/* copy.c: block and tail copies, swap, staging */
pkv_status pkv__ocl_copy_blocks(pkv__backend *b, const pkv__block_copy *pairs,
                                uint32_t n);

pkv_status pkv__ocl_copy_stages(pkv__backend *b, const pkv__block_copy *pairs,
                                uint32_t n);

/* Every block's arenas gathered into the transfer buffer, one
 * pkv__ocl_launch per arena, then one read of it all. */
pkv_status pkv__ocl_swap_out(pkv__backend *b, const uint32_t *blocks,
                             uint32_t n, void *host);

/* Every block's arenas in one host write, then one pkv__ocl_launch per
 * arena from the transfer buffer into it. */
pkv_status pkv__ocl_swap_in(pkv__backend *b, const void *host,
                            const uint32_t *blocks, uint32_t n);

pkv_status pkv__ocl_stage_out(pkv__backend *b, uint32_t stage, void *host);

pkv_status pkv__ocl_stage_in(pkv__backend *b, const void *host,
                             uint32_t stage);

#endif
