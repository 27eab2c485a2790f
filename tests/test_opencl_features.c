/* SPDX-License-Identifier: MIT */
/* The decode variant a device gets from its type and extension string
 * (the Intel path only with every extension it needs), the requests that
 * force one, and the GPU variant's work-group shape. Runs without a
 * device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "opencl/features.h"

#include <string.h>

static void test_extension_tokens(void **state)
{
    (void)state;
    const char *list = "cl_khr_fp64 cl_intel_subgroups_short cl_khr_fp16";
    assert_true(pkv__ocl_has_extension(list, "cl_khr_fp64"));
    assert_true(pkv__ocl_has_extension(list, "cl_khr_fp16"));
    assert_true(pkv__ocl_has_extension(list, "cl_intel_subgroups_short"));
    /* A prefix of another extension is not that extension. */
    assert_false(pkv__ocl_has_extension(list, "cl_intel_subgroups"));
    assert_false(pkv__ocl_has_extension(list, "cl_khr_fp"));
    assert_false(pkv__ocl_has_extension("", "cl_khr_fp16"));
}

static void test_decode_choice(void **state)
{
    (void)state;
    char why[256];
    const char *intel = "cl_khr_global_int32_base_atomics cl_intel_subgroups "
                        "cl_intel_subgroups_short cl_intel_subgroups_char "
                        "cl_khr_fp16 ";
    const char *pocl = "cl_khr_byte_addressable_store cl_khr_fp64";
    int a = PKV__DECODE_AUTO;

    assert_int_equal(pkv__decode_parse(NULL), PKV__DECODE_AUTO);
    assert_int_equal(pkv__decode_parse(""), PKV__DECODE_AUTO);
    assert_int_equal(pkv__decode_parse("auto"), PKV__DECODE_AUTO);
    assert_int_equal(pkv__decode_parse("cpu"), PKV__DECODE_CPU);
    assert_int_equal(pkv__decode_parse("gpu"), PKV__DECODE_GPU);
    assert_int_equal(pkv__decode_parse("intel"), PKV__DECODE_INTEL);
    assert_int_equal(pkv__decode_parse("off"), PKV__DECODE_OFF);
    assert_int_equal(pkv__decode_parse("0"), -1);
    assert_int_equal(pkv__decode_parse("GPU"), -1);

    /* Auto: a CPU device streams; an Intel GPU uses subgroups for the head
     * sizes its kernel handles; any other device the portable GPU one. */
    assert_int_equal(pkv__decode_choose(a, 1, intel, 128, why, sizeof why),
                     PKV__DECODE_CPU);
    assert_non_null(strstr(why, "CPU device"));
    assert_int_equal(pkv__decode_choose(a, 0, intel, 128, why, sizeof why),
                     PKV__DECODE_INTEL);
    assert_int_equal(pkv__decode_choose(a, 0, intel, 80, why, sizeof why),
                     PKV__DECODE_GPU);
    assert_int_equal(pkv__decode_choose(a, 0, pocl, 128, why, sizeof why),
                     PKV__DECODE_GPU);
    assert_int_equal(pkv__decode_choose(a, 0, "cl_intel_subgroups", 128, why,
                                        sizeof why),
                     PKV__DECODE_GPU);
    assert_int_equal(pkv__decode_choose(a, 0,
                                        "cl_intel_subgroups "
                                        "cl_intel_subgroups_short",
                                        128, why, sizeof why),
                     PKV__DECODE_GPU);

    /* Forced: obeyed, except Intel without what it needs. */
    assert_int_equal(pkv__decode_choose(PKV__DECODE_GPU, 1, pocl, 128, why,
                                        sizeof why),
                     PKV__DECODE_GPU);
    assert_string_equal(why, "PKV_OPENCL_DECODE=gpu");
    assert_int_equal(pkv__decode_choose(PKV__DECODE_CPU, 0, intel, 128, why,
                                        sizeof why),
                     PKV__DECODE_CPU);
    assert_int_equal(pkv__decode_choose(PKV__DECODE_INTEL, 1, intel, 64, why,
                                        sizeof why),
                     PKV__DECODE_INTEL);
    assert_int_equal(pkv__decode_choose(PKV__DECODE_INTEL, 0, pocl, 64, why,
                                        sizeof why),
                     PKV__DECODE_OFF);
    assert_non_null(strstr(why, "lacks"));
    assert_int_equal(pkv__decode_choose(PKV__DECODE_INTEL, 0, intel, 80, why,
                                        sizeof why),
                     PKV__DECODE_OFF);
    assert_non_null(strstr(why, "head_dim 80"));
    assert_int_equal(pkv__decode_choose(PKV__DECODE_OFF, 0, intel, 64, why,
                                        sizeof why),
                     PKV__DECODE_OFF);

    assert_int_equal(pkv__decode_choose(a, 0, intel, 96, why, sizeof why),
                     PKV__DECODE_INTEL);
}

