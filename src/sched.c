/* SPDX-License-Identifier: MIT */
/*
 * The step planner: which sequences run this step, with how many rows,
 * whom to preempt, whom to admit. It reads the engine and writes only the
 * plan (plan.h), which the engine applies.
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
#include "sched_plan.h"

#include "engine.h"
#include "kv_layout.h"
#include "seqs.h"
#include "kv/prefix_groups.h"
#include "store/engine_store.h"

#include <string.h>

#define NONE UINT32_MAX

/* The plan being made, and the view of what it has done so far. */
typedef struct planner {
    pkv_engine *e;
    pkv__plan *plan;
    uint32_t available; /* blocks an allocation could take */
    uint32_t running;   /* sequences running */
    uint32_t budget;    /* rows left this step */
    uint64_t swap_used;
    uint32_t kept; /* running sequences before the current one that stay */
} planner;

/* The view's reference count of a block. */
static uint64_t view_ref(const planner *pl, uint32_t block)
{
    const pkv__plan *plan = pl->plan;
    uint64_t v = plan->refs.count ? pkv__map_get(&plan->refs, block) : 0;
    return v ? v - 1 : pl->e->kv.pool.blocks[block].ref_count;
}

/* Room in the view for n more touched blocks. */
static pkv_status view_room(planner *pl, uint32_t n)
{
    return pkv__map_reserve(&pl->plan->refs, &pl->e->alloc,
                            (uint64_t)pl->plan->refs.count + n);
}

static void view_set(planner *pl, uint32_t block, uint64_t entry)
{
    pkv__map_put(&pl->plan->refs, block, entry + 1);
}

static uint64_t view_tenant(const planner *pl, uint32_t tenant)
{
    const pkv__map *m = &pl->plan->tenants;
    uint64_t v = m->count ? pkv__map_get(m, tenant) : 0;
    return v ? v - 1 : pkv__seqs_tenant_blocks(&pl->e->seqs, tenant);
}

/* Whether `more` blocks would take the tenant past its quota. */
static int over_tenant_quota(const planner *pl, uint32_t tenant,
                             uint32_t more)
{
    uint32_t quota = pl->e->params.max_blocks_per_tenant;
    return quota != 0 && view_tenant(pl, tenant) + more > quota;
}

/* Count delta blocks against the tenant (only quotas read the counts). */
static pkv_status view_tenant_add(planner *pl, uint32_t tenant,
                                  int64_t delta)
{
    if (pl->e->params.max_blocks_per_tenant == 0 || delta == 0)
        return PKV_OK;
    pkv__map *m = &pl->plan->tenants;
    pkv_status st =
        pkv__map_reserve(m, &pl->e->alloc, (uint64_t)m->count + 1);
    if (st == PKV_OK)
        pkv__map_put(m, tenant,
                     (uint64_t)((int64_t)view_tenant(pl, tenant) + delta) +
                         1);
    return st;
}

static pkv__plan_item *add_item(planner *pl, int32_t kind, pkv__seq *seq)
{
    pkv__plan_item *it = &pl->plan->items[pl->plan->num_items++];
    pl->plan->num_of[kind]++;
    memset(it, 0, sizeof *it);
    it->kind = kind;
    it->seq = seq;
    return it;
}

/* view_ref as table.h's reference reader. */
static uint64_t view_ref_of(const void *pl, uint32_t block)
{
    return view_ref(pl, block);
}

/* Blocks a running sequence's tables take for `rows` more rows, the
 * copies of shared or cached last blocks included (table.h). */
static uint32_t blocks_needed(const planner *pl, const pkv__seq *seq,
                              uint32_t rows)
{
    return pkv__kv_needed(&pl->e->kv, &seq->kv, rows, view_ref_of, pl);
}

/* With hybrid memory, every group takes a block where one table would. */
static uint32_t per_group(const pkv_engine *e, uint64_t blocks)
{
    return (uint32_t)(blocks * e->kv.groups.num_groups);
}

/* U8: rows from `computed` on that a step may run. When the last block
 * holds rows in the staging tail, a step that filled it and went on into
 * the next block would overwrite those rows with the next block's while
 * sealing from them, so a repeated attend (pkv.h: a failed one may be
 * repeated) would seal garbage: such a step stops at the block's end. */
