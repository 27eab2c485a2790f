/* SPDX-License-Identifier: MIT */
/* Reserving for a step's plan and applying it (plan.h). */
#include "engine.h"
#include "kv_layout.h"
#include "seqs.h"
#include "kv/prefix_groups.h"
#include "store/engine_store.h"

#include <assert.h>
#include <string.h>

pkv_status pkv__plan_reserve(pkv_engine *e)
{
    const pkv__plan *plan = &e->step.plan;
    uint32_t bs = e->kv.pool.block_size;
    for (uint32_t i = 0; i < plan->num_items; i++) {
        const pkv__plan_item *it = &plan->items[i];
        pkv__seq *s = it->seq;
        pkv_status st = PKV_OK;
        /* Every sequence that runs may sample at step_end, after its
         * drafts (pkv_seq_propose made room for those already). */
        if (it->kind == PKV__PLAN_RUN || it->kind == PKV__PLAN_SWAP_IN ||
            it->kind == PKV__PLAN_ADMIT)
            st = pkv__seq_reserve_tokens(s, &e->alloc, it->drafts + 1);
        if (st != PKV_OK)
            return st;
        if (it->kind == PKV__PLAN_RUN) {
            uint32_t n = pkv__blocks_for(
                (uint64_t)pkv__kv_tokens(&s->kv) + it->rows + it->drafts, bs);
            /* Most steps add no block. */
            st = pkv__kv_reserve(&e->kv, &s->kv, n, 0);
        } else if (it->kind == PKV__PLAN_SWAP_IN)
            st = pkv__kv_reserve(
                &e->kv, &s->kv,
                pkv__blocks_for((uint64_t)s->num_computed + it->rows, bs), 0);
        else if (it->kind == PKV__PLAN_ADMIT)
            st = pkv__kv_reserve(
                &e->kv, &s->kv,
                pkv__blocks_for((uint64_t)it->hits * bs + it->rows, bs),
                it->hits);
        if (st != PKV_OK)
            return st;
    }
    /* Last, since it never fails the step: a swap-out without host memory
     * becomes a recompute, as one beyond swap_bytes does. */
    for (uint32_t i = 0; plan->num_of[PKV__PLAN_PREEMPT] && i < plan->num_items;
         i++) {
        pkv__plan_item *it = &e->step.plan.items[i];
        if (it->kind == PKV__PLAN_PREEMPT && it->swap)
            it->swap = (uint8_t)pkv__kv_swap_reserve(
                &e->kv, &it->seq->kv, &e->alloc, it->seq->num_computed);
    }
    return PKV_OK;
}

static void push_action(pkv_engine *e, int32_t kind, pkv__seq *seq,
                        pkv__block_copy copy)
{
    pkv__action *a = &e->step.actions[e->step.num_actions++];
    a->kind = kind;
    a->seq = seq;
    a->copy = copy;
}

static void apply_preempt(pkv_engine *e, const pkv__plan_item *it)
{
    pkv__seq *seq = it->seq;
    e->step.preempted[e->step.batch.num_preempted++] = seq->id;
    seq->protect = 1;
    e->totals.preemptions++;
    if (it->swap) {
        pkv__seqs_tenant_add(
            &e->seqs, seq->tenant,
            -(int64_t)pkv__kv_swap_out(&e->kv, &seq->kv, seq->num_computed));
        pkv__block_copy none = {PKV__NULL_BLOCK, PKV__NULL_BLOCK};
        push_action(e, PKV__ACTION_SWAP_OUT, seq, none);
        e->totals.swap_outs++;
    }
    /* Its tail and blocks may go to others in this step: their new owners
     * write them only after the actions, swap-outs first, ran. */
    pkv__seqs_drop_kv(&e->seqs, seq);
    if (it->swap) {
        seq->state = PKV__SEQ_SWAPPED;
    } else {
        seq->num_computed = 0;
        seq->state = PKV__SEQ_WAITING;
        /* Recomputed: the store may hold what its prefix cache lost. */
        seq->store_state = PKV__STORE_NOT_ASKED;
    }
}

