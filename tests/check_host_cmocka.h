/* SPDX-License-Identifier: MIT */
/* check_host.h under cmocka: a failed check fails the running test. */
#ifndef PKV_TESTS_CHECK_HOST_CMOCKA_H
#define PKV_TESTS_CHECK_HOST_CMOCKA_H

#include "check_host.h"

/* ch_init with cmocka's failure. */
void ch_cmocka_init(ch_host *host, const pkv_engine_params *params,
                    double tolerance);

#ifdef PKV_HAVE_OPENCL
/* The start of a test program's OpenCL build: 77 (ctest's skip code) when
 * there is no OpenCL device, else 0, with PKV_TEST_FILTER applied (run
 * only the tests whose names match cmocka's pattern, as the oclgrind pass
 * in tests/run.sh does). */
int ch_opencl_start(void);
#endif

/* 1 when PKV_TEST_QUICK=1: a test that has a quick subset of its cases
 * runs that only (tests/run.sh's default oclgrind runs; PKV_TEST_FULL=1
 * there runs every case). */
int ch_test_quick(void);

#endif
