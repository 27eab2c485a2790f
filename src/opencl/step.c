/* SPDX-License-Identifier: MIT */
/*
 * The step on the device: begin_step takes it; the first layer call packs
 * its arrays (kv_step.h) and uploads them with the block-table rows that
 * changed, for each group of layers (pkv__ocl_group).
 */
#include "internal.h"

#include "kv_step.h"

#include <string.h>

/* Block-table rows hold a power of two entries, at least 16; max_blocks
 * is at most 2^24 (max_model_len, engine.c). */
uint32_t pkv__ocl_table_stride_for(uint32_t stride, uint32_t max_blocks)
{
    stride = stride ? stride : 16;
    while (stride < max_blocks)
        stride *= 2;
    return stride;
}

/* Whether every sequence of the step has one row (each has one at
 * least): the decode kernels' steps. */
static int all_decode(const pkv__step *s)
{
    return s->num_seqs > 0 && s->num_tokens == s->num_seqs;
}

static pkv_status grow_step(pkv__backend *b, pkv__ocl_group *grp,
                            size_t words)
{
    if (words > grp->step_host_cap) {
        size_t cap = grp->step_host_cap ? grp->step_host_cap : 256;
        while (cap < words)
            cap *= 2;
        uint32_t *grown = pkv__calloc(&b->alloc, cap, sizeof *grown);
        if (grown == NULL)
            return pkv__fail(PKV_ERR_OUT_OF_MEMORY, "step arrays: no memory");
        pkv__free(&b->alloc, grp->step_host, grp->step_host_cap,
                  sizeof *grown);
        grp->step_host = grown;
        grp->step_host_cap = cap;
    }
    if (words > grp->step_mem_cap) {
        size_t cap = grp->step_host_cap;
        cl_int err;
        cl_mem m = pkv__ocl_new_buffer(b, CL_MEM_READ_ONLY,
                                       cap * sizeof(uint32_t), &err);
        if (err != CL_SUCCESS)
            return pkv__ocl_fail(err, "clCreateBuffer(step arrays)");
        if (grp->step_mem != NULL)
            clReleaseMemObject(grp->step_mem);
        grp->step_mem = m;
        grp->step_mem_cap = cap;
    }
    return PKV_OK;
}

/* Step s as group g's layers read it: its tables, their versions and its
 * slots are the group's ([groups][num_seqs], [groups][num_tokens]). */
static pkv__step group_step(const pkv__step *s, uint32_t g)
{
    pkv__step v = *s;
    v.block_tables = s->block_tables + (size_t)g * s->num_seqs;
    if (s->table_versions != NULL)
        v.table_versions = s->table_versions + (size_t)g * s->num_seqs;
    v.slots = s->slots + (size_t)g * s->num_tokens;
    return v;
}

/* The packed step's words (kv_step.h): the header, then each array;
 * off and lens (both or neither) receive where each array starts and its
 * length. */
static size_t step_layout(const pkv__step *s, uint32_t freezes, uint32_t tiles,
                          size_t *off, size_t *lens)
{
    size_t n = s->num_seqs, t = s->num_tokens;
    size_t len[PKV_STEP_HEADER] = {
        n + 1, n, n, t, t, 2 * t, (size_t)freezes * PKV_FREEZE_WORDS, tiles};
    size_t at = PKV_STEP_HEADER;
    for (int i = 0; i < PKV_STEP_HEADER; i++) {
        if (off != NULL) {
            off[i] = at;
            lens[i] = len[i];
        }
        at += len[i];
    }
    return at;
}

/* A group's block tables (s, its view of the step) into grp->tables, as
 * rows of `stride` entries (restride: a stride other than the one the
 * buffer holds): only the runs of rows whose table version device_rows
 * does not know (in a decode step, the rows of the sequences that crossed
 * into a new block; a step that admits a prompt adds its row). Each group
 * knows its own rows, by the sequence's index in the step: a row of the
 * buffer is then one place whatever the step's number of sequences. Called
 * after the previous step's uploads finished (upload_step waits for them),
 * so the mirror they read from may change. */
