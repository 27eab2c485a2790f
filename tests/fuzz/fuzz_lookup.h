/* SPDX-License-Identifier: MIT */
/* pkv-router's prefix-lookup answer reader fuzz target, shared by
 * libFuzzer and the replay driver (replay.c, which declares the same two
 * symbols in fuzz_blocks.h). */
#ifndef PKV_FUZZ_LOOKUP_H
#define PKV_FUZZ_LOOKUP_H

#include <stddef.h>
#include <stdint.h>

/* Read the answer data[0..size) describes, under several limits.
 * Aborts on a broken check; returns 0 otherwise. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Inputs run by LLVMFuzzerTestOneInput since the program started. */
extern uint64_t pkv_fuzz_ops;

#endif
