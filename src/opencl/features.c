/* SPDX-License-Identifier: MIT */
/* The decode and prefill kernel choices from what a device reports
 * (features.h). */
#include "features.h"

#include <stdio.h>
#include <string.h>

int pkv__ocl_has_extension(const char *extensions, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = extensions; (p = strstr(p, name)) != NULL; p += len) {
        int starts = p == extensions || p[-1] == ' ';
        int ends = p[len] == '\0' || p[len] == ' ';
        if (starts && ends)
            return 1;
    }
    return 0;
}

/* The index of value in names[0..n), whose last is "auto", which NULL and
 * "" mean too; -1 for anything else. */
static int parse_choice(const char *value, const char *const *names, int n)
{
    if (value == NULL || value[0] == '\0')
        return n - 1;
    for (int i = 0; i < n; i++)
        if (strcmp(value, names[i]) == 0)
            return i;
    return -1;
}

int pkv__decode_parse(const char *value)
{
    static const char *const names[] = {"off", "cpu", "gpu", "intel",
                                        "auto"};
    return parse_choice(value, names, PKV__DECODE_AUTO + 1);
}

static int intel_subgroups(const char *extensions)
{
    return pkv__ocl_has_extension(extensions, "cl_intel_subgroups") &&
           pkv__ocl_has_extension(extensions, "cl_intel_subgroups_short") &&
           pkv__ocl_has_extension(extensions, "cl_intel_subgroups_char");
}

int pkv__ocl_intel_gpu(int cpu_device, const char *extensions)
{
    return !cpu_device && intel_subgroups(extensions);
}

static int intel_capable(const char *extensions, uint32_t head_dim)
{
    return head_dim % 32 == 0 && head_dim <= 512 &&
           intel_subgroups(extensions);
}

pkv__decode_kind pkv__decode_choose(int request, int cpu_device,
                                    const char *extensions, uint32_t head_dim,
                                    char *why, size_t why_size)
{
    int intel = intel_capable(extensions, head_dim);
    if (request == PKV__DECODE_INTEL && !intel) {
        if (intel_capable(extensions, 128))
            snprintf(why, why_size,
                     "PKV_OPENCL_DECODE=intel, but head_dim %u is not a "
                     "multiple of 32 up to 512",
                     (unsigned)head_dim);
        else
            snprintf(why, why_size,
                     "PKV_OPENCL_DECODE=intel, but the device lacks "
                     "cl_intel_subgroups, cl_intel_subgroups_short or "
                     "cl_intel_subgroups_char");
        return PKV__DECODE_OFF;
    }
    if (request != PKV__DECODE_AUTO) {
        static const char *const names[] = {"off", "cpu", "gpu", "intel"};
        snprintf(why, why_size, "PKV_OPENCL_DECODE=%s", names[request]);
        return (pkv__decode_kind)request;
    }
    if (cpu_device) {
        snprintf(why, why_size,
                 "auto: a CPU device, where one work-item streaming a "
                 "partition is fastest");
        return PKV__DECODE_CPU;
    }
    if (intel) {
        snprintf(why, why_size,
                 "auto: the device has cl_intel_subgroups, "
                 "cl_intel_subgroups_short and cl_intel_subgroups_char");
        return PKV__DECODE_INTEL;
    }
    snprintf(why, why_size,
             "auto: a GPU or accelerator without Intel subgroups (or "
             "head_dim %u is not a multiple of 32 up to 512)",
             (unsigned)head_dim);
    return PKV__DECODE_GPU;
}

uint32_t pkv__decode_split(uint32_t group)
{
    /* The largest divisor of group up to PKV__DECODE_MAX_HEADS: the
     * fewest re-reads of the kv head's bytes with every work-group the
     * same size. */
    uint32_t heads = group < PKV__DECODE_MAX_HEADS ? group
                                                    : PKV__DECODE_MAX_HEADS;
    while (heads > 1 && group % heads != 0)
        heads--;
    return heads > 0 ? group / heads : 1u;
}

