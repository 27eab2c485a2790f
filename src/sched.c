/* SPDX-License-Identifier: MIT */
/*
 * The step planner: which sequences run this step, with how many rows,
 * whom to preempt, whom to admit. It changes block tables and sequence
 * states and records device actions (swap, copy-on-write) for the engine to
 * run; it never touches device memory.
 *
 * Rules (docs/design.md, "Scheduler"):
 *  1. Running sequences first, in order of admission: a decode row, or the
 *     next prompt chunk (at most long_prefill_threshold rows), within the
 *     step's token budget.
 *  2. A running sequence short of blocks preempts the most recently
 *     admitted (FCFS) or lowest-priority (PRIORITY) running sequence after
 *     it; a sequence resumed after preemption is spared until it samples a
 *     token, except by the oldest running sequence, which always makes
 *     progress. With no victim it preempts itself, or waits if spared.
 *  3. Only when nobody was preempted: swapped sequences come back first
 *     (one whose tenant is at its quota is passed over; one short of
 *     blocks stops all that follow), then waiting ones are admitted in
 *     policy order, each after a prefix lookup, while max_num_seqs, the
 *     budget and the free blocks above the watermark allow.
 *  4. Quotas: a sequence never holds more than max_blocks_per_seq blocks, a
 *     tenant never more than max_blocks_per_tenant; a tenant at its quota
 *     preempts only its own sequences and does not hold up other tenants'
 *     admissions.
 */
#include "engine.h"
#include "lifecycle.h"

#include <string.h>

#define NONE UINT32_MAX

static uint32_t blocks_for(uint64_t tokens, uint32_t block_size)
{
    return (uint32_t)((tokens + block_size - 1) / block_size);
}

static void push_action(pkv_engine *e, int32_t kind, pkv__seq *seq,
                        pkv__block_copy copy)
{
    pkv__action *a = &e->actions[e->num_actions++];
    a->kind = kind;
    a->seq = seq;
    a->copy = copy;
}

static void take_stage(pkv_engine *e, pkv__seq *seq)
{
    if (e->params.kv_dtype == PKV_KV_U8)
        seq->stage = e->free_stages[--e->num_free_stages];
}

/* U8: rows from `computed` on that a step may run. When the last block
 * holds rows in the staging tail, a step that filled it and went on into
 * the next block would overwrite those rows with the next block's while
 * sealing from them, so a repeated attend (pkv.h: a failed one may be
 * repeated) would seal garbage: such a step stops at the block's end. */
static uint32_t u8_room(const pkv_engine *e, uint32_t computed)
{
    uint32_t bs = e->pool.block_size;
    if (e->params.kv_dtype != PKV_KV_U8 || computed % bs == 0)
        return UINT32_MAX;
    return bs - computed % bs;
}

/* Rows a scheduled sequence wants: its decode row, or its next prompt
 * chunk (prompt, or the whole history after a recompute preemption). */
static uint32_t rows_wanted(const pkv_engine *e, const pkv__seq *seq,
                            uint32_t computed, uint32_t budget)
{
    uint32_t n = seq->num_tokens - computed;
    uint32_t cap = e->params.long_prefill_threshold;
    if (n > 1 && cap != 0 && n > cap)
        n = cap;
    uint32_t room = u8_room(e, computed);
    if (n > room)
        n = room;
    return n < budget ? n : budget;
}

/* Preempt running[index]: swap it out when the mode and the host budget
 * allow, else free its blocks for a recompute. */
