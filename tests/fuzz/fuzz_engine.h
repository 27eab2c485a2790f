/* SPDX-License-Identifier: MIT */
/* The engine fuzz target, shared by libFuzzer and the replay driver
 * (replay.c, which declares the same two symbols in fuzz_blocks.h). */
#ifndef PKV_FUZZ_ENGINE_H
#define PKV_FUZZ_ENGINE_H

#include <stddef.h>
#include <stdint.h>

/* Run the operations encoded in data[0..size). Aborts on a broken
 * invariant; returns 0 otherwise. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Operations executed by LLVMFuzzerTestOneInput since the program started. */
extern uint64_t pkv_fuzz_ops;

#endif
