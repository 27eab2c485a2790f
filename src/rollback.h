/* SPDX-License-Identifier: MIT */
/*
 * The U8 rollback window (pkv_engine_params.u8_rollback_blocks, W). A U8
 * block's rows exist only quantised once it is sealed, so a cut inside it
 * cannot keep them alone without re-quantising, which pkv never does.
 * With a window, the backend also copies the f32 rows of a block it seals
 * into a window tail (pkv__step.windows), and a cut inside that block
 * copies them back into the sequence's working tail: the block is then
 * the sequence's unsealed last block again, exactly as it was before the
 * rows after the cut were appended.
 *
 * Working tail `stage` owns window tails max_num_seqs + stage * W + (j %
 * W) for its sequence's logical blocks j: the last W blocks sealed hold
 * distinct tails. engine->window_blocks names the block each one holds.
 * An entry is cleared when a step is planned to overwrite its tail and
 * set when that step ends, so a failed step leaves no stale claim.
 */
#ifndef PKV_ROLLBACK_H
#define PKV_ROLLBACK_H

#include "engine.h"

/* Forget every window of working tail `stage` (it changes hands). */
void pkv__rollback_reset(pkv_engine *engine, uint32_t stage);

/* Fill engine->row_windows for seq's rows [first_row, first_row + rows)
 * of the step being built (tokens num_computed on): the window tail for
 * each row that seals one of the last W blocks the step seals, else
 * PKV__NO_STAGE. */
void pkv__rollback_plan(pkv_engine *engine, const pkv__seq *seq,
                        uint32_t first_row, uint32_t rows);

/* The step ended for seq (its rows written, num_computed not yet
 * advanced): its planned windows now hold their blocks. */
void pkv__rollback_commit(pkv_engine *engine, const pkv__seq *seq,
                          uint32_t first_row, uint32_t rows);

/* A cut of seq to `keep` tokens falls inside its sealed logical block j:
 * copy the block's rows back into the working tail when a window holds
 * them. 1 on success; 0 when no window holds j or the copy failed (the
 * caller then drops the block). */
int pkv__rollback_restore(pkv_engine *engine, const pkv__seq *seq,
                          uint32_t j);

/* Forget the windows of seq's blocks from j on (a cut removed them). */
void pkv__rollback_forget_from(pkv_engine *engine, const pkv__seq *seq,
                               uint32_t j);

#endif