static pkv_status upload_tables(pkv__backend *b, pkv__ocl_group *grp,
                                const pkv__step *s, uint32_t stride,
                                int restride)
{
    uint32_t n = s->num_seqs, bs = b->cfg.block_size;
    size_t words = (size_t)(n > 0 ? n : 1) * stride;
    cl_mem before = grp->tables;
    pkv_status st =
        pkv__ocl_grow_buffer(b, &grp->tables, &grp->tables_cap, words * 4,
                             CL_MEM_READ_ONLY, "block tables");
    if (st != PKV_OK)
        return st;
    if (grp->tables != before || restride)
        pkv__tables_seen_forget(&grp->device_rows); /* it holds none */
    size_t cap = grp->tables_cap / 4;
    if (grp->table_mirror_cap < cap) {
        uint32_t *m = pkv__calloc(&b->alloc, cap, sizeof *m);
        if (m == NULL)
            return pkv__fail(PKV_ERR_OUT_OF_MEMORY, "block tables");
        pkv__free(&b->alloc, grp->table_mirror, grp->table_mirror_cap,
                  sizeof *m);
        grp->table_mirror = m;
        grp->table_mirror_cap = cap;
    }
    for (uint32_t i = 0; i < n;) {
        /* The next run of rows [i, j) that must be written. A kernel reads
         * a row's entries below its sequence's block count only, so what
         * follows them in the mirror may be stale. */
        uint32_t j = i;
        for (; j < n; j++) {
            uint32_t nb = (s->context_lens[j] + bs - 1) / bs;
            if (pkv__tables_seen_knows(&grp->device_rows, s, j, nb))
                break;
            memcpy(grp->table_mirror + (size_t)j * stride, s->block_tables[j],
                   nb * sizeof(uint32_t));
        }
        if (j > i) {
            size_t at = (size_t)i * stride, count = (size_t)(j - i) * stride;
            cl_int err = clEnqueueWriteBuffer(
                b->queue, grp->tables, CL_FALSE, at * 4, count * 4,
                grp->table_mirror + at, 0, NULL, NULL);
            if (err != CL_SUCCESS) {
                pkv__tables_seen_forget(&grp->device_rows);
                return pkv__ocl_fail(err, "clEnqueueWriteBuffer(tables)");
            }
            b->table_words += count;
            for (uint32_t r = i; r < j; r++)
                pkv__tables_seen_note(&grp->device_rows, s, r,
                                      (s->context_lens[r] + bs - 1) / bs);
        }
        i = j + (j < n);
    }
    return PKV_OK;
}

/* begin_step only takes the step: everything that can fail on the device
 * (growing the step buffers, the upload) waits for the step's first layer
 * call, which a host may repeat after a failure. So the engine's plan,
 * once made, never has to be undone. */
pkv_status pkv__ocl_begin_step(pkv__backend *b, const pkv__step *s)
{
    pkv_status st = pkv__backend_step_check(&b->cfg, s, &b->checked);
    if (st != PKV_OK)
        return st;
    uint32_t n = s->num_seqs, bs = b->cfg.block_size;
    int quantized = pkv__backend_quantized(&b->cfg);
    uint32_t freezes = 0;
    for (uint32_t i = 0; quantized && i < n; i++) {
        uint32_t ctx = s->context_lens[i];
        uint32_t first = ctx - (s->query_start[i + 1] - s->query_start[i]);
        /* Blocks whose last token is one of this step's rows. */
        freezes += ctx / bs - first / bs;
    }
    /* The tiled kernel's tiles: each sequence's rows, tile_rows at a time. */
    uint32_t tiles = 0;
    for (uint32_t i = 0; b->tile_rows > 0 && i < n; i++) {
        uint32_t rows = s->query_start[i + 1] - s->query_start[i];
        tiles += (rows + b->tile_rows - 1) / b->tile_rows;
    }
    /* Only a step beyond the bounds create checked can be refused here. */
    size_t words = step_layout(s, freezes, tiles, NULL, NULL);
    if (words > UINT32_MAX)
        return pkv__fail(PKV_ERR_UNSUPPORTED, "step of %zu words", words);
    b->step = *s;
    b->num_freezes = freezes;
    b->num_tiles = tiles;
    b->have_step = 1;
    b->uploaded = 0;
    return PKV_OK;
}

