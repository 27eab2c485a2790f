/* SPDX-License-Identifier: MIT */
/* Which decode kernel variant a device gets, and its shape, from what the
 * device reports. Pure functions, so the choice is tested without the
 * device. */
#ifndef PKV_OPENCL_FEATURES_H
#define PKV_OPENCL_FEATURES_H

#include <stddef.h>
#include <stdint.h>

/* Whether the space-separated extension list holds exactly `name`. */
int pkv__ocl_has_extension(const char *extensions, const char *name);

/* Whether a device is an Intel GPU as the kernel choices see one: not a
 * CPU device (cpu_device: CL_DEVICE_TYPE_CPU), with cl_intel_subgroups,
 * cl_intel_subgroups_short and cl_intel_subgroups_char. */
int pkv__ocl_intel_gpu(int cpu_device, const char *extensions);

/* The variants of kernels/decode_common.cl's pkv_decode_partial. OFF means
 * decode steps run on the generic paged-attention kernel. */
typedef enum pkv__decode_kind {
    PKV__DECODE_OFF = 0,
    PKV__DECODE_CPU = 1,   /* paged_decode.cl: a work-item per partition */
    PKV__DECODE_GPU = 2,   /* decode_gpu.cl: a work-group per partition */
    PKV__DECODE_INTEL = 3, /* decode_intel.cl: a subgroup per partition */
    PKV__DECODE_AUTO = 4   /* a request only: choose from the device */
} pkv__decode_kind;

/* The request in PKV_OPENCL_DECODE's value: NULL or "" is AUTO; "auto",
 * "cpu", "gpu", "intel", "off"; anything else -1. */
int pkv__decode_parse(const char *value);

/* The variant for `request` on a device (cpu_device: CL_DEVICE_TYPE_CPU;
 * its extension string; the model's head_dim), with the reason written to
 * why. AUTO: CPU on a CPU device, else INTEL where the device has
 * cl_intel_subgroups, cl_intel_subgroups_short and cl_intel_subgroups_char
 * and head_dim is a multiple of 32 up to 512, else GPU. A forced INTEL
 * the device cannot run gives OFF. */
pkv__decode_kind pkv__decode_choose(int request, int cpu_device,
                                    const char *extensions, uint32_t head_dim,
                                    char *why, size_t why_size);

/* The INTEL variant's partitions are at most this many tokens, as in
 * OpenVINO's paged attention for Intel GPUs: many short partitions keep
 * every subgroup of the GPU busy. */
#define PKV__DECODE_INTEL_PARTITION 256u

/* The GPU variant's work-group (kernels/decode_gpu.cl). */
typedef struct pkv__decode_gpu_shape {
    uint32_t chunks;    /* float4 chunks of a row per lane: 1, 2 or 4 */
    uint32_t row_lanes; /* lanes per K/V row: head_dim / (4 * chunks) */
    uint32_t tokens;    /* tokens in flight: lanes = row_lanes * tokens */
    uint32_t lanes;     /* the work-group size */
    uint32_t partition; /* the longest partition, tokens, a multiple of
                           block_size */
} pkv__decode_gpu_shape;

/* The shape for head_dim (a multiple of 4), group query heads a
 * work-group and block_size on a device with local_mem bytes of local
 * memory and work-groups of up to max_group items (intel_gpu:
 * pkv__ocl_intel_gpu): about 64 lanes, 16 bytes of a row per lane per
 * load, with group * chunks float4 accumulators a lane up to 16 (8 on an
 * Intel GPU), partitions of up to 256 tokens (fewer where the scores of
 * `group` heads would not fit local memory). Returns 0, or -1 when even
 * one block's scores do not fit. */
int pkv__decode_gpu_shape_make(uint32_t head_dim, uint32_t group,
                               uint32_t block_size, int intel_gpu,
                               uint64_t local_mem, size_t max_group,
                               pkv__decode_gpu_shape *out);

/* The attention kernel of steps with more than one row per sequence:
 * ROWS (paged_attention.cl, a work-item per row and head), TILES
 * (paged_attention_tiled.cl, a work-group per tile of rows) or INTEL
 * (prefill_intel.cl, a work-group of Intel subgroups per tile of rows and
 * kv head, built per geometry) or DPAS (prefill_dpas.cl, the score and
 * value products on Intel's matrix engines, built per geometry; only
 * when asked for: src/opencl/prefill_dpas.h says why). AUTO is a request
 * only. */