uint32_t pkv__decode_intel_pairs(uint32_t head_dim, uint32_t group,
                                 int q_channel_values)
{
    /* Per pair a lane keeps 2 sums of each head, and for per-channel
     * quantized values (u8 or u4) the pair's lo and scale: 2 pairs (64
     * channels a subgroup) when that stays within 16 floats, else 1. More
     * pairs a lane spilled at SIMD16 on Intel's compiler: the 16 rows in
     * flight of a run of tokens grow with them (docs/performance.md,
     * "Intel GPU code"). u4 per-token values are dequantised per row with
     * one lo and scale a token, held no longer than the row. */
    uint32_t per_pair = 2 * group + (q_channel_values ? 4u : 0u);
    return head_dim % 64 == 0 && 2 * per_pair <= 16 ? 2u : 1u;
}

uint64_t pkv__decode_intel_local_bytes(uint32_t head_dim, uint32_t group)
{
    /* The query rows, the partition's weights, 3 floats a head, and for
     * u4 per-token keys the query's sums per key group, at most head_dim /
     * 8 a head (kernels/decode_intel.cl: qs, w, stat, qg). The geometry
     * does not say whether the keys are u4: counted always. */
    return 4ull * group *
           (head_dim + head_dim / 8 + PKV__DECODE_INTEL_PARTITION + 3);
}

int pkv__decode_setup_make(pkv__decode_kind kind, uint32_t head_dim,
                           uint32_t group, uint32_t block_size,
                           int q_channel_values, int intel_gpu,
                           uint64_t local_mem, size_t max_group,
                           pkv__decode_setup *out)
{
    memset(out, 0, sizeof *out);
    out->file = "paged_decode.cl";
    out->lanes = 1;
    out->split = 1;
    if (kind == PKV__DECODE_CPU)
        return 0;
    out->split = pkv__decode_split(group);
    uint32_t heads = group / out->split;
    int n = 0;
    if (kind == PKV__DECODE_INTEL) {
        uint32_t pairs =
            pkv__decode_intel_pairs(head_dim, heads, q_channel_values);
        out->file = "decode_intel.cl";
        out->lanes = 16 * (head_dim / (32 * pairs));
        out->partition = PKV__DECODE_INTEL_PARTITION;
        if (out->lanes > max_group ||
            pkv__decode_intel_local_bytes(head_dim, heads) > local_mem)
            return -1;
        n = snprintf(out->options, sizeof out->options,
                     " -cl-std=CL2.0 -DPKV_INTEL_SUBGROUPS "
                     "-DPKV_INTEL_PAIRS=%u -DPKV_INTEL_PARTITION=%u",
                     (unsigned)pairs, (unsigned)PKV__DECODE_INTEL_PARTITION);
    } else if (kind == PKV__DECODE_GPU) {
        pkv__decode_gpu_shape s;
        if (pkv__decode_gpu_shape_make(head_dim, heads, block_size,
                                       intel_gpu, local_mem, max_group,
                                       &s) != 0)
            return -1;
        out->file = "decode_gpu.cl";
        out->lanes = s.lanes;
        out->partition = s.partition;
        n = snprintf(out->options, sizeof out->options,
                     " -DPKV_GPU_CHUNKS=%u -DPKV_GPU_TOKENS=%u "
                     "-DPKV_GPU_PARTITION=%u",
                     (unsigned)s.chunks, (unsigned)s.tokens,
                     (unsigned)s.partition);
    }
    if (out->split > 1 && n > 0 && (size_t)n < sizeof out->options)
        snprintf(out->options + n, sizeof out->options - (size_t)n,
                 " -DPKV_GROUP_SPLIT=%u", (unsigned)out->split);
    return 0;
}

uint64_t pkv__decode_gpu_local_bytes(const pkv__decode_gpu_shape *s,
                                     uint32_t group)
{
    /* Per-lane score partials, the partition's scores, per-lane V sums
     * (kernels/decode_gpu.cl: red, lg, vred). */
    return 4ull * group * s->lanes + 4ull * group * s->partition +
           16ull * s->lanes * s->chunks;
}

#define GPU_TARGET_LANES 64u
#define GPU_MAX_PARTITION 256u

