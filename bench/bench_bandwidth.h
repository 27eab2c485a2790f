/* SPDX-License-Identifier: MIT */
/* The machine's own memory read bandwidth, the ceiling a benchmark of
 * attention over the KV cache is read against (bench_bandwidth.c). */
#ifndef PKV_BENCH_BANDWIDTH_H
#define PKV_BENCH_BANDWIDTH_H

#include <stddef.h>

/* 1 GiB to read, written once (so that every page is mapped), or NULL
 * when memory runs out; release with free(). */
void *bench_bw_buffer(void);

/* GB/s of `threads` threads reading buf in chunks of chunk_bytes rounded
 * up to whole 64-byte lines, in order or shuffled, best of 5. 0 if memory
 * runs out. */
double bench_read_gbps(const void *buf, int threads, size_t chunk_bytes,
                       int shuffle);

#endif