typedef enum pkv__prefill_kind {
    PKV__PREFILL_ROWS = 0,
    PKV__PREFILL_TILES = 1,
    PKV__PREFILL_INTEL = 2,
    PKV__PREFILL_DPAS = 3,
    PKV__PREFILL_AUTO = 4
} pkv__prefill_kind;

/* The request in PKV_OPENCL_PREFILL's value: NULL, "" or "auto" is AUTO;
 * "rows", "tiles", "intel", "dpas"; anything else -1. */
int pkv__prefill_parse(const char *value);

/* Whether INTEL takes a geometry: head_dim a multiple of 4 up to
 * PKV__PREFILL_INTEL_MAX_DIM, any `group` query heads per kv head (1 or
 * more), blocks of any power of two: every geometry pkv accepts. The
 * device needs cl_intel_subgroups besides, and its local memory and
 * work-groups must hold the shape (pkv__prefill_intel_shape). */
#define PKV__PREFILL_INTEL_MAX_DIM 512u
#define PKV__PREFILL_INTEL_QUERIES 8u /* kernels/prefill_intel.cl: NV */
int pkv__prefill_intel_takes(uint32_t head_dim, uint32_t group,
                             uint32_t block_size);

/* The kernel for `request` on a device (cpu_device: CL_DEVICE_TYPE_CPU;
 * subgroups: it has cl_intel_subgroups; takes: pkv__prefill_intel_takes),
 * with the reason written to why. AUTO: ROWS on a CPU device, else INTEL
 * where it can run, else TILES. A forced INTEL or DPAS that cannot run
 * gives TILES, why saying "the device lacks cl_intel_subgroups" or "the
 * geometry" (INTEL); DPAS needs the subgroups here, its geometry is
 * checked at its build (pkv__dpas_takes). */
pkv__prefill_kind pkv__prefill_choose(int request, int cpu_device,
                                      int subgroups, int takes, char *why,
                                      size_t why_size);

/* The INTEL kernel's shape (kernels/prefill_intel.cl). */
typedef struct pkv__prefill_intel_setup {
    uint32_t rows;   /* rows a tile: PKV__PREFILL_INTEL_QUERIES / group, 1
                        past that group */
    uint32_t slices; /* head slices a kv head: ceil(group / 8), the launch's
                        second dimension num_kv_heads * slices */
    uint32_t chunk;  /* tokens staged at a time: 16, else 8 or 4 where
                        local memory demands; at most block_size where
                        that is 8 or more */
    uint32_t lanes;  /* work-items a work-group: head_dim rounded up to a
                        multiple of 32, halved */
} pkv__prefill_intel_setup;

/* The INTEL kernel's shape for head_dim, `group` and block_size on a
 * device with local_mem bytes of local memory and work-groups of up to
 * max_group items. Its build options are pkv__decode_build_options' with
 * pkv__prefill_intel_options' as the variant's own. Returns 0, or -1 when
 * it does not fit (even 4 tokens a chunk overflow local memory, or the
 * work-group is too large): the backend then runs the tiled kernel and
 * logs why at PKV_LOG_LEVEL_WARN. */
int pkv__prefill_intel_shape(uint32_t head_dim, uint32_t group,
                             uint32_t block_size, uint64_t local_mem,
                             size_t max_group, pkv__prefill_intel_setup *out);

/* The INTEL kernel's own build options: " -cl-std=CL2.0
 * -DPKV_PREFILL_ROWS=rows -DPKV_PREFILL_CHUNK=chunk". */
void pkv__prefill_intel_options(const pkv__prefill_intel_setup *s,
                                char *out, size_t size);

/* Local memory bytes the INTEL kernel uses at head_dim with chunks of
 * `chunk` tokens (kernels/prefill_intel.cl: qs, accs, kv, part, w,
 * stat). */
uint64_t pkv__prefill_intel_local_bytes(uint32_t head_dim, uint32_t chunk);

/* The tiled kernel's shape for `group` query heads per kv head, head_dim,
 * block_size, the device's local memory and largest work-group: tile_rows
 * rows per tile (local size tile_rows * group, about 64) and chunk tokens
 * staged at a time (at most 16 and block_size, 2 * chunk * head_dim floats
 * within local memory). Returns 0, or -1 when it does not fit. */