/* Give seq slots for `rows` more tokens, recording the copy-on-write copy
 * (f32/f16: a U8 tail lives in the staging area, so the copied block
 * needs no contents). The plan reserved the blocks and the room, so only
 * a pkv bug makes it fail (a debug build traps); the sequence then fails
 * rather than run without slots. Returns whether it grew. */
static int grow(pkv_engine *e, pkv__seq *seq, uint32_t rows)
{
    pkv__block_copy copies[PKV__MAX_GROUPS];
    uint32_t before = pkv__kv_held(&seq->kv);
    pkv_status st = pkv__kv_append(&e->kv, &seq->kv, rows, copies);
    assert(st == PKV_OK);
    pkv__seqs_count_blocks(&e->seqs, seq, before);
    if (st != PKV_OK) {
        pkv__seqs_end(&e->seqs, seq, PKV_FINISH_REASON_FAILED,
                              PKV_ERR_INTERNAL);
        return 0;
    }
    for (uint32_t g = 0; g < e->kv.groups.num_groups; g++)
        if (copies[g].dst != PKV__NULL_BLOCK &&
            !PKV_LAYOUT_QUANTIZED(e->params.kv_dtype))
            push_action(e, PKV__ACTION_COPY_BLOCK, seq, copies[g]);
    return 1;
}

/* A swapped sequence's tables for its computed tokens and `rows` more
 * (reserved: see grow), each windowed group's from the first block its
 * next row sees, as the swap-out left them. */
static int swap_in_tables(pkv_engine *e, pkv__seq *seq, uint32_t rows)
{
    pkv_status st = pkv__kv_swap_in(&e->kv, &seq->kv, seq->num_computed,
                                    seq->num_computed + rows);
    assert(st == PKV_OK);
    pkv__seqs_count_blocks(&e->seqs, seq, 0);
    if (st != PKV_OK)
        pkv__seqs_end(&e->seqs, seq, PKV_FINISH_REASON_FAILED,
                              PKV_ERR_INTERNAL);
    return st == PKV_OK;
}

/* Adopt an admission's prefix hits (reserved: see grow). */
static void adopt(pkv_engine *e, const pkv__plan_item *it)
{
    const pkv__plan *plan = &e->step.plan;
    pkv__seq *seq = it->seq;
    pkv_status st = pkv__kv_adopt(&e->kv, &seq->kv,
                                  plan->links + it->first_link,
                                  plan->ids + it->first_id, it->hits);
    pkv__seqs_count_blocks(&e->seqs, seq, 0);
    assert(st == PKV_OK);
    if (st != PKV_OK)
        pkv__seqs_end(&e->seqs, seq, PKV_FINISH_REASON_FAILED,
                              PKV_ERR_INTERNAL);
}

/* A swapped or waiting sequence joins running. */
static void start_running(pkv_engine *e, pkv__seq *seq)
{
    pkv__kv_take_stage(&e->kv, &seq->kv);
    pkv__seq_list_insert(&e->seqs.running, e->seqs.running.count, seq);
}

