/* SPDX-License-Identifier: MIT */
/*
 * The engine's invariants, checked in debug builds after every call that
 * changes its sequences or blocks (SQLite's assert style): a broken one
 * aborts with its description, so a fuzzer or a test finds the call that
 * broke it rather than a wrong output many steps later.
 *
 * Checked between calls (not inside a step_begin):
 *   - pool: every block in exactly one state; free and cached-free queues
 *     as long as their counts; used count; tokens_stored = sum of fills;
 *     the null block never cached, referenced or filled;
 *   - each block's ref_count equals the number of tables that hold it;
 *   - each tenant's block count equals a recount over its sequences;
 *   - tables: blocks_for(num_tokens) blocks, every full block filled,
 *     the last one holding the rest; slots for exactly the computed
 *     tokens plus the current step's rows; tokens within their array and
 *     within longest_tokens;
 *   - lists: a sequence's state matches its list, no sequence twice, the
 *     id map holds exactly the listed sequences;
 *     waiting, swapped and ended sequences hold no blocks; swapped ones
 *     hold swap data, and swap_used is its sum (within swap_bytes); at
 *     most max_num_seqs running;
 *   - U8 staging tails: each tail either free or held by one running
 *     sequence.
 */
#ifndef PKV_CHECK_H
#define PKV_CHECK_H

#include "pkv/pkv.h"

#include <stddef.h>

/* NULL when every invariant holds, else a description of the first one
 * broken (in buf). O(blocks + sequences * log sequences). Uses the C
 * library's heap, not the engine's allocator; without memory it checks
 * only the pool. */
const char *pkv__engine_check(const pkv_engine *engine, char *buf,
                              size_t size);

#ifdef NDEBUG
#define PKV__ENGINE_CHECK(engine) ((void)0)
#else
/* Abort with the description when an invariant is broken. */
void pkv__engine_check_or_abort(const pkv_engine *engine, const char *where);
#define PKV__ENGINE_CHECK(engine)                                             \
    pkv__engine_check_or_abort((engine), __func__)
#endif

#endif
