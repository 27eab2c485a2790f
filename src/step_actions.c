/* SPDX-License-Identifier: MIT */
/* The step's device actions (step_actions.h): swap-outs, copy-on-write
 * copies and swap-ins run in order before the step's first layer, and the
 * step's rows undone when the backend refuses the step. */
#include "step_actions.h"

#include "store/engine_store.h"

#include <string.h>

/* Take seq out of the step's plan (step_seqs[0 .. *num_seqs)). */
static void unschedule(pkv__step_state *step, pkv__seq *seq,
                       uint32_t *num_seqs)
{
    for (uint32_t i = 0; i < *num_seqs; i++)
        if (step->step_seqs[i] == seq) {
            memmove(step->step_seqs + i, step->step_seqs + i + 1,
                    (*num_seqs - i - 1) * sizeof *step->step_seqs);
            (*num_seqs)--;
            break;
        }
    seq->step.rows = 0;
    seq->num_tokens -= seq->step.drafts; /* drafts were for this step */
    seq->step.drafts = 0;
}

/* A device action failed: undo what the plan did for its sequence, so
 * that nothing is lost and the sequence runs again later.
 *   swap-out: its blocks are gone but its tokens are not: recompute;
 *   copy-on-write: its private block is garbage: recompute;
 *   swap-in: its host copy is intact: back to the swapped list. */
static void action_failed(pkv__step_state *step, pkv__seqs *seqs,
                          const pkv__engine_message *log,
                          const pkv__action *a, uint32_t *num_seqs,
                          pkv_status st)
{
    pkv__seq *s = a->seq;
    pkv__engine_log(log, PKV_LOG_LEVEL_WARN,
                    "seq %llu: device action %d failed (%s: %s); %s",
                    (unsigned long long)s->id, (int)a->kind,
                    pkv_status_name(st), pkv_last_error(),
                    a->kind == PKV__ACTION_SWAP_IN ? "it stays swapped out"
                                                   : "it will be recomputed");
    if (a->kind == PKV__ACTION_SWAP_OUT) {
        pkv__seq_list_remove(&seqs->swapped, s);
        pkv__kv_drop_swap(seqs->kv, &s->kv, &seqs->alloc);
        seqs->totals->swap_outs--;
    } else {
        unschedule(step, s, num_seqs);
        pkv__seq_list_remove(&seqs->running, s);
        pkv__seqs_drop_kv(seqs, s);
        if (a->kind == PKV__ACTION_SWAP_IN) {
            seqs->totals->swap_ins--;
            s->state = PKV__SEQ_SWAPPED;
            pkv__seqs_enqueue(seqs, &seqs->swapped, s);
            return;
        }
        step->preempted[step->batch.num_preempted++] = s->id;
        seqs->totals->preemptions++;
    }
    pkv__seqs_recompute(seqs, s);
}

void pkv__step_run_actions(pkv__step_state *step, pkv__seqs *seqs,
                           const pkv__engine_message *log,
                           uint32_t *num_seqs)
{
    pkv__kv *kv = seqs->kv;
    for (uint32_t i = 0; i < step->num_actions; i++) {
        pkv__action *a = &step->actions[i];
        if (a->kind == PKV__ACTION_COPY_BLOCK) {
            uint32_t n = 0;
            while (i + n < step->num_actions &&
                   step->actions[i + n].kind == PKV__ACTION_COPY_BLOCK) {
                step->copy_pairs[n] = step->actions[i + n].copy;
                n++;
            }
            pkv_status st = pkv__kv_copy_blocks(kv, step->copy_pairs, n);
            for (uint32_t k = 0; st != PKV_OK && k < n; k++)
                action_failed(step, seqs, log, &step->actions[i + k],
                              num_seqs, st);
            i += n - 1;
            continue;
        }
        pkv__seq *s = a->seq;
        pkv_status st = a->kind == PKV__ACTION_SWAP_OUT
                            ? pkv__kv_swap_copy_out(kv, &s->kv, &seqs->alloc)
                            : pkv__kv_swap_copy_in(kv, &s->kv, &seqs->alloc,
                                                   s->num_computed);
        if (st != PKV_OK)
            action_failed(step, seqs, log, a, num_seqs, st);
    }
}

void pkv__step_unplan_rows(const pkv__step_state *step, pkv__seqs *seqs,
                           uint32_t num_seqs)
{
    for (uint32_t i = 0; i < num_seqs; i++) {
        pkv__seq *s = step->step_seqs[i];
        uint32_t before = pkv__kv_held(seqs->kv, &s->kv);
        pkv__kv_truncate(seqs->kv, &s->kv, s->num_computed);
        pkv__seqs_count_blocks(seqs, s, before);
        s->step.rows = 0;
        s->num_tokens -= s->step.drafts; /* a retry takes them again */
        s->step.drafts = 0;
    }
}

