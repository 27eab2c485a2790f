/* SPDX-License-Identifier: MIT */
/* pkv-router's KV-events reader fuzz target, shared by libFuzzer and the
 * replay driver (replay.c, which declares the same two symbols in
 * fuzz_blocks.h). */
#ifndef PKV_FUZZ_EVENTS_H
#define PKV_FUZZ_EVENTS_H

#include <stddef.h>
#include <stdint.h>

/* Apply the event batches data[0..size) describes to a fresh index.
 * Aborts on a broken check; returns 0 otherwise. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Inputs run by LLVMFuzzerTestOneInput since the program started. */
extern uint64_t pkv_fuzz_ops;

#endif
