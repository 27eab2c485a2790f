/* SPDX-License-Identifier: MIT */
/* The U8 rollback window (rollback.h). */
#include "rollback.h"

static uint32_t *window_entry(const pkv_engine *e, uint32_t stage,
                              uint32_t j)
{
    uint32_t w = e->params.u8_rollback_blocks;
    return e->window_blocks + (size_t)stage * w + j % w;
}

static uint32_t window_stage(const pkv_engine *e, uint32_t stage, uint32_t j)
{
    uint32_t w = e->params.u8_rollback_blocks;
    return e->params.max_num_seqs + stage * w + j % w;
}

void pkv__rollback_reset(pkv_engine *e, uint32_t stage)
{
    for (uint32_t k = 0; e->window_blocks != NULL &&
                         k < e->params.u8_rollback_blocks;
         k++)
        *window_entry(e, stage, k) = PKV__NO_BLOCK;
}

void pkv__rollback_plan(pkv_engine *e, const pkv__seq *s, uint32_t first_row,
                        uint32_t rows)
{
    if (e->window_blocks == NULL)
        return;
    uint32_t bs = e->params.block_size, w = e->params.u8_rollback_blocks;
    uint32_t end = s->num_computed + rows;
    for (uint32_t r = 0; r < rows; r++) {
        uint32_t p = s->num_computed + r, j = p / bs;
        /* Row p seals block j; of the blocks this step seals (up to
         * end / bs - 1), the last w keep windows: distinct tails. */
        int windowed = p % bs == bs - 1 && j + w >= end / bs;
        e->row_windows[first_row + r] =
            windowed ? window_stage(e, s->stage, j) : PKV__NO_STAGE;
        if (windowed)
            *window_entry(e, s->stage, j) = PKV__NO_BLOCK;
    }
}

void pkv__rollback_commit(pkv_engine *e, const pkv__seq *s,
                          uint32_t first_row, uint32_t rows)
{
    if (e->window_blocks == NULL)
        return;
    uint32_t bs = e->params.block_size;
    for (uint32_t r = 0; r < rows; r++)
        if (e->row_windows[first_row + r] != PKV__NO_STAGE) {
            uint32_t j = (s->num_computed + r) / bs;
            *window_entry(e, s->stage, j) = j;
        }
}

int pkv__rollback_restore(pkv_engine *e, const pkv__seq *s, uint32_t j)
{
    if (e->window_blocks == NULL || s->stage == PKV__NO_STAGE ||
        *window_entry(e, s->stage, j) != j)
        return 0;
    pkv__block_copy pair = {window_stage(e, s->stage, j), s->stage};
    return e->ops->copy_stages(e->backend, &pair, 1) == PKV_OK;
}

void pkv__rollback_forget_from(pkv_engine *e, const pkv__seq *s, uint32_t j)
{
    if (e->window_blocks == NULL || s->stage == PKV__NO_STAGE)
        return;
    for (uint32_t k = 0; k < e->params.u8_rollback_blocks; k++) {
        uint32_t *entry = window_entry(e, s->stage, k);
        if (*entry != PKV__NO_BLOCK && *entry >= j)
            *entry = PKV__NO_BLOCK;
    }
}