int pkv__decode_gpu_shape_make(uint32_t head_dim, uint32_t group,
                               uint32_t block_size, int intel_gpu,
                               uint64_t local_mem, size_t max_group,
                               pkv__decode_gpu_shape *out)
{
    pkv__decode_gpu_shape s;
    /* Up to 16 bytes of f32 per lane and load, with the G * chunks float4
     * accumulators of a lane kept to 16 (64 registers); on an Intel GPU
     * to 8: 16 (GQA 4 with 4 chunks) spilled or kept private memory there
     * for u4, u8 keys with u4 values and per-token keys
     * (docs/performance.md, "Intel GPU code"). */
    uint32_t cap = intel_gpu ? 8u : 16u;
    s.chunks = group * 4 <= cap && head_dim % 16 == 0   ? 4u
               : group * 2 <= cap && head_dim % 8 == 0 ? 2u
                                                        : 1u;
    s.row_lanes = head_dim / (4 * s.chunks);
    if (s.row_lanes == 0 || s.row_lanes > max_group)
        return -1;
    s.tokens = s.row_lanes >= GPU_TARGET_LANES
                   ? 1u
                   : GPU_TARGET_LANES / s.row_lanes;
    if ((size_t)s.row_lanes * s.tokens > max_group)
        s.tokens = (uint32_t)(max_group / s.row_lanes);
    s.lanes = s.row_lanes * s.tokens;
    uint32_t bs = block_size > 0 ? block_size : 1;
    uint32_t blocks = GPU_MAX_PARTITION > bs ? GPU_MAX_PARTITION / bs : 1u;
    for (; blocks > 0; blocks--) {
        s.partition = blocks * bs;
        if (pkv__decode_gpu_local_bytes(&s, group) <= local_mem)
            break;
    }
    if (blocks == 0)
        return -1;
    *out = s;
    return 0;
}

int pkv__prefill_parse(const char *value)
{
    static const char *const names[] = {"rows", "tiles", "intel", "dpas",
                                        "auto"};
    return parse_choice(value, names, PKV__PREFILL_AUTO + 1);
}

int pkv__prefill_intel_takes(uint32_t head_dim, uint32_t group,
                             uint32_t block_size)
{
    return head_dim > 0 && head_dim % 4 == 0 &&
           head_dim <= PKV__PREFILL_INTEL_MAX_DIM && group >= 1 &&
           block_size > 0 && (block_size & (block_size - 1)) == 0;
}

pkv__prefill_kind pkv__prefill_choose(int request, int cpu_device,
                                      int subgroups, int takes, char *why,
                                      size_t why_size)
{
    static const char *const names[] = {"rows", "tiles", "intel", "dpas"};
    if ((request == PKV__PREFILL_INTEL || request == PKV__PREFILL_DPAS) &&
        !subgroups) {
        snprintf(why, why_size,
                 "PKV_OPENCL_PREFILL=%s, but the device lacks "
                 "cl_intel_subgroups",
                 names[request]);
        return PKV__PREFILL_TILES;
    }
    if (request == PKV__PREFILL_INTEL && !takes) {
        snprintf(why, why_size,
                 "PKV_OPENCL_PREFILL=intel, but the kernel does not take "
                 "the geometry (head_dim a multiple of 4 up to %u, blocks "
                 "of a power of two)",
                 PKV__PREFILL_INTEL_MAX_DIM);
        return PKV__PREFILL_TILES;
    }
    if (request != PKV__PREFILL_AUTO) {
        snprintf(why, why_size, "PKV_OPENCL_PREFILL=%s", names[request]);
        return (pkv__prefill_kind)request;
    }
    if (cpu_device) {
        snprintf(why, why_size,
                 "auto: a CPU device, where a work-item per row and head is "
                 "fastest");
        return PKV__PREFILL_ROWS;
    }
    if (subgroups && takes) {
        snprintf(why, why_size, "auto: the device has cl_intel_subgroups");
        return PKV__PREFILL_INTEL;
    }
    snprintf(why, why_size,
             "auto: %s",
             subgroups ? "a geometry the intel kernel does not take"
                       : "a GPU or accelerator without Intel subgroups");
    return PKV__PREFILL_TILES;
}