static void preempt(pkv_engine *e, uint32_t index, uint32_t *num_preempted)
{
    pkv__seq *seq = e->running.items[index];
    pkv__seq_list_remove_at(&e->running, index);
    e->preempted[(*num_preempted)++] = seq->id;
    seq->num_preemptions++;
    seq->protect = 1;
    e->totals.preemptions++;

    int swapped = 0;
    if (e->params.preempt_mode == PKV_PREEMPT_SWAP) {
        uint32_t n = seq->table.num_blocks;
        size_t size = n * pkv__backend_swap_block_bytes(&e->backend_config);
        if (e->params.kv_dtype == PKV_KV_U8)
            size += pkv__backend_stage_bytes(&e->backend_config);
        if (e->swap_used + size <= e->params.swap_bytes) {
            seq->swap_data = pkv__calloc(&e->alloc, size, 1);
            seq->swap_blocks = pkv__calloc(&e->alloc, n ? n : 1,
                                           sizeof *seq->swap_blocks);
            if (seq->swap_data != NULL && seq->swap_blocks != NULL) {
                memcpy(seq->swap_blocks, seq->table.blocks,
                       n * sizeof *seq->swap_blocks);
                seq->swap_size = size;
                seq->swap_num_blocks = n;
                e->swap_used += size;
                pkv__block_copy stage = {seq->stage, PKV__NULL_BLOCK};
                push_action(e, PKV__ACTION_SWAP_OUT, seq, stage);
                swapped = 1;
            } else {
                pkv__free(&e->alloc, seq->swap_data, size, 1);
                pkv__free(&e->alloc, seq->swap_blocks, n ? n : 1,
                          sizeof *seq->swap_blocks);
                seq->swap_data = NULL;
                seq->swap_blocks = NULL;
            }
        }
    }
    /* The tail and blocks may be handed to others this step: their new
     * owners write them only after the actions, swap-outs first, ran. */
    pkv__engine_drop_blocks(e, seq);
    if (swapped) {
        seq->state = PKV__SEQ_SWAPPED;
        e->totals.swap_outs++;
        pkv__engine_enqueue(e, &e->swapped, seq);
    } else {
        seq->num_computed = 0;
        seq->state = PKV__SEQ_WAITING;
        pkv__engine_enqueue(e, &e->waiting, seq);
    }
}

/* A victim among running[after + 1 ..], or NONE: the most recently
 * admitted (FCFS) or the lowest priority, most recently admitted. */
static uint32_t pick_victim(const pkv_engine *e, uint32_t after,
                            int same_tenant, uint32_t tenant,
                            int spare_protected)
{
    uint32_t best = NONE;
    for (uint32_t j = e->running.count; j-- > after + 1;) {
        const pkv__seq *v = e->running.items[j];
        if ((same_tenant && v->tenant != tenant) ||
            (spare_protected && v->protect))
            continue;
        if (e->params.policy != PKV_POLICY_PRIORITY)
            return j;
        if (best == NONE || v->priority > e->running.items[best]->priority)
            best = j;
    }
    return best;
}

static void schedule(pkv_engine *e, pkv__seq *seq, uint32_t rows,
                     uint32_t *num_seqs, uint32_t *budget)
{
    seq->scheduled = rows;
    e->step_seqs[(*num_seqs)++] = seq;
    *budget -= rows;
}

/* Give seq slots for `rows` more tokens; the caller checked the blocks.
 * Records the copy-on-write copy (f32/f16: a U8 tail lives in the staging
 * area, so the copied block needs no contents). */
static pkv_status grow(pkv_engine *e, pkv__seq *seq, uint32_t rows)
{
    pkv__block_copy copy;
    uint32_t before = seq->table.num_blocks;
    pkv_status st = pkv__table_append(&seq->table, &e->pool, rows, &copy);
    pkv__engine_count_blocks(e, seq, before);
    if (st == PKV_OK && copy.dst != PKV__NULL_BLOCK &&
        e->params.kv_dtype != PKV_KV_U8)
        push_action(e, PKV__ACTION_COPY_BLOCK, seq, copy);
    return st;
}

/* Rule 1, 2, 4 for running[i]. Returns how running[i] ended: 1 if it is
 * still at index i (scheduled or waiting), 0 if it left the list. */