static uint32_t u8_room(const pkv_engine *e, uint32_t computed)
{
    uint32_t bs = e->kv.pool.block_size;
    if (!PKV_LAYOUT_QUANTIZED(e->params.kv_dtype) || computed % bs == 0)
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

/* A running sequence leaves running: its blocks go back in the view. */
static pkv_status leave_running(planner *pl, pkv__seq *seq)
{
    uint32_t held = pkv__kv_held(&seq->kv);
    pkv_status st = view_room(pl, held);
    if (st == PKV_OK)
        st = view_tenant_add(pl, seq->tenant, -(int64_t)held);
    if (st != PKV_OK)
        return st;
    for (uint32_t g = 0; g < pl->e->kv.groups.num_groups; g++) {
        const pkv__table *t = pkv__kv_table(&seq->kv, g);
        for (uint32_t i = t->first_held; i < t->num_blocks; i++) {
            uint64_t ref = view_ref(pl, t->blocks[i]) - 1;
            view_set(pl, t->blocks[i], ref);
            pl->available += ref == 0;
        }
    }
    seq->plan_out = pl->plan->number;
    pl->running--;
    return PKV_OK;
}

static int left_running(const planner *pl, const pkv__seq *seq)
{
    return seq->plan_out == pl->plan->number;
}

/* Plan the end of seq (in any list) with status. */
static pkv_status plan_end(planner *pl, pkv__seq *seq, pkv_status status)
{
    if (seq->state == PKV__SEQ_RUNNING) {
        pkv_status st = leave_running(pl, seq);
        if (st != PKV_OK)
            return st;
    }
    add_item(pl, PKV__PLAN_END, seq)->status = status;
    return PKV_OK;
}

/* Preempt a running sequence: swap it out when the mode and the host
 * budget allow, else free its blocks for a recompute. */
static pkv_status preempt(planner *pl, pkv__seq *seq)
{
    pkv_engine *e = pl->e;
    pkv_status st = leave_running(pl, seq);
    if (st != PKV_OK)
        return st;
    pkv__plan_item *it = add_item(pl, PKV__PLAN_PREEMPT, seq);
    if (e->params.preempt_mode == PKV_PREEMPT_MODE_SWAP) {
        size_t size = pkv__kv_swap_bytes(&e->kv, seq->num_computed);
        if (pl->swap_used + size <= e->params.swap_bytes) {
            pl->swap_used += size;
            it->swap = 1;
        }
    }
    return PKV_OK;
}

/* A victim among running[after + 1 ..] still running, or NONE: the most
 * recently admitted (FCFS) or the lowest priority, most recently
 * admitted. */
static uint32_t pick_victim(const planner *pl, uint32_t after,
                            int same_tenant, uint32_t tenant,
                            int spare_protected)
{
    const pkv_engine *e = pl->e;
    uint32_t best = NONE;
    for (uint32_t j = e->seqs.running.count; j-- > after + 1;) {
        const pkv__seq *v = e->seqs.running.items[j];
        if (left_running(pl, v) || (same_tenant && v->tenant != tenant) ||
            (spare_protected && v->protect))
            continue;
        if (e->params.policy != PKV_SCHED_POLICY_PRIORITY)
            return j;
        if (best == NONE || v->priority > e->seqs.running.items[best]->priority)
            best = j;
    }
    return best;
}

/* Rules 1, 2 and 4 for running[i]. */
static pkv_status plan_running(planner *pl, uint32_t i)
{
    pkv_engine *e = pl->e;
    pkv__seq *seq = e->seqs.running.items[i];
    if (left_running(pl, seq)) /* a victim of an older sequence */
        return PKV_OK;
    int oldest = pl->kept == 0;
    uint32_t bs = e->kv.pool.block_size;
    uint32_t rows = rows_wanted(e, seq, seq->num_computed, pl->budget);
    uint32_t seq_quota = e->params.max_blocks_per_seq;
    uint32_t tenant_quota = e->params.max_blocks_per_tenant;
    for (;;) {
        pkv_status st = PKV_OK;
        uint32_t after =
            pkv__blocks_for(pkv__kv_tokens(&seq->kv) + (uint64_t)rows, bs);
        uint32_t grow_by = per_group(e, after - pkv__kv_blocks(&seq->kv));
        /* The blocks it holds once grown (after, with one group). */
        uint32_t held_after = pkv__kv_held(&seq->kv) + grow_by;
        if (seq_quota != 0 && held_after > seq_quota)
            return plan_end(pl, seq, PKV_ERR_QUOTA);
        if (over_tenant_quota(pl, seq->tenant, grow_by)) {
            uint32_t v = pick_victim(pl, i, 1, seq->tenant, !oldest);
            if (v != NONE)
                st = preempt(pl, e->seqs.running.items[v]);
            else if (held_after > tenant_quota)
                return plan_end(pl, seq, PKV_ERR_QUOTA);
            else {
                pl->kept++; /* the tenant's older sequences go first */
                return PKV_OK;
            }
            if (st != PKV_OK)
                return st;
            continue;
        }
        uint32_t need = blocks_needed(pl, seq, rows);
        if (need <= pl->available) {
            /* Copied, a shared or cached last block loses this
             * sequence's reference (pkv__table_append), which a later
             * sharer's blocks_needed must see (it may write in place);
             * one that only the prefix cache holds then is available. */
            for (uint32_t g = 0; need > grow_by && g < e->kv.groups.num_groups;
                 g++) {
                const pkv__table *t = pkv__kv_table(&seq->kv, g);
                if (pkv__table_blocks_needed(t, &e->kv.pool, rows, view_ref_of,
                                             pl) == after - t->num_blocks)
                    continue;
                uint32_t last = t->blocks[t->num_blocks - 1];
                st = view_room(pl, 1);
                if (st != PKV_OK)
                    return st;
                uint64_t ref = view_ref(pl, last) - 1;
                view_set(pl, last, ref);
                pl->available += ref == 0;
            }
            st = view_tenant_add(pl, seq->tenant, grow_by);
            if (st != PKV_OK)
                return st;
            pl->available -= need;
            pl->budget -= rows;
            pl->kept++;
            add_item(pl, PKV__PLAN_RUN, seq)->rows = rows;
            return PKV_OK;
        }
        uint32_t v = pick_victim(pl, i, 0, 0, !oldest);
        if (v != NONE)
            st = preempt(pl, e->seqs.running.items[v]);
        else if (oldest) /* everyone else is gone and it still won't fit */
            return plan_end(pl, seq, PKV_ERR_NO_BLOCKS);
        else if (seq->protect) {
            pl->kept++;
            return PKV_OK;
        } else
            return preempt(pl, seq);
        if (st != PKV_OK)
            return st;
    }
}

/* The most blocks a sequence of `tokens` tokens holds at once: with
 * hybrid memory, its windowed groups hold only their windows and a step's
 * rows, so one that fits by those is not refused for blocks they give
 * back as it goes (kv.h). */
static uint32_t most_blocks(const pkv_engine *e, uint32_t tokens)
{
    uint32_t chunk = e->params.long_prefill_threshold;
    if (chunk == 0 || chunk > e->params.max_batch_tokens)
        chunk = e->params.max_batch_tokens;
    uint64_t n = pkv__kv_peak_blocks(&e->kv, tokens, chunk);
    return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

/* Whether a sequence needing `blocks` in all can never run: not with the
 * whole pool, nor within its quotas. The status it then fails with. */
static pkv_status never_fits(const pkv_engine *e, uint32_t blocks)
{
    uint32_t seq_quota = e->params.max_blocks_per_seq;
    uint32_t tenant_quota = e->params.max_blocks_per_tenant;
    if (blocks > e->kv.pool.num_blocks - 1)
        return PKV_ERR_NO_BLOCKS;
    if ((seq_quota && blocks > seq_quota) ||
        (tenant_quota && blocks > tenant_quota))
        return PKV_ERR_QUOTA;
    return PKV_OK;
}

/* Rule 3, swapped sequences: bring back swapped[index] if it fits.
 * Returns 1 planned (back or ended), 0 passed over (its tenant is at
 * quota: look further), -1 stop (blocks: nobody after it may take them);
 * *st is set on failure to plan. */
static int plan_swap_in(planner *pl, uint32_t index, pkv_status *st)
{
    pkv_engine *e = pl->e;
    pkv__seq *seq = e->seqs.swapped.items[index];
    uint32_t rows = rows_wanted(e, seq, seq->num_computed, pl->budget);
    uint32_t after =
        pkv__kv_blocks_from(&e->kv, seq->num_computed, seq->num_computed + rows);
    pkv_status never = never_fits(e, after);
    if (never != PKV_OK) {
        *st = plan_end(pl, seq, never);
        return 1;
    }
    if (over_tenant_quota(pl, seq->tenant, after))
        return 0;
    uint32_t watermark = pl->running ? e->watermark_blocks : 0;
    if (after + watermark > pl->available)
        return -1;
    *st = view_tenant_add(pl, seq->tenant, after);
    if (*st != PKV_OK)
        return 1;
    pl->available -= after;
    pl->budget -= rows;
    pl->running++;
    add_item(pl, PKV__PLAN_SWAP_IN, seq)->rows = rows;
    return 1;
}

/* Rule 3, waiting sequences: admit waiting[index] after a prefix lookup.
 * Returns as plan_swap_in. */
static int plan_admit(planner *pl, uint32_t index, pkv_status *st)
{
    pkv_engine *e = pl->e;
    pkv__plan *plan = pl->plan;
    pkv__seq *seq = e->seqs.waiting.items[index];
    uint32_t bs = e->kv.pool.block_size;
    /* Not before the store answered (or time ran out): passed over, as
     * a tenant at its quota is. */
    if (pkv__store_enabled(e->store) &&
        seq->store_state != PKV__STORE_ASKED)
        return 0;
    pkv_status never = never_fits(e, most_blocks(e, seq->num_tokens));
    if (never != PKV_OK) {
        *st = plan_end(pl, seq, never);
        return 1;
    }
    *st = pkv__plan_reserve_links(
        plan, &e->alloc, pkv__kv_lookup_room(&e->kv, seq->num_tokens));
    if (*st != PKV_OK)
        return 1;
    uint32_t *held = plan->ids + plan->num_ids;
    pkv__kv_hit hit = pkv__kv_lookup(&e->kv, &seq->kv, seq->tokens,
                                     seq->num_tokens,
                                     plan->links + plan->num_links, held);
    uint32_t hits = hit.blocks, links = hit.held;
    uint32_t revived = 0;
    for (uint32_t h = 0; h < links; h++)
        revived += view_ref(pl, held[h]) == 0;
    uint32_t computed = hits * bs;
    uint32_t rows = rows_wanted(e, seq, computed, pl->budget);
    /* Every group takes the blocks from the hits on; the hits are held
     * too. */
    uint32_t fresh =
        per_group(e, pkv__blocks_for(computed + (uint64_t)rows, bs) - hits);
    uint32_t after = fresh + links;
    uint32_t need = fresh + revived;
    if (over_tenant_quota(pl, seq->tenant, after))
        return 0;
    /* The watermark keeps blocks for running sequences to grow into; with
     * none running it would only stop the first admission forever. */
    uint32_t watermark = pl->running ? e->watermark_blocks : 0;
    if (need + watermark > pl->available)
        return -1;
    *st = view_room(pl, links);
    if (*st == PKV_OK)
        *st = view_tenant_add(pl, seq->tenant, after);
    if (*st != PKV_OK)
        return 1;
    for (uint32_t h = 0; h < links; h++)
        view_set(pl, held[h], view_ref(pl, held[h]) + 1);
    pl->available -= need;
    pl->budget -= rows;
    pl->running++;
    pkv__plan_item *it = add_item(pl, PKV__PLAN_ADMIT, seq);
    it->rows = rows;
    it->hits = hits;
    it->first_link = plan->num_links;
    it->first_id = plan->num_ids;
    plan->num_links += hits;
    plan->num_ids += links;
    return 1;
}

/* Speculative decoding: a sequence that decodes in this step with drafts
 * for it (pkv_seq_propose) runs them after its row, as many as the
 * budget, the prefill cap, its blocks and quotas allow; the rest are
 * dropped, never preempting anyone. */
static pkv_status plan_drafts(planner *pl)
{
    pkv_engine *e = pl->e;
    uint32_t cap = e->params.long_prefill_threshold;
    uint32_t seq_quota = e->params.max_blocks_per_seq;
    uint32_t bs = e->kv.pool.block_size;
    if (e->drafts_step != e->totals.steps) /* most steps: nobody proposed */
        return PKV_OK;
    for (uint32_t i = 0; i < pl->plan->num_items && pl->budget > 0; i++) {
        pkv__plan_item *it = &pl->plan->items[i];
        pkv__seq *s = it->seq;
        if (it->kind != PKV__PLAN_RUN || s->num_drafts == 0 ||
            s->drafts_step != e->totals.steps || it->rows != 1 ||
            s->num_computed + 1 != s->num_tokens)
            continue;
        uint32_t k = s->num_drafts < pl->budget ? s->num_drafts : pl->budget;
        if (cap != 0 && k + 1 > cap)
            k = cap - 1;
        /* U8: the row and its drafts stay inside the row's block. The
         * step's rows read that block from the staging tail, as plain
         * decoding's rows do; going on into the next block, every row
         * would read it sealed, its scales computed from the drafts. */
        uint32_t room =
            PKV_LAYOUT_QUANTIZED(e->params.kv_dtype) ? bs - s->num_computed % bs
                                            : UINT32_MAX;
        if (k + 1 > room)
            k = room - 1;
        /* After its row, its last block is its own: no copy. */
        uint64_t tokens = (uint64_t)pkv__kv_tokens(&s->kv) + 1;
        uint32_t held = pkv__kv_held(&s->kv) +
                        per_group(e, pkv__blocks_for(tokens, bs) -
                                         pkv__kv_blocks(&s->kv));
        uint32_t need = 0;
        for (; k > 0; k--) {
            need = per_group(e, pkv__blocks_for(tokens + k, bs) -
                                    pkv__blocks_for(tokens, bs));
            if (need <= pl->available &&
                (seq_quota == 0 || held + need <= seq_quota) &&
                !over_tenant_quota(pl, s->tenant, need))
                break;
        }
        if (k == 0)
            continue;
        pkv_status st = view_tenant_add(pl, s->tenant, need);
        if (st != PKV_OK)
            return st;
        pl->available -= need;
        pl->budget -= k;
        it->drafts = k;
    }
    return PKV_OK;
}

/* plan_running reads a chain per sequence: the sequence, its tables,
 * its last block id and its tenant's count, that block's pool entry;
 * each link is prefetched a few sequences ahead of the one being planned
 * (prefetch.h). */
static void prefetch_running(const pkv_engine *e, uint32_t i)
{
    const pkv__seq_list *running = &e->seqs.running;
    uint32_t ahead = PKV__PREFETCH_AHEAD;
    if (i + ahead < running->count)
        pkv__seq_prefetch(running->items[i + ahead]);
    if (i + ahead * 3 / 4 < running->count)
        pkv__seq_prefetch_tables(running->items[i + ahead * 3 / 4]);
    if (i + ahead / 2 < running->count) {
        const pkv__seq *seq = running->items[i + ahead / 2];
        pkv__seq_prefetch_tail(seq);
        if (e->params.max_blocks_per_tenant != 0)
            pkv__map_prefetch(&e->seqs.tenant_blocks, seq->tenant);
    }
    if (i + ahead / 4 < running->count) {
        const pkv__table *t = pkv__kv_table(&running->items[i + ahead / 4]->kv, 0);
        if (t->num_blocks > 0)
            PKV__PREFETCH(&e->kv.pool.blocks[t->blocks[t->num_blocks - 1]]);
    }
}

pkv_status pkv__sched_plan(pkv_engine *e)
{
    pkv__plan *plan = &e->step.plan;
    planner pl = {e, plan, pkv__pool_available(&e->kv.pool), e->seqs.running.count,
                  e->params.max_batch_tokens, e->kv.swap_used, 0};
    plan->number++;
    plan->num_items = 0;
    plan->num_links = 0;
    plan->num_ids = 0;
    memset(plan->num_of, 0, sizeof plan->num_of);
    plan->waiting_seen = 0;
    plan->swapped_seen = 0;
    pkv__map_clear(&plan->refs);
    pkv__map_clear(&plan->tenants);

    pkv_status st = PKV_OK;
    for (uint32_t i = 0;
         st == PKV_OK && i < e->seqs.running.count && pl.budget > 0; i++) {
        prefetch_running(e, i);
        st = plan_running(&pl, i);
    }
    if (st == PKV_OK && plan->num_of[PKV__PLAN_PREEMPT] == 0) {
        /* Swapped sequences first; one whose tenant is at its quota waits
         * without holding up anybody else, one short of blocks stops every
         * admission after it. */
        int blocked = 0;
        uint32_t max_seqs = e->params.max_num_seqs;
        uint32_t i = 0;
        for (; st == PKV_OK && i < e->seqs.swapped.count && pl.budget > 0 &&
               pl.running < max_seqs;
             i++)
            if (plan_swap_in(&pl, i, &st) < 0) {
                blocked = 1;
                break;
            }
        plan->swapped_seen = i;
        for (i = 0; st == PKV_OK && !blocked && i < e->seqs.waiting.count &&
                    pl.budget > 0 && pl.running < max_seqs;
             i++)
            if (plan_admit(&pl, i, &st) < 0)
                break;
        plan->waiting_seen = i;
    }
    if (st == PKV_OK)
        st = plan_drafts(&pl);
    plan->available = pl.available;
    return st;
}
