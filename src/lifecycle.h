/* SPDX-License-Identifier: MIT */
/*
 * The sequence lifecycle: finding a sequence, moving it between the
 * waiting, running, swapped and ended lists, giving back what it holds,
 * and the per-tenant block counts that follow its table. The scheduler
 * (sched.c) and the step calls (engine_step.c, engine_seq.c) both change
 * sequences only through these, so neither calls into the other.
 */
#ifndef PKV_LIFECYCLE_H
#define PKV_LIFECYCLE_H

#include "engine.h"

/* The live sequence with this id (ended ones excluded), or NULL. O(1). */
pkv__seq *pkv__engine_find(const pkv_engine *engine, pkv_seq_id id);

/* The live sequence id names, for a call (`what`) that must come between
 * steps: PKV_ERR_BAD_STATE during a step or before any step saw the
 * sequence, PKV_ERR_NOT_FOUND if it is not live (the engine's message
 * set). */
pkv_status pkv__engine_find_between_steps(pkv_engine *engine, pkv_seq_id id,
                                          const char *what, pkv__seq **out);

/* End a sequence (any state but queued): release its blocks, tail and
 * swap memory, and queue its report, leaving it in its list. A call that
 * may end many sequences (step_end, a batch of aborts) then takes them all
 * out with one pass, pkv__engine_sweep_ended, instead of searching a list
 * once per end. Until the sweep the list holds ended sequences. */
void pkv__engine_end_later(pkv_engine *engine, pkv__seq *seq, int32_t reason,
                           pkv_status status);
void pkv__engine_sweep_ended(pkv_engine *engine);

/* Release a sequence's staging tail, blocks (counted off its tenant) and
 * prefix chain. */
void pkv__engine_drop_blocks(pkv_engine *engine, pkv__seq *seq);

/* Free a swapped-out sequence's host copy (nothing if it has none). */
void pkv__engine_drop_swap(pkv_engine *engine, pkv__seq *seq);

/* Count the blocks seq's table gained (or lost) since it held `before`
 * against its tenant. */
void pkv__engine_count_blocks(pkv_engine *engine, const pkv__seq *seq,
                              uint32_t before);

/* Cut a running sequence's KV (num_computed tokens written) back to its
 * first `keep` tokens, as stored. A cut inside a sealed U8 block (its rows
 * exist only quantised) falls back to that block's start unless the
 * rollback window holds its rows (rollback.h); those tokens are computed
 * again. A block others hold stays as it is (the next append copies it).
 * Sets num_computed. */
void pkv__engine_cut_kv(pkv_engine *engine, pkv__seq *seq, uint32_t keep);

/* Release a running sequence's staging tail (U8). */
void pkv__engine_release_stage(pkv_engine *engine, pkv__seq *seq);

/* Blocks the tenant's tables hold; change that count by delta (at every
 * change to a table). */
uint64_t pkv__engine_tenant_blocks(const pkv_engine *engine, uint32_t tenant);
void pkv__engine_tenant_add(pkv_engine *engine, uint32_t tenant,
                            int64_t delta);

/* Give every sequence list, and the id map, room for `live` sequences. */
pkv_status pkv__engine_reserve_lists(pkv_engine *engine, uint64_t live);

/* Insert into a waiting or swapped list in policy order. The list has
 * room: every list is reserved for every live sequence. */
void pkv__engine_enqueue(const pkv_engine *engine, pkv__seq_list *list,
                         pkv__seq *seq);

#endif