static int plan_running(pkv_engine *e, uint32_t i, uint32_t *budget,
                        uint32_t *num_seqs, uint32_t *num_preempted)
{
    pkv__seq *seq = e->running.items[i];
    uint32_t bs = e->pool.block_size;
    uint32_t rows = rows_wanted(e, seq, seq->num_computed, *budget);
    uint32_t seq_quota = e->params.max_blocks_per_seq;
    uint32_t tenant_quota = e->params.max_blocks_per_tenant;
    for (;;) {
        uint32_t after = blocks_for(seq->table.num_tokens + (uint64_t)rows, bs);
        uint32_t grow_by = after - seq->table.num_blocks;
        if (seq_quota != 0 && after > seq_quota) {
            pkv__engine_end(e, seq, PKV_FINISH_FAILED, PKV_ERR_QUOTA);
            return 0;
        }
        if (tenant_quota != 0 &&
            pkv__engine_tenant_blocks(e, seq->tenant) + grow_by >
                tenant_quota) {
            uint32_t v = pick_victim(e, i, 1, seq->tenant, i != 0);
            if (v != NONE) {
                preempt(e, v, num_preempted);
                continue;
            }
            if (after > tenant_quota) {
                pkv__engine_end(e, seq, PKV_FINISH_FAILED, PKV_ERR_QUOTA);
                return 0;
            }
            return 1; /* the tenant's older sequences go first */
        }
        uint32_t need = pkv__table_blocks_needed(&seq->table, &e->pool, rows);
        if (need <= pkv__pool_available(&e->pool)) {
            pkv_status st = grow(e, seq, rows);
            if (st != PKV_OK) {
                pkv__engine_end(e, seq, PKV_FINISH_FAILED, st);
                return 0;
            }
            schedule(e, seq, rows, num_seqs, budget);
            return 1;
        }
        uint32_t v = pick_victim(e, i, 0, 0, i != 0);
        if (v != NONE) {
            preempt(e, v, num_preempted);
            continue;
        }
        if (i == 0) {
            /* Everyone else is gone and it still does not fit. */
            pkv__engine_end(e, seq, PKV_FINISH_FAILED, PKV_ERR_NO_BLOCKS);
            return 0;
        }
        if (seq->protect)
            return 1;
        preempt(e, i, num_preempted);
        return 0;
    }
}

/* Rule 3, swapped sequences: bring back swapped[index] if it fits.
 * Returns 1 swapped in or ended (the list shrank), 0 skipped (its tenant is
 * at quota: look further), -1 stop (blocks: nobody after it may take
 * them). */
static int plan_swap_in(pkv_engine *e, uint32_t index, uint32_t *budget,
                        uint32_t *num_seqs)
{
    pkv__seq *seq = e->swapped.items[index];
    uint32_t bs = e->pool.block_size;
    uint32_t rows = rows_wanted(e, seq, seq->num_computed, *budget);
    uint32_t after = blocks_for(seq->num_computed + (uint64_t)rows, bs);
    uint32_t seq_quota = e->params.max_blocks_per_seq;
    uint32_t tenant_quota = e->params.max_blocks_per_tenant;
    if (after > e->pool.num_blocks - 1 || (seq_quota && after > seq_quota) ||
        (tenant_quota && after > tenant_quota)) {
        /* It can never come back: with nothing else running it would not
         * fit either. */
        pkv__engine_end(e, seq, PKV_FINISH_FAILED,
                        after > e->pool.num_blocks - 1 ? PKV_ERR_NO_BLOCKS
                                                       : PKV_ERR_QUOTA);
        return 1;
    }
    if (tenant_quota != 0 &&
        pkv__engine_tenant_blocks(e, seq->tenant) + after > tenant_quota)
        return 0;
    uint32_t watermark = e->running.count ? e->watermark_blocks : 0;
    if (after + watermark > pkv__pool_available(&e->pool))
        return -1;
    pkv__block_copy copy;
    pkv_status st = pkv__table_append(&seq->table, &e->pool,
                                      seq->num_computed, &copy);
    pkv__engine_count_blocks(e, seq, 0);
    if (st == PKV_OK)
        st = grow(e, seq, rows);
    pkv__seq_list_remove_at(&e->swapped, index);
    if (st != PKV_OK) {
        pkv__engine_end(e, seq, PKV_FINISH_FAILED, st);
        return 1;
    }
    take_stage(e, seq);
    pkv__block_copy stage = {PKV__NULL_BLOCK, seq->stage};
    push_action(e, PKV__ACTION_SWAP_IN, seq, stage);
    e->totals.swap_ins++;
    seq->state = PKV__SEQ_RUNNING;
    seq->admitted = ++e->admissions;
    pkv__seq_list_insert(&e->running, e->running.count, seq);
    schedule(e, seq, rows, num_seqs, budget);
    return 1;
}