static void test_intel_shape(void **state)
{
    (void)state;
    pkv__decode_setup su;
    /* Llama-3-8B's geometry (head_dim 128, GQA 4): 2 pairs a lane, 2
     * subgroups; per-channel u8 values need 4 more floats a pair: 1 pair,
     * 4 subgroups. */
    assert_int_equal(pkv__decode_intel_pairs(128, 4, 0), 2);
    assert_int_equal(pkv__decode_setup_make(PKV__DECODE_INTEL, 128, 4, 16, 0,
                                            1, 65536, 1024, &su),
                     0);
    assert_int_equal(su.lanes, 32);
    assert_int_equal(su.partition, 256);
    assert_non_null(strstr(su.options, "-cl-std=CL2.0"));
    assert_non_null(strstr(su.options, "-DPKV_INTEL_SUBGROUPS"));
    assert_non_null(strstr(su.options, "-DPKV_INTEL_PAIRS=2"));
    assert_int_equal(pkv__decode_setup_make(PKV__DECODE_INTEL, 128, 4, 16, 1,
                                            1, 65536, 1024, &su),
                     0);
    assert_int_equal(su.lanes, 64);
    /* Gemma 3 (256, GQA 4); one head: still 2 pairs (more spilled); GQA
     * 8: 1 pair; head_dim 96: 1 pair, 3 subgroups. */
    assert_int_equal(pkv__decode_intel_pairs(256, 4, 0), 2);
    assert_int_equal(pkv__decode_intel_pairs(256, 1, 0), 2);
    assert_int_equal(pkv__decode_intel_pairs(256, 1, 1), 2);
    assert_int_equal(pkv__decode_intel_pairs(128, 8, 0), 1);
    assert_int_equal(pkv__decode_intel_pairs(96, 1, 0), 1);
    assert_int_equal(pkv__decode_intel_pairs(64, 2, 0), 2);
    /* Per-channel u4 values keep the same parameters a pair as u8 ones;
     * u4 per-token values none past a row: the u8 figures. */
    assert_int_equal(pkv__decode_intel_pairs(128, 4, 1), 1);
    assert_int_equal(pkv__decode_intel_pairs(256, 2, 1), 2);
    /* Local memory: the query, 256 weights, 3 floats and up to head_dim /
     * 8 u4 key-group sums a head: 4 x 4 x (128 + 16 + 259) bytes. */
    assert_int_equal(pkv__decode_intel_local_bytes(128, 4), 6448);
    /* A device without room for the query and the partition's weights, or
     * for the work-group, is refused. */
    assert_int_equal(pkv__decode_setup_make(PKV__DECODE_INTEL, 256, 8, 16, 0,
                                            1, 8192, 1024, &su),
                     -1);
    assert_int_equal(pkv__decode_setup_make(PKV__DECODE_INTEL, 256, 8, 16, 0,
                                            1, 65536, 64, &su),
                     -1);
}

