/* SPDX-License-Identifier: MIT */
/* The llama example's model as the benchmarks size it. */
#ifndef PKV_BENCH_LLAMA_H
#define PKV_BENCH_LLAMA_H

#include "model.h"

/* serve's model (dim 1024, 4 layers): weights past the last-level cache,
 * so a step streams them from memory as decoding does. */
llama_config bench_serve_config(void);

#endif
