/* SPDX-License-Identifier: MIT */
/* The machine's own memory read bandwidth (bench_bandwidth.h). */
#define _POSIX_C_SOURCE 200809L
#include "bench_bandwidth.h"

#include "bench_util.h"
#include "sample.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A vectorized read (sum) of 1 GiB on every core, in C with pthreads,
 * in chunks: each thread sums its share of the chunks into two 64-byte
 * vector accumulators. Two readings come from it:
 * - the memory read bandwidth: 1 MiB chunks in order, a plain stream;
 * - the block read bandwidth of a head-part size: chunks of one block's
 *   head part (what a decode work-item reads before its next block-table
 *   jump) in a random order, as the bench's block tables are. No kernel
 *   with such tables reads faster than the memory lets a plain C reader
 *   do: the ceiling of the paged rows.
 * The vectors are explicit (GNU C vector types) because GCC 12 at -O2
 * kept an array of 8 scalar accumulators on the stack, and the
 * store-to-load latency of those adds capped the read at 16-17 GB/s on a
 * machine whose memory gives 30 (Xeon, 2 cores); on x86-64 the loop is
 * built for AVX-512, AVX2 and SSE2 and the CPU picks (target_clones, a
 * glibc ifunc), so the reference does not depend on the build's -march.
 * Best of 5. */
#define BW_BYTES (1ull << 30)

typedef uint64_t bw_vec __attribute__((vector_size(64)));

typedef struct bw_slice {
    const bw_vec *base;
    const uint32_t *chunks; /* chunk indices, in the order read */
    size_t num_chunks;
    size_t chunk_vecs; /* 64-byte vectors per chunk */
    uint64_t sum;
} bw_slice;

#if defined(__x86_64__) && defined(__ELF__) && defined(__GLIBC__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static uint64_t bw_sum(const bw_slice *s)
{
    bw_vec a = {0}, b = {0};
    for (size_t c = 0; c < s->num_chunks; c++) {
        const bw_vec *p = s->base + (size_t)s->chunks[c] * s->chunk_vecs;
        size_t i = 0;
        for (; i + 1 < s->chunk_vecs; i += 2) {
            a += p[i];
            b += p[i + 1];
        }
        if (i < s->chunk_vecs)
            a += p[i];
    }
    a += b;
    uint64_t sum = 0;
    for (int k = 0; k < 8; k++)
        sum += a[k];
    return sum;
}

static void *bw_thread(void *arg)
{
    bw_slice *s = arg;
    s->sum = bw_sum(s);
    return NULL;
}

void *bench_bw_buffer(void)
{
    void *buf = aligned_alloc(64, BW_BYTES);
    if (buf != NULL)
        memset(buf, 1, BW_BYTES);
    return buf;
}

/* The chunks are the lines a part of chunk_bytes starting on a line
 * covers. */
double bench_read_gbps(const void *buf, int threads, size_t chunk_bytes,
                       int shuffle)
{
    size_t chunk_vecs = (chunk_bytes + sizeof(bw_vec) - 1) / sizeof(bw_vec);
    chunk_vecs = chunk_vecs > 0 ? chunk_vecs : 1;
    size_t n = BW_BYTES / sizeof(bw_vec) / chunk_vecs;
    uint32_t *order = malloc(n * sizeof *order);
    if (order == NULL)
        return 0.0;
    uint64_t rng = 42;
    for (size_t i = 0; i < n; i++)
        order[i] = (uint32_t)i;
    for (size_t i = n; shuffle && i > 1; i--) {
        size_t j = host_rand(&rng) % i;
        uint32_t tmp = order[i - 1];
        order[i - 1] = order[j];
        order[j] = tmp;
    }
    bw_slice sl[64];
    pthread_t th[64];
    if (threads > 64)
        threads = 64;
    double best = 0.0;
    uint64_t sink = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = bench_now_s();
        for (int i = 0; i < threads; i++) {
            size_t a = n * (size_t)i / (size_t)threads;
            size_t b = n * (size_t)(i + 1) / (size_t)threads;
            bw_slice one = {(const bw_vec *)buf, order + a, b - a, chunk_vecs,
                            0};
            sl[i] = one;
            pthread_create(&th[i], NULL, bw_thread, &sl[i]);
        }
        for (int i = 0; i < threads; i++) {
            pthread_join(th[i], NULL);
            sink += sl[i].sum;
        }
        double bytes = (double)n * (double)chunk_vecs * sizeof(bw_vec);
        double gbps = bytes / (bench_now_s() - t0) / 1e9;
        best = gbps > best ? gbps : best;
    }
    free(order);
    return sink == 42 ? best + 1e-12 : best;
}