void pkv__plan_apply(pkv_engine *e, uint32_t *num_seqs_out)
{
    const pkv__plan *plan = &e->step.plan;
    e->step.num_actions = 0;
    e->step.batch.num_preempted = 0;

    /* Releases first (the view counted their blocks as available), and
     * the sequences that move get their new states. Most steps have
     * none. */
    const uint32_t *n = plan->num_of;
    uint32_t moves = n[PKV__PLAN_PREEMPT] + n[PKV__PLAN_END] +
                     n[PKV__PLAN_SWAP_IN] + n[PKV__PLAN_ADMIT];
    for (uint32_t i = 0; moves > 0 && i < plan->num_items; i++) {
        const pkv__plan_item *it = &plan->items[i];
        if (it->kind == PKV__PLAN_PREEMPT)
            apply_preempt(e, it);
        else if (it->kind == PKV__PLAN_END)
            pkv__seqs_end(&e->seqs, it->seq, PKV_FINISH_REASON_FAILED,
                                  it->status);
        else if (it->kind != PKV__PLAN_RUN)
            it->seq->state = PKV__SEQ_RUNNING;
    }
    /* The lists keep the sequences whose state did not change. The
     * planner looked only at the fronts of waiting and swapped. */
    if (n[PKV__PLAN_PREEMPT] + n[PKV__PLAN_END] > 0)
        pkv__seq_list_keep_front(&e->seqs.running, e->seqs.running.count,
                                 PKV__SEQ_RUNNING);
    pkv__seq_list_keep_front(&e->seqs.waiting, plan->waiting_seen,
                             PKV__SEQ_WAITING);
    pkv__seq_list_keep_front(&e->seqs.swapped, plan->swapped_seen,
                             PKV__SEQ_SWAPPED);
    e->seqs.unswept = 0; /* every sequence ended here was in those */
    for (uint32_t i = 0; n[PKV__PLAN_PREEMPT] > 0 && i < plan->num_items; i++) {
        const pkv__plan_item *it = &plan->items[i];
        if (it->kind == PKV__PLAN_PREEMPT)
            pkv__seqs_enqueue(&e->seqs,
                              it->swap ? &e->seqs.swapped : &e->seqs.waiting,
                              it->seq);
    }

    /* The prefix blocks admissions hit, before any allocation could evict
     * one of them. */
    for (uint32_t i = 0; n[PKV__PLAN_ADMIT] > 0 && i < plan->num_items; i++) {
        const pkv__plan_item *it = &plan->items[i];
        if (it->kind == PKV__PLAN_ADMIT && it->hits > 0)
            adopt(e, it);
    }

    /* Allocations, in the order decided: the step's sequences. */
    uint32_t num_seqs = 0;
    for (uint32_t i = 0; i < plan->num_items; i++) {
        const pkv__plan_item *it = &plan->items[i];
        pkv__seq *s = it->seq;
        if (s->state == PKV__SEQ_FINISHED) /* ended, or failed to adopt */
            continue;
        if (it->kind == PKV__PLAN_RUN) {
            if (!grow(e, s, it->rows))
                continue;
            if (it->drafts > 0) { /* they join its tokens for the step */
                if (!grow(e, s, it->drafts))
                    continue;
                memcpy(s->tokens + s->num_tokens, s->drafts,
                       it->drafts * sizeof *s->tokens);
                s->num_tokens += it->drafts;
                s->step_drafts = it->drafts;
                e->totals.draft_tokens += it->drafts;
            }
        } else if (it->kind == PKV__PLAN_SWAP_IN) {
            if (!swap_in_tables(e, s, it->rows))
                continue;
            start_running(e, s);
            pkv__block_copy none = {PKV__NULL_BLOCK, PKV__NULL_BLOCK};
            push_action(e, PKV__ACTION_SWAP_IN, s, none);
            e->totals.swap_ins++;
        } else if (it->kind == PKV__PLAN_ADMIT) {
            e->totals.prefix_query_tokens += s->num_tokens;
            if (!grow(e, s, it->rows))
                continue;
            s->num_computed = it->hits * e->kv.pool.block_size;
            e->totals.prefix_hit_tokens += s->num_computed;
            start_running(e, s);
        } else {
            continue;
        }
        s->scheduled = it->rows + it->drafts;
        e->step.step_seqs[num_seqs++] = s;
    }
    /* The view was exact, unless a pkv bug failed a grow or an adopt. */
    assert(e->seqs.unswept != 0 ||
           pkv__pool_available(&e->kv.pool) == plan->available);
    pkv__seqs_sweep_ended(&e->seqs); /* only after a pkv bug (grow, adopt) */
    *num_seqs_out = num_seqs;
}