/* Rule 3, waiting sequences: admit waiting[index] after a prefix lookup.
 * Returns 1 admitted or ended (the list shrank), 0 skipped (tenant at
 * quota: look further), -1 stop admitting (blocks). */
static int plan_admit(pkv_engine *e, uint32_t index, uint32_t *budget,
                      uint32_t *num_seqs)
{
    pkv__seq *seq = e->waiting.items[index];
    uint32_t bs = e->pool.block_size;
    uint32_t full = blocks_for(seq->num_tokens, bs);
    uint32_t seq_quota = e->params.max_blocks_per_seq;
    uint32_t tenant_quota = e->params.max_blocks_per_tenant;
    if (full > e->pool.num_blocks - 1 || (seq_quota && full > seq_quota) ||
        (tenant_quota && full > tenant_quota)) {
        pkv__engine_end(e, seq, PKV_FINISH_FAILED,
                        full > e->pool.num_blocks - 1 ? PKV_ERR_NO_BLOCKS
                                                      : PKV_ERR_QUOTA);
        return 1;
    }
    uint32_t hits = 0;
    pkv__prefix_lookup(&e->prefix, seq->tokens, seq->num_tokens, seq->salt,
                       seq->prompt_hashes, seq->num_prompt_hashes, e->links,
                       &hits);
    uint32_t revived = 0;
    for (uint32_t h = 0; h < hits; h++)
        revived += e->pool.blocks[e->links[h].block].ref_count == 0;
    uint32_t computed = hits * bs;
    uint32_t rows = rows_wanted(e, seq, computed, *budget);
    uint32_t after = blocks_for(computed + (uint64_t)rows, bs);
    uint32_t need = after - hits + revived;
    if (tenant_quota != 0 &&
        pkv__engine_tenant_blocks(e, seq->tenant) + after > tenant_quota)
        return 0;
    /* The watermark keeps blocks for running sequences to grow into; with
     * none running it would only stop the first admission forever. */
    uint32_t watermark = e->running.count ? e->watermark_blocks : 0;
    if (need + watermark > pkv__pool_available(&e->pool))
        return -1;

    pkv_status st = PKV_OK;
    if (hits) {
        for (uint32_t h = 0; h < hits; h++)
            e->hit_blocks[h] = e->links[h].block;
        st = pkv__table_adopt(&seq->table, &e->pool, e->hit_blocks, hits);
        pkv__engine_count_blocks(e, seq, 0);
        if (st == PKV_OK)
            st = pkv__prefix_chain_adopt(&seq->chain, &e->pool, e->links,
                                         hits);
    }
    if (st == PKV_OK)
        st = grow(e, seq, rows);
    pkv__seq_list_remove_at(&e->waiting, index);
    e->totals.prefix_query_tokens += seq->num_tokens;
    if (st != PKV_OK) {
        pkv__engine_end(e, seq, PKV_FINISH_FAILED, st);
        return 1;
    }
    e->totals.prefix_hit_tokens += computed;
    seq->num_computed = computed;
    take_stage(e, seq);
    seq->state = PKV__SEQ_RUNNING;
    seq->admitted = ++e->admissions;
    pkv__seq_list_insert(&e->running, e->running.count, seq);
    schedule(e, seq, rows, num_seqs, budget);
    return 1;
}