int pkv__prefill_tile_shape(uint32_t group, uint32_t head_dim,
                            uint32_t block_size, uint64_t local_mem,
                            size_t max_group, uint32_t *tile_rows,
                            uint32_t *chunk);

/* Local memory bytes the GPU variant uses with `shape` and `group`. */
uint64_t pkv__decode_gpu_local_bytes(const pkv__decode_gpu_shape *shape,
                                     uint32_t group);

/* The GPU and INTEL variants take at most this many query heads a
 * work-group: a lane keeps some floats a head, and more heads spilled on
 * Intel GPUs (GQA 12, 16 and 32 with the INTEL variant:
 * docs/performance.md, "Intel GPU code"). */
#define PKV__DECODE_MAX_HEADS 8u

/* Work-groups that share the query heads of one kv head in the GPU and
 * INTEL variants (kernels/decode_common.cl: PKV_GROUP_SPLIT): group / the
 * largest divisor of group up to PKV__DECODE_MAX_HEADS (1 up to GQA 8;
 * GQA 12: 2 of 6 heads, 16: 2 of 8, 32: 4 of 8). */
uint32_t pkv__decode_split(uint32_t group);

/* The INTEL variant's channel pairs per lane in its value pass
 * (kernels/decode_intel.cl: PKV_INTEL_PAIRS): 2 where head_dim is a
 * multiple of 64 and a lane's sums (and, with per-channel quantized
 * values, u8 or u4, their parameters) stay within 16 floats, else 1. The
 * work-group holds head_dim / (32 pairs) subgroups of 16 lanes. */
uint32_t pkv__decode_intel_pairs(uint32_t head_dim, uint32_t group,
                                 int q_channel_values);

/* Local memory bytes the INTEL variant uses, at most (u4 per-token keys
 * add up to head_dim / 8 floats a head, counted for every dtype). */
uint64_t pkv__decode_intel_local_bytes(uint32_t head_dim, uint32_t group);

/* How to build and launch decode variant `kind` (CPU, GPU or INTEL). */
typedef struct pkv__decode_setup {
    const char *file;  /* the kernel file: "paged_decode.cl",
                          "decode_gpu.cl" or "decode_intel.cl" */
    uint32_t lanes;    /* work-group size along dimension 0; 1: the CPU
                          variant's (1, num_kv_heads, 1) */
    uint32_t partition; /* the longest partition, tokens; 0: any */
    uint32_t split;     /* work-groups a kv head: pkv__decode_split for
                           GPU and INTEL, 1 for CPU */
    char options[160];  /* -D options beyond the geometry */
} pkv__decode_setup;

/* The setup of `kind` on a device with this much local memory and this
 * largest work-group, for the geometry (group: query heads per kv head;
 * q_channel_values: quantized values, u8 or u4, with per-channel groups;
 * intel_gpu: pkv__ocl_intel_gpu). INTEL: "-cl-std=CL2.0
 * -DPKV_INTEL_SUBGROUPS -DPKV_INTEL_PAIRS=p -DPKV_INTEL_PARTITION=256",
 * 16 head_dim / (32 p) lanes; GPU: the shape of
 * pkv__decode_gpu_shape_make; both with group / split heads a work-group
 * and " -DPKV_GROUP_SPLIT=split" when split > 1. Returns 0, or -1 when
 * the variant does not fit the device. */
int pkv__decode_setup_make(pkv__decode_kind kind, uint32_t head_dim,
                           uint32_t group, uint32_t block_size,
                           int q_channel_values, int intel_gpu,
                           uint64_t local_mem, size_t max_group,
                           pkv__decode_setup *out);

/* A decode program's build options into out: the -D options that
 * specialise kernels/decode_common.cl to the geometry (key_quant and
 * value_quant as kv_layout.h numbers them; u4_group the U4 group width),
 * then the variant's own (pkv__decode_setup.options). */
void pkv__decode_build_options(uint32_t head_dim, uint32_t block_size,
                               uint32_t group, int kv_dtype, int key_quant,
                               int value_quant, uint32_t u4_group,
                               const char *variant_options, char *out,
                               size_t size);

#endif