/* Pack step s (a group's view of it) into w, laid out as off and lens
 * say (kv_step.h). */
static void pack_step(const pkv__backend *b, const pkv__step *s, uint32_t *w,
                      const size_t *off, const size_t *lens)
{
    uint32_t n = s->num_seqs, bs = b->cfg.block_size;
    int quantized = pkv__backend_quantized(&b->cfg);
    for (int i = 0; i < PKV_STEP_HEADER; i++)
        w[i] = (uint32_t)off[i];
    if (n > 0) {
        memcpy(w + off[PKV_STEP_QUERY_START], s->query_start,
               lens[PKV_STEP_QUERY_START] * 4);
        memcpy(w + off[PKV_STEP_CONTEXT_LENS], s->context_lens, (size_t)n * 4);
        if (quantized)
            memcpy(w + off[PKV_STEP_STAGES], s->stages, (size_t)n * 4);
        else
            memset(w + off[PKV_STEP_STAGES], 0, (size_t)n * 4);
    }
    uint32_t *freeze = w + off[PKV_STEP_FREEZES];
    uint32_t *tile = w + off[PKV_STEP_TILES];
    for (uint32_t i = 0; i < n; i++) {
        uint32_t q0 = s->query_start[i], q1 = s->query_start[i + 1];
        uint32_t ctx = s->context_lens[i], first = ctx - (q1 - q0);
        const uint32_t *table = s->block_tables[i];
        for (uint32_t r = q0; b->tile_rows > 0 && r < q1; r += b->tile_rows)
            *tile++ = r;
        for (uint32_t r = q0; r < q1; r++) {
            uint32_t tok = first + (r - q0);
            w[off[PKV_STEP_ROW_SEQ] + r] = i;
            /* The last block's rows go to the tail even when this step
             * freezes it: the step's rows read that block from there. */
            int in_last = tok / bs == (ctx - 1) / bs;
            w[off[PKV_STEP_ROW_TAIL] + r] =
                quantized && in_last ? s->stages[i] : PKV_STEP_NO_TAIL;
            w[off[PKV_STEP_SLOTS] + 2 * (size_t)r] = (uint32_t)s->slots[r];
            w[off[PKV_STEP_SLOTS] + 2 * (size_t)r + 1] =
                (uint32_t)(s->slots[r] >> 32);
        }
        for (uint32_t j = first / bs; quantized && j < ctx / bs; j++) {
            uint32_t b0 = j * bs;
            uint32_t in_tail = first > b0 ? first - b0 : 0;
            freeze[PKV_FREEZE_BLOCK] = table[j];
            freeze[PKV_FREEZE_STAGE] = s->stages[i];
            freeze[PKV_FREEZE_IN_TAIL] = in_tail;
            freeze[PKV_FREEZE_FIRST_ROW] = q0 + (b0 + in_tail - first);
            freeze[PKV_FREEZE_WINDOW] = s->windows != NULL
                                        ? s->windows[q0 + (b0 + bs - 1 - first)]
                                        : PKV_STEP_NO_TAIL;
            freeze += PKV_FREEZE_WORDS;
        }
    }
}

/* Pack the step's arrays (kv_step.h), one copy per group (each with the
 * group's slots and frozen blocks), and upload them with the tables,
 * once per step, from its first layer call. On failure nothing is marked
 * done: the next layer call (the host's repeat) starts over. */
