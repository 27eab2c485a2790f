/* SPDX-License-Identifier: MIT */
/*
 * The paging-overhead baseline of pkv-bench kernels: paged_decode.cl's
 * kernels, same arguments, same math, except that sequence i's logical
 * block j is read at arena block i * max_blocks_per_seq + j (a contiguous
 * run per sequence) and block_tables is ignored. Benchmark only: build with
 * -I <kernels dir> -I <src dir> and paged_decode.cl's -D options.
 */
#define PKV_DECODE_CONTIGUOUS 1
#include "paged_decode.cl"
