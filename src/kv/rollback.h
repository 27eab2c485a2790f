/* SPDX-License-Identifier: MIT */
/*
 * The U8 rollback window (pkv_engine_params.u8_rollback_blocks, W). A U8
 * block's rows exist only quantised once it is frozen, so a cut inside it
 * cannot keep them alone without re-quantising, which pkv never does.
 * With a window, the backend also copies the f32 rows of a block it freezes
 * into a window tail (pkv__step.windows), and a cut inside that block
 * copies them back into the sequence's working tail: the block is then
 * the sequence's unfrozen last block again, exactly as it was before the
 * rows after the cut were appended.
 *
 * Working tail `stage` owns window tails max_num_seqs + stage * W + (j %
 * W) for its sequence's logical blocks j: the last W blocks frozen hold
 * distinct tails. window_blocks names the block each one holds.
 * An entry is cleared when a step is planned to overwrite its tail and
 * set when that step ends, so a failed step leaves no stale claim.
 */
#ifndef PKV_KV_ROLLBACK_H
#define PKV_KV_ROLLBACK_H

#include "alloc.h"
#include "backend.h"

typedef struct pkv__rollback {
    uint32_t window;       /* W; 0: no window, both arrays NULL */
    uint32_t max_num_seqs; /* working tails; the first window tail */
    uint32_t max_rows;     /* max_batch_tokens */
    uint32_t block_size;
    /* [max_num_seqs][W]: the logical block whose f32 rows window tail
     * (stage, j % W) holds, for the sequence holding working tail
     * `stage`, or PKV__NO_BLOCK. */
    uint32_t *window_blocks;
    /* [max_batch_tokens]: each row's window tail in the step being built,
     * or PKV__NO_STAGE (pkv__step.windows). */
    uint32_t *row_windows;
} pkv__rollback;

/* The window params asks for (u8_rollback_blocks of a quantized cache;
 * none otherwise); its release. */
pkv_status pkv__rollback_init(pkv__rollback *rollback,
                              const pkv__allocator *alloc,
                              const pkv_engine_params *params);
void pkv__rollback_release(pkv__rollback *rollback,
                           const pkv__allocator *alloc);

/* Forget every window of working tail `stage` (it changes hands). */
void pkv__rollback_reset(pkv__rollback *rollback, uint32_t stage);

/* Fill row_windows for rows [first_row, first_row + rows) of the step
 * being built, which compute tokens from `computed` on for the sequence
 * holding working tail `stage`: the window tail for each row that freezes
 * one of the last W blocks the step freezes, else PKV__NO_STAGE. */
void pkv__rollback_plan(pkv__rollback *rollback, uint32_t stage,
                        uint32_t computed, uint32_t first_row,
                        uint32_t rows);

/* The step ran those rows (computed: as planned): their planned windows
 * now hold their blocks. */
void pkv__rollback_commit(pkv__rollback *rollback, uint32_t stage,
                          uint32_t computed, uint32_t first_row,
                          uint32_t rows);

/* A cut falls inside the frozen logical block j of the sequence holding
 * working tail `stage`: copy the block's rows back into that tail on the
 * backend when a window holds them. 1 on success; 0 when no window holds
 * j or the copy failed (the caller then drops the block). */
int pkv__rollback_restore(const pkv__rollback *rollback,
                          const pkv__device *device, uint32_t stage,
                          uint32_t j);

/* Forget the windows of working tail `stage`'s blocks from j on (a cut
 * removed them). */
void pkv__rollback_forget_from(pkv__rollback *rollback, uint32_t stage,
                               uint32_t j);

/* The W blocks working tail `stage`'s windows hold (window > 0). */
static inline const uint32_t *pkv__rollback_held(const pkv__rollback *r,
                                                 uint32_t stage)
{
    return r->window_blocks + (size_t)stage * r->window;
}

#endif