static pkv_status upload_step(pkv__backend *b)
{
    const pkv__step *s = &b->step;
    /* The previous upload reads step_host: let it pkv__ocl_finish first. */
    if (b->upload != NULL) {
        cl_int err = clWaitForEvents(1, &b->upload);
        clReleaseEvent(b->upload);
        b->upload = NULL;
        if (err != CL_SUCCESS)
            return pkv__ocl_fail(err, "clWaitForEvents(step upload)");
    }
    uint32_t n = s->num_seqs, groups = b->num_groups;
    size_t off[PKV_STEP_HEADER], lens[PKV_STEP_HEADER];
    size_t at = step_layout(s, b->num_freezes, b->num_tiles, off, lens);
    pkv_status st = PKV_OK;
    for (uint32_t g = 0; st == PKV_OK && g < groups; g++) {
        st = grow_step(b, &b->groups[g], at);
        pkv__step view = group_step(s, g);
        if (st == PKV_OK)
            pack_step(b, &view, b->groups[g].step_host, off, lens);
    }
    if (st != PKV_OK)
        return st;
    /* pkv__ocl_need_upload built the decode kernels. */
    int decode = all_decode(s) && b->decode_state == 1;
    uint32_t longest = 0;
    for (uint32_t i = 0; i < n; i++)
        longest = s->context_lens[i] > longest ? s->context_lens[i] : longest;
    /* The decode kernels take these arrays as separate buffers (the same
     * in every group). The step arrays' uploads below come last on the
     * in-order queue: the last one's event covers these writes too. */
    const uint32_t *w = b->groups[0].step_host;
    const int which[2] = {PKV_STEP_CONTEXT_LENS, PKV_STEP_STAGES};
    cl_mem *mems[2] = {&b->dec_lens, &b->dec_stages};
    size_t *caps[2] = {&b->dec_cap[0], &b->dec_cap[1]};
    for (int i = 0; decode && st == PKV_OK && i < 2; i++) {
        st = pkv__ocl_grow_buffer(b, mems[i], caps[i], lens[which[i]] * 4,
                                  CL_MEM_READ_ONLY, "decode step arrays");
        cl_int err =
            st != PKV_OK
                ? CL_SUCCESS
                : clEnqueueWriteBuffer(b->queue, *mems[i], CL_FALSE, 0,
                                       lens[which[i]] * 4, w + off[which[i]],
                                       0, NULL, NULL);
        if (err != CL_SUCCESS)
            st = pkv__ocl_fail(err, "clEnqueueWriteBuffer(decode arrays)");
    }
    uint32_t stride =
        pkv__ocl_table_stride_for(b->table_stride, s->max_blocks_per_seq);
    for (uint32_t g = 0; st == PKV_OK && g < groups; g++) {
        pkv__step view = group_step(s, g);
        st = upload_tables(b, &b->groups[g], &view, stride,
                           stride != b->table_stride);
    }
    for (uint32_t g = 0; st == PKV_OK && g < groups; g++) {
        cl_int err = clEnqueueWriteBuffer(
            b->queue, b->groups[g].step_mem, CL_FALSE, 0, at * 4,
            b->groups[g].step_host, 0, NULL,
            g + 1 == groups ? &b->upload : NULL);
        if (err != CL_SUCCESS) {
            b->upload = NULL;
            st = pkv__ocl_fail(err, "clEnqueueWriteBuffer(step arrays)");
        }
    }
    if (st != PKV_OK) {
        /* No event covers the writes enqueued above, which read step_host
         * and the table mirrors: let them pkv__ocl_finish before a repeat
         * changes those. */
        clFinish(b->queue);
        return st;
    }
    b->table_stride = stride;
    b->step_is_decode = decode;
    b->max_context = longest;
    b->uploaded = 1;
    return PKV_OK;
}

/* Every layer call with rows starts here: the step's arrays on the device. */
pkv_status pkv__ocl_need_upload(pkv__backend *b)
{
    if (b->uploaded)
        return PKV_OK;
    return upload_step(b);
}

cl_mem pkv__ocl_arena(const pkv__backend *b, uint32_t layer)
{
    return b->arenas[pkv__backend_arena(&b->cfg, layer)];
}

const pkv__ocl_group *pkv__ocl_group_of(const pkv__backend *b,
                                        uint32_t layer)
{
    return &b->groups[pkv__backend_group(&b->cfg, layer)];
}
