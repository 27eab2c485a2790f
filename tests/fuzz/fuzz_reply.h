/* SPDX-License-Identifier: MIT */
/* The Redis connector's reply reader fuzz target, shared by libFuzzer and
 * the replay driver (replay.c, which declares the same two symbols in
 * fuzz_blocks.h). */
#ifndef PKV_FUZZ_REPLY_H
#define PKV_FUZZ_REPLY_H

#include <stddef.h>
#include <stdint.h>

/* Read the reply data[0..size) describes as a server would send it.
 * Aborts on a broken check; returns 0 otherwise. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Inputs run by LLVMFuzzerTestOneInput since the program started. */
extern uint64_t pkv_fuzz_ops;

#endif
