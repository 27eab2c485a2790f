/* SPDX-License-Identifier: MIT */
/* Reserving for a step's plan and applying it (plan.h). */
#include "plan.h"
#include "seqs.h"
#include "step_state.h"
#include "store/engine_store.h"

#include <assert.h>
#include <string.h>

pkv_status pkv__plan_reserve(pkv__plan *plan, pkv__seqs *seqs)
{
    pkv__kv *kv = seqs->kv;
    uint32_t bs = pkv__kv_block_size(kv);
    for (uint32_t i = 0; i < plan->num_items; i++) {
        const pkv__plan_item *it = &plan->items[i];
        pkv__seq *s = it->seq;
        pkv_status st = PKV_OK;
        /* Every sequence that runs may sample at step_end, after its
         * drafts (pkv_seq_propose made room for those already). */
        if (it->kind == PKV__PLAN_RUN || it->kind == PKV__PLAN_SWAP_IN ||
            it->kind == PKV__PLAN_ADMIT)
            st = pkv__seq_reserve_tokens(s, &seqs->alloc, it->drafts + 1);
        if (st != PKV_OK)
            return st;
        if (it->kind == PKV__PLAN_RUN) {
            uint32_t n = pkv__blocks_for(
                (uint64_t)pkv__kv_tokens(&s->kv) + it->rows + it->drafts, bs);
            /* Most steps add no block. */
            st = pkv__kv_reserve(kv, &s->kv, n, 0);
        } else if (it->kind == PKV__PLAN_SWAP_IN)
            st = pkv__kv_reserve(
                kv, &s->kv,
                pkv__blocks_for((uint64_t)s->num_computed + it->rows, bs), 0);
        else if (it->kind == PKV__PLAN_ADMIT)
            st = pkv__kv_reserve(
                kv, &s->kv,
                pkv__blocks_for((uint64_t)it->hits * bs + it->rows, bs),
                it->hits);
        if (st != PKV_OK)
            return st;
    }
    /* Last, since it never fails the step: a swap-out without host memory
     * becomes a recompute, as one beyond swap_bytes does. */
    for (uint32_t i = 0; plan->num_of[PKV__PLAN_PREEMPT] && i < plan->num_items;
         i++) {
        pkv__plan_item *it = &plan->items[i];
        if (it->kind == PKV__PLAN_PREEMPT && it->swap)
            it->swap = (uint8_t)pkv__kv_swap_reserve(
                kv, &it->seq->kv, &seqs->alloc, it->seq->num_computed);
    }
    return PKV_OK;
}

static void push_action(pkv__step_state *step, int32_t kind, pkv__seq *seq,
                        pkv__block_copy copy)
{
    pkv__action *a = &step->actions[step->num_actions++];
    a->kind = kind;
    a->seq = seq;
    a->copy = copy;
}

static const pkv__block_copy no_copy = {PKV__NULL_BLOCK, PKV__NULL_BLOCK};

static void apply_preempt(pkv__seqs *seqs, pkv__step_state *step,
                          const pkv__plan_item *it)
{
    pkv__seq *seq = it->seq;
    step->preempted[step->batch.num_preempted++] = seq->id;
    seq->protect = 1;
    seqs->totals->preemptions++;
    if (it->swap) {
        pkv__seqs_tenant_add(
            seqs, seq->tenant,
            -(int64_t)pkv__kv_swap_out(seqs->kv, &seq->kv,
                                       seq->num_computed));
        push_action(step, PKV__ACTION_SWAP_OUT, seq, no_copy);
        seqs->totals->swap_outs++;
    }
    /* Its tail and blocks may go to others in this step: their new owners
     * write them only after the actions, swap-outs first, ran. */
    pkv__seqs_drop_kv(seqs, seq);
    if (it->swap) {
        seq->state = PKV__SEQ_SWAPPED;
    } else {
        seq->num_computed = 0;
        seq->state = PKV__SEQ_WAITING;
        /* Recomputed: the store may hold what its prefix cache lost. */
        seq->store.state = PKV__STORE_NOT_ASKED;
    }
}

