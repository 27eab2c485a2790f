/* SPDX-License-Identifier: MIT */
/* The llama example's model as the benchmarks size it (bench_llama.c). */
#ifndef PKV_BENCH_LLAMA_H
#define PKV_BENCH_LLAMA_H

#include "model.h"

/* serve's and serve --speculative's model (dim 1024, 4 layers): weights
 * past the last-level cache, so a step streams them from memory as
 * decoding does. */
llama_config bench_serve_config(void);

/* restart's model (dim 256, 2 layers): room for its 2,000-token prompt,
 * small enough that a round's cold prefill takes seconds. */
llama_config bench_restart_config(void);

#endif
