/* SPDX-License-Identifier: MIT */
/* The checking host's failures as cmocka's, the OpenCL tests' start and
 * the quick subsets' switch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "check_host_cmocka.h"

#ifdef PKV_HAVE_OPENCL
#include "opencl/opencl.h"
#endif

static void fail_test(const char *message)
{
    fail_msg("%s", message);
}

void ch_cmocka_init(ch_host *host, const pkv_engine_params *params,
                    double tolerance)
{
    ch_init(host, params, tolerance, fail_test);
}

#ifdef PKV_HAVE_OPENCL
int ch_opencl_start(void)
{
    if (!pkv__ocl_available()) {
        print_message("no OpenCL device: skipped\n");
        return 77;
    }
    const char *filter = getenv("PKV_TEST_FILTER");
    if (filter != NULL)
        cmocka_set_test_filter(filter);
    return 0;
}
#endif

int ch_test_quick(void)
{
    const char *quick = getenv("PKV_TEST_QUICK");
    return quick != NULL && strcmp(quick, "1") == 0;
}
