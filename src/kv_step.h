/* SPDX-License-Identifier: MIT */
/*
 * How the OpenCL backend hands a step to its kernels (valid C11 and OpenCL
 * C 1.2: macros only). The step's arrays are packed into one uint buffer,
 * uploaded once per step; its first PKV_STEP_HEADER uints hold the offset,
 * in uints, of each array. The block tables are not in it: they live in a
 * buffer of their own, rows of a stride that only grows, where a step
 * rewrites only the rows that changed (most steps change a few).
 */
#ifndef PKV_KV_STEP_H
#define PKV_KV_STEP_H

#define PKV_STEP_QUERY_START 0  /* [num_seqs + 1] */
#define PKV_STEP_CONTEXT_LENS 1 /* [num_seqs] */
#define PKV_STEP_STAGES 2       /* [num_seqs]: u8 staging tails */
#define PKV_STEP_ROW_SEQ 3      /* [num_tokens]: the sequence of each row */
#define PKV_STEP_ROW_TAIL 4     /* [num_tokens]: u8: the tail the row is
                                   written to; PKV_STEP_NO_TAIL for a
                                   block this step freezes that is not its
                                   sequence's last (the step's rows read
                                   the last block from the tail, frozen
                                   or not) */
#define PKV_STEP_SLOTS 5        /* [num_tokens][2]: slot, low then high
                                   32 bits */
#define PKV_STEP_FREEZES 6      /* [num_freezes][PKV_FREEZE_WORDS] */
#define PKV_STEP_TILES 7        /* [num_tiles]: the tiled attention kernel's
                                   tiles, the first row of each (up to
                                   tile_rows rows of one sequence) */
#define PKV_STEP_HEADER 8

#define PKV_STEP_NO_TAIL 0xffffffffu

/* One block frozen (quantized) by this step's append: its block id, its
 * sequence's staging tail, the number of its tokens already in the tail
 * (written by earlier steps), the batch row holding its next token (the
 * rest come from this step's K/V rows, in order), and the tail that also
 * receives its f32 rows (rollback window) or PKV_STEP_NO_TAIL. */
#define PKV_FREEZE_BLOCK 0
#define PKV_FREEZE_STAGE 1
#define PKV_FREEZE_IN_TAIL 2
#define PKV_FREEZE_FIRST_ROW 3
#define PKV_FREEZE_WINDOW 4
#define PKV_FREEZE_WORDS 5

#endif
