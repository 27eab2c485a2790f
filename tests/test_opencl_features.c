/* SPDX-License-Identifier: MIT */
/* The kernel variant a device gets from its extension string: the Intel
 * decode path is chosen only with every extension it needs. Runs without
 * a device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "opencl_features.h"

#include <string.h>

static void test_extension_tokens(void **state)
{
    (void)state;
    const char *list = "cl_khr_fp64 cl_intel_subgroups_short cl_khr_fp16";
    assert_true(pkv__cl_has_extension(list, "cl_khr_fp64"));
    assert_true(pkv__cl_has_extension(list, "cl_khr_fp16"));
    assert_true(pkv__cl_has_extension(list, "cl_intel_subgroups_short"));
    /* A prefix of another extension is not that extension. */
    assert_false(pkv__cl_has_extension(list, "cl_intel_subgroups"));
    assert_false(pkv__cl_has_extension(list, "cl_khr_fp"));
    assert_false(pkv__cl_has_extension("", "cl_khr_fp16"));
}

static void test_decode_variant(void **state)
{
    (void)state;
    char buf[96];
    const char *intel = "cl_khr_global_int32_base_atomics cl_intel_subgroups "
                        "cl_intel_subgroups_short cl_khr_fp16 ";
    assert_int_equal(pkv__decode_variant(intel, 128, buf, sizeof buf), 16);
    assert_non_null(strstr(buf, "-cl-std=CL2.0"));
    assert_non_null(strstr(buf, "-DPKV_INTEL_SUBGROUPS"));
    assert_non_null(strstr(buf, "-DPKV_INTEL_FP16"));

    const char *no_fp16 = "cl_intel_subgroups cl_intel_subgroups_short";
    assert_int_equal(pkv__decode_variant(no_fp16, 64, buf, sizeof buf), 16);
    assert_null(strstr(buf, "FP16"));

    /* PoCL on a CPU, a missing block-read extension, an odd head_dim: the
     * portable kernel. */
    const char *pocl = "cl_khr_byte_addressable_store cl_khr_fp64";
    assert_int_equal(pkv__decode_variant(pocl, 128, buf, sizeof buf), 1);
    assert_string_equal(buf, "");
    assert_int_equal(
        pkv__decode_variant("cl_intel_subgroups", 128, buf, sizeof buf), 1);
    assert_int_equal(pkv__decode_variant(intel, 80, buf, sizeof buf), 1);
    assert_string_equal(buf, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_extension_tokens),
        cmocka_unit_test(test_decode_variant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
