/* SPDX-License-Identifier: MIT */
/* pkv-bench: the subcommands, one file each, which pkv_bench.c dispatches.
 * They call the shared helpers (bench_util.h) and the benchmarks' model
 * configurations (bench_llama.h), never each other. */
#ifndef PKV_BENCH_H
#define PKV_BENCH_H

#include "bench_util.h"

int bench_memory(const bench_options *opt);
/* memory's hybrid-memory table (bench_hybrid.c). */
int bench_hybrid_memory(const bench_options *opt);
int bench_scheduler(const bench_options *opt);
int bench_serve(const bench_options *opt);
int bench_restart(const bench_options *opt);
/* serve --speculative (bench_speculative.c). */
int bench_speculative(const bench_options *opt);
int bench_attend(const bench_options *opt); /* bench_attend.c */
int bench_kernels(const bench_options *opt);
int bench_isa(const bench_options *opt); /* bench_isa.c */
int bench_seal(const bench_options *opt); /* bench_seal.c */
#ifdef PKV_BENCH_OPENCL
int bench_interop(const bench_options *opt); /* bench_interop.c */
#endif
#ifdef PKV_BENCH_REDIS
int bench_store(const bench_options *opt); /* bench_store.c */
#endif

#endif