/* kernels/prefill_intel.cl's DP: head_dim rounded up to a multiple of
 * 32, a subgroup of 16 lanes per 32 channels. */
static uint64_t intel_padded_dim(uint32_t head_dim)
{
    return (head_dim + 31ull) / 32 * 32;
}

uint64_t pkv__prefill_intel_local_bytes(uint32_t head_dim, uint32_t chunk)
{
    uint64_t nv = PKV__PREFILL_INTEL_QUERIES, dp = intel_padded_dim(head_dim);
    return 4ull * (2 * dp * nv + chunk * dp + dp / 32 * 16 * nv +
                   chunk * nv + 3 * nv);
}

int pkv__prefill_intel_shape(uint32_t head_dim, uint32_t group,
                             uint32_t block_size, uint64_t local_mem,
                             size_t max_group, pkv__prefill_intel_setup *out)
{
    uint32_t nv = PKV__PREFILL_INTEL_QUERIES;
    if (!pkv__prefill_intel_takes(head_dim, group, block_size) ||
        intel_padded_dim(head_dim) / 2 > max_group)
        return -1;
    /* 16 tokens a chunk, a whole block of 8 where blocks hold 8; below
     * 8, chunks span blocks. Halved while local memory cannot hold it
     * (head_dim above 448 on 64 KB), down to 4: the value pass steps
     * tokens in turns of 4. */
    uint32_t chunk = block_size >= 8 && block_size < 16 ? block_size : 16;
    while (pkv__prefill_intel_local_bytes(head_dim, chunk) > local_mem) {
        if (chunk == 4)
            return -1;
        chunk /= 2;
    }
    out->rows = group >= nv ? 1u : nv / group;
    out->slices = (group + nv - 1) / nv;
    out->chunk = chunk;
    out->lanes = (uint32_t)(intel_padded_dim(head_dim) / 2);
    return 0;
}

void pkv__prefill_intel_options(const pkv__prefill_intel_setup *s,
                                char *out, size_t size)
{
    snprintf(out, size,
             " -cl-std=CL2.0 -DPKV_PREFILL_ROWS=%u -DPKV_PREFILL_CHUNK=%u",
             (unsigned)s->rows, (unsigned)s->chunk);
}

#define TILE_TARGET_LANES 64u
#define TILE_CHUNK_MAX 16u /* kernels/paged_attention_tiled.cl */

int pkv__prefill_tile_shape(uint32_t group, uint32_t head_dim,
                            uint32_t block_size, uint64_t local_mem,
                            size_t max_group, uint32_t *tile_rows,
                            uint32_t *chunk)
{
    if (group == 0 || head_dim == 0 || group > max_group)
        return -1;
    uint32_t rows = group >= TILE_TARGET_LANES ? 1u : TILE_TARGET_LANES / group;
    if ((size_t)rows * group > max_group)
        rows = (uint32_t)(max_group / group);
    uint64_t fit = local_mem / (8ull * head_dim);
    uint32_t c = TILE_CHUNK_MAX < block_size ? TILE_CHUNK_MAX : block_size;
    if (fit < c)
        c = (uint32_t)fit;
    if (c == 0)
        return -1;
    *tile_rows = rows;
    *chunk = c;
    return 0;
}

void pkv__decode_build_options(uint32_t head_dim, uint32_t block_size,
                               uint32_t group, int kv_dtype, int key_quant,
                               int value_quant, uint32_t u4_group,
                               const char *variant_options, char *out,
                               size_t size)
{
    snprintf(out, size,
             " -DPKV_HEAD_DIM=%u -DPKV_BLOCK_SIZE=%u -DPKV_GROUP=%u "
             "-DPKV_KV_DTYPE=%d -DPKV_KEY_QUANT=%d -DPKV_VALUE_QUANT=%d "
             "-DPKV_U4_GROUP=%u%s",
             (unsigned)head_dim, (unsigned)block_size, (unsigned)group,
             kv_dtype, key_quant, value_quant, (unsigned)u4_group,
             variant_options);
}