/* Give seq slots for `rows` more tokens, recording the copy-on-write
 * copies the backend makes. The plan reserved the blocks and the room,
 * so only a pkv bug makes it fail (a debug build traps); the sequence
 * then fails rather than run without slots. Returns whether it grew. */
static int grow(pkv__seqs *seqs, pkv__step_state *step, pkv__seq *seq,
                uint32_t rows)
{
    pkv__block_copy copies[PKV__MAX_GROUPS];
    uint32_t before = pkv__kv_held(seqs->kv, &seq->kv);
    pkv_status st = pkv__kv_append(seqs->kv, &seq->kv, rows, copies);
    assert(st == PKV_OK);
    pkv__seqs_count_blocks(seqs, seq, before);
    if (st != PKV_OK) {
        pkv__seqs_end(seqs, seq, PKV_FINISH_REASON_FAILED, PKV_ERR_INTERNAL);
        return 0;
    }
    for (uint32_t g = 0; g < pkv__kv_num_groups(seqs->kv); g++)
        if (copies[g].dst != PKV__NULL_BLOCK)
            push_action(step, PKV__ACTION_COPY_BLOCK, seq, copies[g]);
    return 1;
}

/* A swapped sequence's tables for its computed tokens and `rows` more
 * (reserved: see grow), each windowed group's from the first block its
 * next row sees, as the swap-out left them. */
static int swap_in_tables(pkv__seqs *seqs, pkv__seq *seq, uint32_t rows)
{
    pkv_status st = pkv__kv_swap_in(seqs->kv, &seq->kv, seq->num_computed,
                                    seq->num_computed + rows);
    assert(st == PKV_OK);
    pkv__seqs_count_blocks(seqs, seq, 0);
    if (st != PKV_OK)
        pkv__seqs_end(seqs, seq, PKV_FINISH_REASON_FAILED, PKV_ERR_INTERNAL);
    return st == PKV_OK;
}

/* Adopt an admission's prefix hits (reserved: see grow). */
static void adopt(const pkv__plan *plan, pkv__seqs *seqs,
                  const pkv__plan_item *it)
{
    pkv__seq *seq = it->seq;
    pkv_status st = pkv__kv_adopt(seqs->kv, &seq->kv,
                                  plan->links + it->first_link,
                                  plan->ids + it->first_id, it->hits);
    pkv__seqs_count_blocks(seqs, seq, 0);
    assert(st == PKV_OK);
    if (st != PKV_OK)
        pkv__seqs_end(seqs, seq, PKV_FINISH_REASON_FAILED, PKV_ERR_INTERNAL);
}

/* A swapped or waiting sequence joins running. */
static void start_running(pkv__seqs *seqs, pkv__seq *seq)
{
    pkv__kv_take_stage(seqs->kv, &seq->kv);
    pkv__seq_list_insert(&seqs->running, seqs->running.count, seq);
}

/* Releases first (the view counted their blocks as available), and the
 * sequences that move get their new states; the lists keep the sequences
 * whose state did not change. Most steps have none. */