static void test_group_split(void **state)
{
    (void)state;
    const char *intel = "cl_intel_subgroups cl_intel_subgroups_short "
                        "cl_intel_subgroups_char";
    pkv__decode_setup su;
    /* Up to 8 query heads a work-group, all work-groups alike. */
    assert_int_equal(pkv__decode_split(1), 1);
    assert_int_equal(pkv__decode_split(8), 1);
    assert_int_equal(pkv__decode_split(12), 2);
    assert_int_equal(pkv__decode_split(16), 2);
    assert_int_equal(pkv__decode_split(32), 4);
    assert_int_equal(pkv__decode_split(9), 3);
    assert_int_equal(pkv__decode_split(11), 11);
    /* An Intel GPU: not a CPU device, with the three extensions. */
    assert_true(pkv__ocl_intel_gpu(0, intel));
    assert_false(pkv__ocl_intel_gpu(1, intel));
    assert_false(pkv__ocl_intel_gpu(0, "cl_intel_subgroups"));
    /* GQA 32 on the INTEL variant: 4 work-groups of 8 heads, whose pairs
     * and local memory are those of GQA 8. */
    assert_int_equal(pkv__decode_setup_make(PKV__DECODE_INTEL, 128, 32, 16,
                                            0, 1, 65536, 1024, &su),
                     0);
    assert_int_equal(su.split, 4);
    assert_int_equal(su.lanes, 64);
    assert_non_null(strstr(su.options, "-DPKV_INTEL_PAIRS=1"));
    assert_non_null(strstr(su.options, " -DPKV_GROUP_SPLIT=4"));
    /* GQA 12 on the GPU variant, head_dim 80 on an Intel GPU: 2 of 6
     * heads, one chunk a lane (6 float4 accumulators). */
    assert_int_equal(pkv__decode_setup_make(PKV__DECODE_GPU, 80, 12, 16, 0,
                                            1, 65536, 1024, &su),
                     0);
    assert_int_equal(su.split, 2);
    assert_non_null(strstr(su.options, "-DPKV_GPU_CHUNKS=1 "));
    assert_non_null(strstr(su.options, " -DPKV_GROUP_SPLIT=2"));
    /* No split up to GQA 8, and never on the CPU variant. */
    assert_int_equal(pkv__decode_setup_make(PKV__DECODE_GPU, 80, 8, 16, 0, 1,
                                            65536, 1024, &su),
                     0);
    assert_int_equal(su.split, 1);
    assert_null(strstr(su.options, "SPLIT"));
    assert_int_equal(pkv__decode_setup_make(PKV__DECODE_CPU, 80, 32, 16, 0,
                                            0, 65536, 1024, &su),
                     0);
    assert_int_equal(su.split, 1);
    assert_int_equal(su.options[0], '\0');
}

static void test_gpu_shape(void **state)
{
    (void)state;
    pkv__decode_gpu_shape s;
    /* head_dim 128, GQA 4: 16-byte loads of 4 chunks, 8 lanes a row, 8
     * tokens in flight, partitions of 256 tokens. */
    assert_int_equal(
        pkv__decode_gpu_shape_make(128, 4, 16, 0, 65536, 1024, &s), 0);
    assert_int_equal(s.chunks, 4);
    assert_int_equal(s.row_lanes, 8);
    assert_int_equal(s.tokens, 8);
    assert_int_equal(s.lanes, 64);
    assert_int_equal(s.partition, 256);
    /* GQA 8 keeps the accumulators to 16 float4: 2 chunks. */
    assert_int_equal(
        pkv__decode_gpu_shape_make(128, 8, 16, 0, 65536, 1024, &s), 0);
    assert_int_equal(s.chunks, 2);
    assert_int_equal(s.lanes, 64);
    /* On an Intel GPU 8 float4 accumulators at most (16 spilled or kept
     * private memory): head_dim 80, GQA 4 takes 2 chunks, 10 lanes a
     * row; GQA 2 still 4; GQA 8 one. */
    assert_int_equal(
        pkv__decode_gpu_shape_make(80, 4, 16, 1, 65536, 1024, &s), 0);
    assert_int_equal(s.chunks, 2);
    assert_int_equal(s.row_lanes, 10);
    assert_int_equal(
        pkv__decode_gpu_shape_make(80, 4, 16, 0, 65536, 1024, &s), 0);
    assert_int_equal(s.chunks, 4);
    assert_int_equal(
        pkv__decode_gpu_shape_make(80, 2, 16, 1, 65536, 1024, &s), 0);
    assert_int_equal(s.chunks, 4);
    assert_int_equal(
        pkv__decode_gpu_shape_make(80, 8, 16, 1, 65536, 1024, &s), 0);
    assert_int_equal(s.chunks, 1);
    /* head_dim 96 (not a multiple of 16 floats per lane-row): 6 lanes a
     * row, 10 tokens, 60 lanes; block 24 rounds the partition down. */
    assert_int_equal(
        pkv__decode_gpu_shape_make(96, 1, 24, 0, 65536, 1024, &s), 0);
    assert_int_equal(s.row_lanes, 6);
    assert_int_equal(s.lanes, 60);
    assert_int_equal(s.partition, 240);
    /* Little local memory: shorter partitions, still whole blocks. */
    assert_int_equal(
        pkv__decode_gpu_shape_make(128, 32, 16, 0, 16384, 1024, &s), 0);
    assert_int_equal(s.partition % 16, 0);
    assert_true(pkv__decode_gpu_local_bytes(&s, 32) <= 16384);
    assert_true(s.partition < 256);
    /* Small work-groups cap the tokens in flight; too little for a row or
     * for one block's scores is refused. */
    assert_int_equal(
        pkv__decode_gpu_shape_make(512, 1, 16, 0, 65536, 32, &s), 0);
    assert_int_equal(s.row_lanes, 32);
    assert_int_equal(s.lanes, 32);
    assert_int_equal(
        pkv__decode_gpu_shape_make(512, 16, 16, 0, 65536, 64, &s), -1);
    assert_int_equal(
        pkv__decode_gpu_shape_make(128, 64, 64, 0, 4096, 1024, &s), -1);
}

