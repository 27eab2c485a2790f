/* SPDX-License-Identifier: MIT */
/*
 * The step planner: which sequences run this step, with how many rows,
 * whom to preempt, whom to admit. It reads const views of the KV-cache
 * manager and of the sequences (planner.h's input) and writes only the
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
#include "planner.h"

#include "kv_layout.h"
#include "store/engine_store.h"

#include <string.h>

#define NONE UINT32_MAX

/* The plan being made, and the view of what it has done so far. */
typedef struct planner {
    const pkv__plan_input *in;
    const pkv__kv *kv;
    const pkv__seqs *seqs;
    const pkv_engine_params *p;
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
    return v ? v - 1 : pkv__kv_refs(pl->kv, block);
}

/* Room in the view for n more touched blocks. */
static pkv_status view_room(planner *pl, uint32_t n)
{
    return pkv__map_reserve(&pl->plan->refs, pl->in->alloc,
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
    return v ? v - 1 : pkv__seqs_tenant_blocks(pl->seqs, tenant);
}

/* Whether `more` blocks would take the tenant past its quota. */
static int over_tenant_quota(const planner *pl, uint32_t tenant,
                             uint32_t more)
{
    uint32_t quota = pl->p->max_blocks_per_tenant;
    return quota != 0 && view_tenant(pl, tenant) + more > quota;
}

/* Count delta blocks against the tenant (only quotas read the counts). */
static pkv_status view_tenant_add(planner *pl, uint32_t tenant,
                                  int64_t delta)
{
    if (pl->p->max_blocks_per_tenant == 0 || delta == 0)
        return PKV_OK;
    pkv__map *m = &pl->plan->tenants;
    pkv_status st =
        pkv__map_reserve(m, pl->in->alloc, (uint64_t)m->count + 1);
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
    return pkv__kv_needed(pl->kv, &seq->kv, rows, view_ref_of, pl);
}

/* With hybrid memory, every group takes a block where one table would. */
static uint32_t per_group(const planner *pl, uint64_t blocks)
{
    return (uint32_t)(blocks * pkv__kv_num_groups(pl->kv));
}

/* U8: rows from `computed` on that a step may run. When the last block
 * holds rows in the staging tail, a step that filled it and went on into
 * the next block would overwrite those rows with the next block's while
 * freezing from them, so a repeated attend (pkv.h: a failed one may be
 * repeated) would freeze garbage: such a step stops at the block's end. */
static uint32_t u8_room(const planner *pl, uint32_t computed)
{
    uint32_t bs = pkv__kv_block_size(pl->kv);
    if (!PKV_LAYOUT_QUANTIZED(pl->p->kv_dtype) || computed % bs == 0)
        return UINT32_MAX;
    return bs - computed % bs;
}

/* Rows a scheduled sequence wants: its decode row, or its next prompt
 * chunk (prompt, or the whole history after a recompute preemption). */
static uint32_t rows_wanted(const planner *pl, const pkv__seq *seq,
                            uint32_t computed, uint32_t budget)
{
    uint32_t n = seq->num_tokens - computed;
    uint32_t cap = pl->p->long_prefill_threshold;
    if (n > 1 && cap != 0 && n > cap)
        n = cap;
    uint32_t room = u8_room(pl, computed);
    if (n > room)
        n = room;
    return n < budget ? n : budget;
}

/* A running sequence leaves running: its blocks go back in the view. */
static pkv_status leave_running(planner *pl, pkv__seq *seq)
{
    uint32_t held = pkv__kv_held(pl->kv, &seq->kv);
    pkv__map *left = &pl->plan->left;
    pkv_status st = view_room(pl, held);
    if (st == PKV_OK)
        st = view_tenant_add(pl, seq->tenant, -(int64_t)held);
    if (st == PKV_OK)
        st = pkv__map_reserve(left, pl->in->alloc, (uint64_t)left->count + 1);
    if (st != PKV_OK)
        return st;
    for (uint32_t g = 0; g < pkv__kv_num_groups(pl->kv); g++) {
        const pkv__table *t = pkv__kv_table(&seq->kv, g);
        for (uint32_t i = t->first_held; i < t->num_blocks; i++) {
            uint64_t ref = view_ref(pl, t->blocks[i]) - 1;
            view_set(pl, t->blocks[i], ref);
            pl->available += ref == 0;
        }
    }
    pkv__map_put(left, seq->id, 1);
    pl->running--;
    return PKV_OK;
}

static int left_running(const planner *pl, const pkv__seq *seq)
{
    const pkv__map *left = &pl->plan->left;
    return left->count != 0 && pkv__map_get(left, seq->id) != 0;
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
    pkv_status st = leave_running(pl, seq);
    if (st != PKV_OK)
        return st;
    pkv__plan_item *it = add_item(pl, PKV__PLAN_PREEMPT, seq);
    if (pl->p->preempt_mode == PKV_PREEMPT_MODE_SWAP) {
        size_t size = pkv__kv_swap_bytes(pl->kv, seq->num_computed);
        if (pl->swap_used + size <= pl->p->swap_bytes) {
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
    const pkv__seq_list *running = &pl->seqs->running;
    uint32_t best = NONE;
    for (uint32_t j = running->count; j-- > after + 1;) {
        const pkv__seq *v = running->items[j];
        if (left_running(pl, v) || (same_tenant && v->tenant != tenant) ||
            (spare_protected && v->protect))
            continue;
        if (pl->p->policy != PKV_SCHED_POLICY_PRIORITY)
            return j;
        if (best == NONE ||
            v->order.priority > running->items[best]->order.priority)
            best = j;
    }
    return best;
}

/* Rules 1, 2 and 4 for running[i]. */
static pkv_status plan_running(planner *pl, uint32_t i)
{
    const pkv__seq_list *running = &pl->seqs->running;
    pkv__seq *seq = running->items[i];
    if (left_running(pl, seq)) /* a victim of an older sequence */
        return PKV_OK;
    int oldest = pl->kept == 0;
    uint32_t bs = pkv__kv_block_size(pl->kv);
    uint32_t rows = rows_wanted(pl, seq, seq->num_computed, pl->budget);
    uint32_t seq_quota = pl->p->max_blocks_per_seq;
    uint32_t tenant_quota = pl->p->max_blocks_per_tenant;
    for (;;) {
        pkv_status st = PKV_OK;
        uint32_t after =
            pkv__blocks_for(pkv__kv_tokens(&seq->kv) + (uint64_t)rows, bs);
        uint32_t grow_by = per_group(pl, after - pkv__kv_blocks(&seq->kv));
        /* The blocks it holds once grown (after, with one group). */
        uint32_t held_after = pkv__kv_held(pl->kv, &seq->kv) + grow_by;
        if (seq_quota != 0 && held_after > seq_quota)
            return plan_end(pl, seq, PKV_ERR_QUOTA);
        if (over_tenant_quota(pl, seq->tenant, grow_by)) {
            uint32_t v = pick_victim(pl, i, 1, seq->tenant, !oldest);
            if (v != NONE)
                st = preempt(pl, running->items[v]);
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
            uint32_t copied[PKV__MAX_GROUPS];
            uint32_t n = need > grow_by
                             ? pkv__kv_copied(pl->kv, &seq->kv, rows,
                                              view_ref_of, pl, copied)
                             : 0;
            st = n > 0 ? view_room(pl, n) : PKV_OK;
            if (st != PKV_OK)
                return st;
            for (uint32_t k = 0; k < n; k++) {
                uint64_t ref = view_ref(pl, copied[k]) - 1;
                view_set(pl, copied[k], ref);
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
            st = preempt(pl, running->items[v]);
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
static uint32_t most_blocks(const planner *pl, uint32_t tokens)
{
    uint32_t chunk = pl->p->long_prefill_threshold;
    if (chunk == 0 || chunk > pl->p->max_batch_tokens)
        chunk = pl->p->max_batch_tokens;
    uint64_t n = pkv__kv_peak_blocks(pl->kv, tokens, chunk);
    return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

/* Whether a sequence needing `blocks` in all can never run: not with the
 * whole pool, nor within its quotas. The status it then fails with. */
static pkv_status never_fits(const planner *pl, uint32_t blocks)
{
    uint32_t seq_quota = pl->p->max_blocks_per_seq;
    uint32_t tenant_quota = pl->p->max_blocks_per_tenant;
    if (blocks > pkv__kv_num_blocks(pl->kv) - 1)
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
    pkv__seq *seq = pl->seqs->swapped.items[index];
    uint32_t rows = rows_wanted(pl, seq, seq->num_computed, pl->budget);
    uint32_t after = pkv__kv_blocks_from(pl->kv, seq->num_computed,
                                         seq->num_computed + rows);
    pkv_status never = never_fits(pl, after);
    if (never != PKV_OK) {
        *st = plan_end(pl, seq, never);
        return 1;
    }
    if (over_tenant_quota(pl, seq->tenant, after))
        return 0;
    uint32_t watermark = pl->running ? pl->in->watermark_blocks : 0;
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
    pkv__plan *plan = pl->plan;
    pkv__seq *seq = pl->seqs->waiting.items[index];
    uint32_t bs = pkv__kv_block_size(pl->kv);
    /* Not before the store answered (or time ran out): passed over, as
     * a tenant at its quota is. */
    if (pl->in->store &&
        seq->store.state != PKV__STORE_ASKED)
        return 0;
    pkv_status never = never_fits(pl, most_blocks(pl, seq->num_tokens));
    if (never != PKV_OK) {
        *st = plan_end(pl, seq, never);
        return 1;
    }
    *st = pkv__plan_reserve_links(
        plan, pl->in->alloc, pkv__kv_lookup_room(pl->kv, seq->num_tokens));
    if (*st != PKV_OK)
        return 1;
    uint32_t *held = plan->ids + plan->num_ids;
    pkv__kv_hit hit = pkv__kv_lookup(pl->kv, &seq->kv, seq->tokens,
                                     seq->num_tokens,
                                     plan->links + plan->num_links, held);
    uint32_t hits = hit.blocks, links = hit.held;
    uint32_t revived = 0;
    for (uint32_t h = 0; h < links; h++)
        revived += view_ref(pl, held[h]) == 0;
    uint32_t computed = hits * bs;
    uint32_t rows = rows_wanted(pl, seq, computed, pl->budget);
    /* Every group takes the blocks from the hits on; the hits are held
     * too. */
    uint32_t fresh =
        per_group(pl, pkv__blocks_for(computed + (uint64_t)rows, bs) - hits);
    uint32_t after = fresh + links;
    uint32_t need = fresh + revived;
    if (over_tenant_quota(pl, seq->tenant, after))
        return 0;
    /* The watermark keeps blocks for running sequences to grow into; with
     * none running it would only stop the first admission forever. */
    uint32_t watermark = pl->running ? pl->in->watermark_blocks : 0;
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
    uint32_t cap = pl->p->long_prefill_threshold;
    uint32_t seq_quota = pl->p->max_blocks_per_seq;
    uint32_t bs = pkv__kv_block_size(pl->kv);
    if (pl->in->drafts_step != pl->in->step) /* most steps: nobody proposed */
        return PKV_OK;
    for (uint32_t i = 0; i < pl->plan->num_items && pl->budget > 0; i++) {
        pkv__plan_item *it = &pl->plan->items[i];
        pkv__seq *s = it->seq;
        if (it->kind != PKV__PLAN_RUN || s->drafts.count == 0 ||
            s->drafts.step != pl->in->step || it->rows != 1 ||
            s->num_computed + 1 != s->num_tokens)
            continue;
        uint32_t k =
            s->drafts.count < pl->budget ? s->drafts.count : pl->budget;
        if (cap != 0 && k + 1 > cap)
            k = cap - 1;
        /* U8: the row and its drafts stay inside the row's block. The
         * step's rows read that block from the staging tail, as plain
         * decoding's rows do; going on into the next block, every row
         * would read it frozen, its scales computed from the drafts. */
        uint32_t room =
            PKV_LAYOUT_QUANTIZED(pl->p->kv_dtype) ? bs - s->num_computed % bs
                                            : UINT32_MAX;
        if (k + 1 > room)
            k = room - 1;
        /* After its row, its last block is its own: no copy. */
        uint64_t tokens = (uint64_t)pkv__kv_tokens(&s->kv) + 1;
        uint32_t held = pkv__kv_held(pl->kv, &s->kv) +
                        per_group(pl, pkv__blocks_for(tokens, bs) -
                                         pkv__kv_blocks(&s->kv));
        uint32_t need = 0;
        for (; k > 0; k--) {
            need = per_group(pl, pkv__blocks_for(tokens + k, bs) -
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
static void prefetch_running(const planner *pl, uint32_t i)
{
    const pkv__seq_list *running = &pl->seqs->running;
    uint32_t ahead = PKV__PREFETCH_AHEAD;
    if (i + ahead < running->count)
        pkv__seq_prefetch(running->items[i + ahead]);
    if (i + ahead * 3 / 4 < running->count)
        pkv__seq_prefetch_tables(running->items[i + ahead * 3 / 4]);
    if (i + ahead / 2 < running->count) {
        const pkv__seq *seq = running->items[i + ahead / 2];
        pkv__seq_prefetch_tail(seq);
        if (pl->p->max_blocks_per_tenant != 0)
            pkv__map_prefetch(&pl->seqs->tenant_blocks, seq->tenant);
    }
    if (i + ahead / 4 < running->count)
        pkv__kv_prefetch_tail(pl->kv, &running->items[i + ahead / 4]->kv);
}

pkv_status pkv__planner_run(pkv__plan *plan, const pkv__plan_input *in)
{
    const pkv__seqs *seqs = in->seqs;
    planner pl = {in,
                  in->kv,
                  seqs,
                  in->params,
                  plan,
                  pkv__kv_available(in->kv),
                  seqs->running.count,
                  in->params->max_batch_tokens,
                  pkv__kv_swap_used(in->kv),
                  0};
    plan->number++;
    plan->num_items = 0;
    plan->num_links = 0;
    plan->num_ids = 0;
    memset(plan->num_of, 0, sizeof plan->num_of);
    plan->waiting_seen = 0;
    plan->swapped_seen = 0;
    pkv__map_clear(&plan->refs);
    pkv__map_clear(&plan->tenants);
    pkv__map_clear(&plan->left);

    pkv_status st = PKV_OK;
    for (uint32_t i = 0;
         st == PKV_OK && i < seqs->running.count && pl.budget > 0; i++) {
        prefetch_running(&pl, i);
        st = plan_running(&pl, i);
    }
    if (st == PKV_OK && plan->num_of[PKV__PLAN_PREEMPT] == 0) {
        /* Swapped sequences first; one whose tenant is at its quota waits
         * without holding up anybody else, one short of blocks stops every
         * admission after it. */
        int blocked = 0;
        uint32_t max_seqs = in->params->max_num_seqs;
        uint32_t i = 0;
        for (; st == PKV_OK && i < seqs->swapped.count && pl.budget > 0 &&
               pl.running < max_seqs;
             i++)
            if (plan_swap_in(&pl, i, &st) < 0) {
                blocked = 1;
                break;
            }
        plan->swapped_seen = i;
        for (i = 0; st == PKV_OK && !blocked && i < seqs->waiting.count &&
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