static void apply_moves(const pkv__plan *plan, pkv__seqs *seqs,
                        pkv__step_state *step)
{
    const uint32_t *n = plan->num_of;
    uint32_t moves = n[PKV__PLAN_PREEMPT] + n[PKV__PLAN_END] +
                     n[PKV__PLAN_SWAP_IN] + n[PKV__PLAN_ADMIT];
    for (uint32_t i = 0; moves > 0 && i < plan->num_items; i++) {
        const pkv__plan_item *it = &plan->items[i];
        if (it->kind == PKV__PLAN_PREEMPT)
            apply_preempt(seqs, step, it);
        else if (it->kind == PKV__PLAN_END)
            pkv__seqs_end(seqs, it->seq, PKV_FINISH_REASON_FAILED,
                          it->status);
        else if (it->kind != PKV__PLAN_RUN)
            it->seq->state = PKV__SEQ_RUNNING;
    }
    /* The planner looked only at the fronts of waiting and swapped. */
    if (n[PKV__PLAN_PREEMPT] + n[PKV__PLAN_END] > 0)
        pkv__seq_list_keep_front(&seqs->running, seqs->running.count,
                                 PKV__SEQ_RUNNING);
    pkv__seq_list_keep_front(&seqs->waiting, plan->waiting_seen,
                             PKV__SEQ_WAITING);
    pkv__seq_list_keep_front(&seqs->swapped, plan->swapped_seen,
                             PKV__SEQ_SWAPPED);
    seqs->unswept = 0; /* every sequence ended here was in those */
    for (uint32_t i = 0; n[PKV__PLAN_PREEMPT] > 0 && i < plan->num_items; i++) {
        const pkv__plan_item *it = &plan->items[i];
        if (it->kind == PKV__PLAN_PREEMPT)
            pkv__seqs_enqueue(seqs, it->swap ? &seqs->swapped : &seqs->waiting,
                              it->seq);
    }
}

void pkv__plan_apply(const pkv__plan *plan, pkv__seqs *seqs,
                     pkv__step_state *step, uint32_t *num_seqs_out)
{
    pkv_engine_stats *totals = seqs->totals;
    step->num_actions = 0;
    step->batch.num_preempted = 0;
    apply_moves(plan, seqs, step);

    /* The prefix blocks admissions hit, before any allocation could evict
     * one of them. */
    for (uint32_t i = 0;
         plan->num_of[PKV__PLAN_ADMIT] > 0 && i < plan->num_items; i++) {
        const pkv__plan_item *it = &plan->items[i];
        if (it->kind == PKV__PLAN_ADMIT && it->hits > 0)
            adopt(plan, seqs, it);
    }

    /* Allocations, in the order decided: the step's sequences. */
    uint32_t num_seqs = 0;
    for (uint32_t i = 0; i < plan->num_items; i++) {
        const pkv__plan_item *it = &plan->items[i];
        pkv__seq *s = it->seq;
        if (s->state == PKV__SEQ_FINISHED) /* ended, or failed to adopt */
            continue;
        if (it->kind == PKV__PLAN_RUN) {
            if (!grow(seqs, step, s, it->rows))
                continue;
            if (it->drafts > 0) { /* they join its tokens for the step */
                if (!grow(seqs, step, s, it->drafts))
                    continue;
                memcpy(s->tokens + s->num_tokens, s->drafts.ids,
                       it->drafts * sizeof *s->tokens);
                s->num_tokens += it->drafts;
                s->step.drafts = it->drafts;
                totals->draft_tokens += it->drafts;
            }
        } else if (it->kind == PKV__PLAN_SWAP_IN) {
            if (!swap_in_tables(seqs, s, it->rows))
                continue;
            start_running(seqs, s);
            push_action(step, PKV__ACTION_SWAP_IN, s, no_copy);
            totals->swap_ins++;
        } else if (it->kind == PKV__PLAN_ADMIT) {
            totals->prefix_query_tokens += s->num_tokens;
            if (!grow(seqs, step, s, it->rows))
                continue;
            s->num_computed = it->hits * pkv__kv_block_size(seqs->kv);
            totals->prefix_hit_tokens += s->num_computed;
            start_running(seqs, s);
        } else {
            continue;
        }
        s->step.rows = it->rows + it->drafts;
        step->step_seqs[num_seqs++] = s;
    }
    /* The view was exact, unless a pkv bug failed a grow or an adopt. */
    assert(seqs->unswept != 0 ||
           pkv__kv_available(seqs->kv) == plan->available);
    pkv__seqs_sweep_ended(seqs); /* only after a pkv bug (grow, adopt) */
    *num_seqs_out = num_seqs;
}