static void test_prefill_choice(void **state)
{
    (void)state;
    char why[320];
    assert_int_equal(pkv__prefill_parse(NULL), PKV__PREFILL_AUTO);
    assert_int_equal(pkv__prefill_parse(""), PKV__PREFILL_AUTO);
    assert_int_equal(pkv__prefill_parse("auto"), PKV__PREFILL_AUTO);
    assert_int_equal(pkv__prefill_parse("rows"), PKV__PREFILL_ROWS);
    assert_int_equal(pkv__prefill_parse("tiles"), PKV__PREFILL_TILES);
    assert_int_equal(pkv__prefill_parse("intel"), PKV__PREFILL_INTEL);
    assert_int_equal(pkv__prefill_parse("dpas"), PKV__PREFILL_DPAS);
    assert_int_equal(pkv__prefill_parse("tile"), -1);
    /* Auto: rows on a CPU device, Intel's where it runs, else tiles. */
    assert_int_equal(pkv__prefill_choose(PKV__PREFILL_AUTO, 1, 1, 1, why,
                                         sizeof why),
                     PKV__PREFILL_ROWS);
    assert_int_equal(pkv__prefill_choose(PKV__PREFILL_AUTO, 0, 1, 1, why,
                                         sizeof why),
                     PKV__PREFILL_INTEL);
    assert_int_equal(pkv__prefill_choose(PKV__PREFILL_AUTO, 0, 0, 1, why,
                                         sizeof why),
                     PKV__PREFILL_TILES);
    assert_int_equal(pkv__prefill_choose(PKV__PREFILL_AUTO, 0, 1, 0, why,
                                         sizeof why),
                     PKV__PREFILL_TILES);
    /* Forced: as asked, but Intel's only where it runs, and why not. */
    assert_int_equal(pkv__prefill_choose(PKV__PREFILL_TILES, 1, 1, 1, why,
                                         sizeof why),
                     PKV__PREFILL_TILES);
    assert_int_equal(pkv__prefill_choose(PKV__PREFILL_ROWS, 0, 1, 1, why,
                                         sizeof why),
                     PKV__PREFILL_ROWS);
    assert_int_equal(pkv__prefill_choose(PKV__PREFILL_INTEL, 1, 1, 1, why,
                                         sizeof why),
                     PKV__PREFILL_INTEL);
    assert_int_equal(pkv__prefill_choose(PKV__PREFILL_INTEL, 0, 0, 1, why,
                                         sizeof why),
                     PKV__PREFILL_TILES);
    assert_non_null(strstr(why, "lacks cl_intel_subgroups"));
    assert_int_equal(pkv__prefill_choose(PKV__PREFILL_INTEL, 0, 1, 0, why,
                                         sizeof why),
                     PKV__PREFILL_TILES);
    assert_non_null(strstr(why, "does not take the geometry"));
    /* DPAS only when asked for, and only with Intel's subgroups (its
     * geometry is checked at its build). */
    assert_int_equal(pkv__prefill_choose(PKV__PREFILL_DPAS, 0, 1, 0, why,
                                         sizeof why),
                     PKV__PREFILL_DPAS);
    assert_int_equal(pkv__prefill_choose(PKV__PREFILL_DPAS, 0, 0, 1, why,
                                         sizeof why),
                     PKV__PREFILL_TILES);
    assert_non_null(strstr(why, "dpas, but the device lacks"));
    /* The geometries Intel's kernel takes: every one pkv accepts
     * (head_dim a multiple of 4 up to 512, any GQA, blocks of a power of
     * two from 1 to 256). */
    assert_true(pkv__prefill_intel_takes(128, 8, 16));
    assert_true(pkv__prefill_intel_takes(96, 1, 8));
    assert_true(pkv__prefill_intel_takes(80, 4, 16));
    assert_true(pkv__prefill_intel_takes(4, 1, 1));
    assert_true(pkv__prefill_intel_takes(512, 4, 16));
    assert_true(pkv__prefill_intel_takes(128, 16, 16));
    assert_true(pkv__prefill_intel_takes(64, 71, 256));
    assert_true(pkv__prefill_intel_takes(128, 4, 4));
    assert_true(pkv__prefill_intel_takes(20, 12, 2));
    assert_false(pkv__prefill_intel_takes(516, 4, 16));
    assert_false(pkv__prefill_intel_takes(66, 4, 16));
    assert_false(pkv__prefill_intel_takes(128, 0, 16));
    assert_false(pkv__prefill_intel_takes(128, 4, 12));
    /* So AUTO picks it on an Intel GPU at head_dim 80, GQA 12, block 1,
     * and still the rows kernel on a CPU device. */
    int takes = pkv__prefill_intel_takes(80, 12, 1);
    assert_int_equal(pkv__prefill_choose(PKV__PREFILL_AUTO, 0, 1, takes, why,
                                         sizeof why),
                     PKV__PREFILL_INTEL);
    assert_int_equal(pkv__prefill_choose(PKV__PREFILL_AUTO, 1, 1, takes, why,
                                         sizeof why),
                     PKV__PREFILL_ROWS);
    /* Intel's shape: 8 queries a tile (GQA 4 takes 2 rows, GQA 3 2: 6
     * queries; past GQA 8 one row and the group in slices of 8 heads,
     * the last of GQA 12 and MQA 71 part empty); head_dim rounded up to
     * a multiple of 32, halved, lanes (80: 48, 20: 16); 16 tokens a
     * chunk, a block of 8 at block 8, 16 across blocks under 8; fewer
     * where local memory demands (head_dim 448 holds 16 tokens in 64
     * KiB, 480 and 512 hold 8; in 32 KiB head_dim 256 holds 8, 512 none:
     * the tiled kernel then); work-groups too small do not fit. */
    static const struct {
        uint32_t d, group, bs, local, max_group;
        int ret;
        uint32_t rows, slices, chunk, lanes;
    } shapes[] = {
        {128, 4, 16, 65536, 1024, 0, 2, 1, 16, 64},
        {96, 3, 8, 65536, 1024, 0, 2, 1, 8, 48},
        {80, 4, 16, 65536, 1024, 0, 2, 1, 16, 48},
        {20, 4, 16, 65536, 1024, 0, 2, 1, 16, 16},
        {128, 8, 16, 65536, 1024, 0, 1, 1, 16, 64},
        {128, 12, 16, 65536, 1024, 0, 1, 2, 16, 64},
        {64, 71, 16, 65536, 1024, 0, 1, 9, 16, 32},
        {128, 4, 1, 65536, 1024, 0, 2, 1, 16, 64},
        {128, 4, 4, 65536, 1024, 0, 2, 1, 16, 64},
        {448, 1, 16, 65536, 1024, 0, 8, 1, 16, 224},
        {480, 1, 16, 65536, 1024, 0, 8, 1, 8, 240},
        {512, 1, 16, 65536, 1024, 0, 8, 1, 8, 256},
        {256, 1, 16, 32768, 1024, 0, 8, 1, 8, 128},
        {512, 1, 16, 50000, 1024, 0, 8, 1, 4, 256},
        {512, 1, 16, 32768, 1024, -1, 0, 0, 0, 0},
        {128, 4, 16, 65536, 32, -1, 0, 0, 0, 0},
        {512, 4, 16, 65536, 128, -1, 0, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        pkv__prefill_intel_setup is = {0, 0, 0, 0};
        assert_int_equal(pkv__prefill_intel_shape(
                             shapes[i].d, shapes[i].group, shapes[i].bs,
                             shapes[i].local, shapes[i].max_group, &is),
                         shapes[i].ret);
        assert_int_equal(is.rows, shapes[i].rows);
        assert_int_equal(is.slices, shapes[i].slices);
        assert_int_equal(is.chunk, shapes[i].chunk);
        assert_int_equal(is.lanes, shapes[i].lanes);
    }
    pkv__prefill_intel_setup is = {2, 1, 8, 48};
    char opts[96];
    pkv__prefill_intel_options(&is, opts, sizeof opts);
    assert_string_equal(opts, " -cl-std=CL2.0 -DPKV_PREFILL_ROWS=2 "
                              "-DPKV_PREFILL_CHUNK=8");
    /* head_dim 256 at block 16: 2 x 8 KiB of queries and sums, 16
     * KiB of K or V, 4 KiB of partial scores and the rest; head_dim 80
     * counted as 96; 512 with 8 tokens and with 4. */
    assert_int_equal(pkv__prefill_intel_local_bytes(256, 16),
                     4u * (2 * 256 * 8 + 16 * 256 + 8 * 16 * 8 +
                           16 * 8 + 24));
    assert_int_equal(pkv__prefill_intel_local_bytes(80, 16),
                     pkv__prefill_intel_local_bytes(96, 16));
    assert_int_equal(pkv__prefill_intel_local_bytes(512, 8), 57696);
    assert_int_equal(pkv__prefill_intel_local_bytes(512, 4), 49376);

    uint32_t rows = 0, chunk = 0;
    /* GQA 4, head_dim 128, block 16: 16 rows x 4 heads, 16 tokens. */
    assert_int_equal(
        pkv__prefill_tile_shape(4, 128, 16, 65536, 1024, &rows, &chunk), 0);
    assert_int_equal(rows, 16);
    assert_int_equal(chunk, 16);
    /* Block 8 caps the chunk; head_dim 512 in 16 KiB holds 4 tokens. */
    assert_int_equal(
        pkv__prefill_tile_shape(1, 64, 8, 65536, 1024, &rows, &chunk), 0);
    assert_int_equal(rows, 64);
    assert_int_equal(chunk, 8);
    assert_int_equal(
        pkv__prefill_tile_shape(8, 512, 64, 16384, 1024, &rows, &chunk), 0);
    assert_int_equal(chunk, 4);
    /* Work-groups of 32 take 4 rows of GQA 8; a group wider than the
     * work-group, or no room for one token, does not fit. */
    assert_int_equal(
        pkv__prefill_tile_shape(8, 128, 16, 65536, 32, &rows, &chunk), 0);
    assert_int_equal(rows, 4);
    assert_int_equal(
        pkv__prefill_tile_shape(64, 128, 16, 65536, 32, &rows, &chunk), -1);
    assert_int_equal(
        pkv__prefill_tile_shape(4, 512, 16, 2048, 1024, &rows, &chunk), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_extension_tokens),
        cmocka_unit_test(test_decode_choice),
        cmocka_unit_test(test_intel_shape),
        cmocka_unit_test(test_group_split),
        cmocka_unit_test(test_gpu_shape),
        cmocka_unit_test(test_prefill_choice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