/* Speculative decoding: a sequence that decodes in this step with drafts
 * for it (pkv_seq_propose) runs them after its row, as many as the
 * budget, the prefill cap, its blocks and quotas allow; the rest are
 * dropped, never preempting anyone. The drafts join its tokens for the
 * step; step_end keeps the accepted ones. */
static void plan_drafts(pkv_engine *e, uint32_t num_seqs, uint32_t *budget)
{
    uint32_t cap = e->params.long_prefill_threshold;
    uint32_t seq_quota = e->params.max_blocks_per_seq;
    uint32_t tenant_quota = e->params.max_blocks_per_tenant;
    uint32_t bs = e->pool.block_size;
    for (uint32_t i = 0; i < num_seqs && *budget > 0; i++) {
        pkv__seq *s = e->step_seqs[i];
        if (s->num_drafts == 0 || s->drafts_step != e->totals.steps ||
            s->scheduled != 1 || s->num_computed + 1 != s->num_tokens)
            continue;
        uint32_t k = s->num_drafts < *budget ? s->num_drafts : *budget;
        if (cap != 0 && k + 1 > cap)
            k = cap - 1;
        uint32_t room = u8_room(e, s->num_computed);
        if (k + 1 > room)
            k = room - 1;
        for (; k > 0; k--) {
            uint32_t need =
                pkv__table_blocks_needed(&s->table, &e->pool, k);
            uint32_t after =
                blocks_for(s->table.num_tokens + (uint64_t)k, bs);
            if (need <= pkv__pool_available(&e->pool) &&
                (seq_quota == 0 || after <= seq_quota) &&
                (tenant_quota == 0 ||
                 pkv__engine_tenant_blocks(e, s->tenant) + need <=
                     tenant_quota))
                break;
        }
        if (k == 0 || grow(e, s, k) != PKV_OK)
            continue;
        memcpy(s->tokens + s->num_tokens, s->drafts, k * sizeof *s->tokens);
        s->num_tokens += k;
        s->scheduled += k;
        s->step_drafts = k;
        *budget -= k;
        e->totals.draft_tokens += k;
    }
}

pkv_status pkv__sched_plan(pkv_engine *e, uint32_t *num_seqs_out)
{
    uint32_t budget = e->params.max_batch_tokens;
    uint32_t num_seqs = 0, num_preempted = 0;
    e->num_actions = 0;

    for (uint32_t i = 0; i < e->running.count && budget > 0;)
        i += (uint32_t)plan_running(e, i, &budget, &num_seqs, &num_preempted);

    if (num_preempted == 0) {
        /* Swapped sequences first; one whose tenant is at its quota waits
         * without holding up anybody else, one short of blocks stops every
         * admission after it. */
        int blocked = 0;
        for (uint32_t i = 0; i < e->swapped.count && budget > 0 &&
                             e->running.count < e->params.max_num_seqs;) {
            int r = plan_swap_in(e, i, &budget, &num_seqs);
            if (r < 0) {
                blocked = 1;
                break;
            }
            i += r == 0;
        }
        for (uint32_t i = 0; !blocked && i < e->waiting.count &&
                             budget > 0 &&
                             e->running.count < e->params.max_num_seqs;) {
            int r = plan_admit(e, i, &budget, &num_seqs);
            if (r < 0)
                break;
            i += r == 0;
        }
    }
    plan_drafts(e, num_seqs, &budget);
    e->batch.num_preempted = num_preempted;
    *num_seqs_out = num_seqs;
    return PKV_OK;
}
