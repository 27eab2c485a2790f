/* SPDX-License-Identifier: MIT */
/* The U8 rollback window (rollback.h). */
#include "kv/rollback.h"

#include "kv_layout.h"

#include <string.h>

pkv_status pkv__rollback_init(pkv__rollback *r, const pkv__allocator *a,
                              const pkv_engine_params *p)
{
    memset(r, 0, sizeof *r);
    r->max_num_seqs = p->max_num_seqs;
    r->max_rows = p->max_batch_tokens;
    r->block_size = p->block_size;
    if (!PKV_LAYOUT_QUANTIZED(p->kv_dtype) || p->u8_rollback_blocks == 0)
        return PKV_OK;
    r->window = p->u8_rollback_blocks;
    size_t entries = (size_t)r->max_num_seqs * r->window;
    r->window_blocks = pkv__calloc(a, entries, sizeof *r->window_blocks);
    r->row_windows = pkv__calloc(a, r->max_rows, sizeof *r->row_windows);
    if (r->window_blocks == NULL || r->row_windows == NULL)
        return PKV_ERR_OUT_OF_MEMORY;
    memset(r->window_blocks, 0xff, /* PKV__NO_BLOCK */
           entries * sizeof *r->window_blocks);
    return PKV_OK;
}

void pkv__rollback_release(pkv__rollback *r, const pkv__allocator *a)
{
    pkv__free(a, r->window_blocks, (size_t)r->max_num_seqs * r->window,
              sizeof *r->window_blocks);
    pkv__free(a, r->row_windows, r->max_rows, sizeof *r->row_windows);
    r->window_blocks = NULL;
    r->row_windows = NULL;
}

static uint32_t *window_entry(const pkv__rollback *r, uint32_t stage,
                              uint32_t j)
{
    return r->window_blocks + (size_t)stage * r->window + j % r->window;
}

static uint32_t window_stage(const pkv__rollback *r, uint32_t stage,
                             uint32_t j)
{
    return r->max_num_seqs + stage * r->window + j % r->window;
}

void pkv__rollback_reset(pkv__rollback *r, uint32_t stage)
{
    for (uint32_t k = 0; k < r->window; k++)
        *window_entry(r, stage, k) = PKV__NO_BLOCK;
}

void pkv__rollback_plan(pkv__rollback *r, uint32_t stage, uint32_t computed,
                        uint32_t first_row, uint32_t rows)
{
    if (r->window == 0)
        return;
    uint32_t bs = r->block_size, w = r->window;
    uint32_t end = computed + rows;
    for (uint32_t i = 0; i < rows; i++) {
        uint32_t p = computed + i, j = p / bs;
        /* Row p freezes block j; of the blocks this step freezes (up to
         * end / bs - 1), the last w keep windows: distinct tails. */
        int windowed = p % bs == bs - 1 && j + w >= end / bs;
        r->row_windows[first_row + i] =
            windowed ? window_stage(r, stage, j) : PKV__NO_STAGE;
        if (windowed)
            *window_entry(r, stage, j) = PKV__NO_BLOCK;
    }
}

void pkv__rollback_commit(pkv__rollback *r, uint32_t stage,
                          uint32_t computed, uint32_t first_row,
                          uint32_t rows)
{
    if (r->window == 0)
        return;
    for (uint32_t i = 0; i < rows; i++)
        if (r->row_windows[first_row + i] != PKV__NO_STAGE) {
            uint32_t j = (computed + i) / r->block_size;
            *window_entry(r, stage, j) = j;
        }
}

int pkv__rollback_restore(const pkv__rollback *r, const pkv__device *device,
                          uint32_t stage, uint32_t j)
{
    if (r->window == 0 || stage == PKV__NO_STAGE ||
        *window_entry(r, stage, j) != j)
        return 0;
    pkv__block_copy pair = {window_stage(r, stage, j), stage};
    return device->ops->copy_stages(device->backend, &pair, 1) == PKV_OK;
}

void pkv__rollback_forget_from(pkv__rollback *r, uint32_t stage, uint32_t j)
{
    if (r->window == 0 || stage == PKV__NO_STAGE)
        return;
    for (uint32_t k = 0; k < r->window; k++) {
        uint32_t *entry = window_entry(r, stage, k);
        if (*entry != PKV__NO_BLOCK && *entry >= j)
            *entry = PKV__NO_BLOCK;
    }
}
