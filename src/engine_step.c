/* SPDX-License-Identifier: MIT */
/* pkv_engine_step_begin and pkv_engine_step_end: the host's loop, one call
 * each per step (pkv_engine_attend, the call per layer, is in
 * engine_attend.c). */
#include "check.h"
#include "engine.h"
#include "kv_layout.h"
#include "seqs.h"
#include "planner.h"
#include "kv/prefix_groups.h"
#include "store/engine_store.h"

#include <assert.h>
#include <string.h>

/* Move queued sequences into waiting and apply queued aborts. On failure
 * nothing was taken from the inbox. */
static pkv_status drain_inbox(pkv_engine *e)
{
    pkv__seq *adds;
    pkv_seq_id *aborts;
    uint32_t num_aborts;
    size_t abort_capacity;
    for (;;) {
        /* More may arrive between the count and the take: then again. */
        uint64_t live = pkv__inbox_live_count(&e->inbox) + 16;
        pkv_status st = pkv__seqs_reserve(&e->seqs, live);
        if (st != PKV_OK)
            return st;
        if (pkv__inbox_take(&e->inbox, live, &adds, &aborts, &num_aborts,
                            &abort_capacity))
            break;
    }
    while (adds != NULL) {
        pkv__seq *s = adds;
        adds = s->inbox_next;
        s->inbox_next = NULL;
        s->state = PKV__SEQ_WAITING;
        pkv__map_put(&e->seqs.by_id, s->id, (uint64_t)(uintptr_t)s);
        if (s->num_tokens > e->seqs.longest_tokens)
            e->seqs.longest_tokens = s->num_tokens;
        pkv__seqs_enqueue(&e->seqs, &e->seqs.waiting, s);
    }
    for (uint32_t i = 0; i < num_aborts; i++) {
        pkv__seq *s = pkv__seqs_find(&e->seqs, aborts[i]);
        if (s != NULL)
            pkv__seqs_end(&e->seqs, s, PKV_FINISH_REASON_ABORTED, PKV_OK);
    }
    pkv__seqs_sweep_ended(&e->seqs);
    pkv__free(&e->alloc, aborts, abort_capacity, sizeof *aborts);
    return PKV_OK;
}

/* Everything the step may need, allocated before the first change. */
static pkv_status reserve_step(pkv_engine *e)
{
    const pkv__seqs *q = &e->seqs;
    uint32_t live = q->running.count + q->waiting.count + q->swapped.count;
    return pkv__step_state_reserve(&e->step, &e->alloc, q->ended.count, live,
                                   q->longest_tokens / e->kv.pool.block_size);
}

/* Take seq out of the step's plan (step_seqs[0 .. *num_seqs)). */
static void unschedule(pkv_engine *e, pkv__seq *seq, uint32_t *num_seqs)
{
    for (uint32_t i = 0; i < *num_seqs; i++)
        if (e->step.step_seqs[i] == seq) {
            memmove(e->step.step_seqs + i, e->step.step_seqs + i + 1,
                    (*num_seqs - i - 1) * sizeof *e->step.step_seqs);
            (*num_seqs)--;
            break;
        }
    seq->scheduled = 0;
    seq->num_tokens -= seq->step_drafts; /* drafts were for this step */
    seq->step_drafts = 0;
}

/* A device action failed: undo what the plan did for its sequence, so
 * that nothing is lost and the sequence runs again later.
 *   swap-out: its blocks are gone but its tokens are not: recompute;
 *   copy-on-write: its private block is garbage: recompute;
 *   swap-in: its host copy is intact: back to the swapped list. */
static void action_failed(pkv_engine *e, const pkv__action *a,
                          uint32_t *num_seqs, pkv_status st)
{
    pkv__seq *s = a->seq;
    pkv__engine_log(e->message, PKV_LOG_LEVEL_WARN,
                    "seq %llu: device action %d failed (%s: %s); %s",
                    (unsigned long long)s->id, (int)a->kind,
                    pkv_status_name(st), pkv_last_error(),
                    a->kind == PKV__ACTION_SWAP_IN ? "it stays swapped out"
                                                   : "it will be recomputed");
    if (a->kind == PKV__ACTION_SWAP_OUT) {
        pkv__seq_list_remove(&e->seqs.swapped, s);
        pkv__kv_drop_swap(&e->kv, &s->kv, &e->alloc);
        e->totals.swap_outs--;
    } else {
        unschedule(e, s, num_seqs);
        pkv__seq_list_remove(&e->seqs.running, s);
        pkv__seqs_drop_kv(&e->seqs, s);
        if (a->kind == PKV__ACTION_SWAP_IN) {
            e->totals.swap_ins--;
            s->state = PKV__SEQ_SWAPPED;
            pkv__seqs_enqueue(&e->seqs, &e->seqs.swapped, s);
            return;
        }
        e->step.preempted[e->step.batch.num_preempted++] = s->id;
        e->totals.preemptions++;
    }
    pkv__seqs_recompute(&e->seqs, s);
}

/* Run the planner's device actions in order, each run of copy-on-write
 * copies as one backend call. One that fails costs its sequence (a failed
 * run: each of its sequences) this step, never the step or the sequence's
 * tokens. */
static void run_actions(pkv_engine *e, uint32_t *num_seqs)
{
    for (uint32_t i = 0; i < e->step.num_actions; i++) {
        pkv__action *a = &e->step.actions[i];
        if (a->kind == PKV__ACTION_COPY_BLOCK) {
            uint32_t n = 0;
            while (i + n < e->step.num_actions &&
                   e->step.actions[i + n].kind == PKV__ACTION_COPY_BLOCK) {
                e->step.copy_pairs[n] = e->step.actions[i + n].copy;
                n++;
            }
            pkv_status st =
                e->device.ops->copy_blocks(e->device.backend, e->step.copy_pairs, n);
            for (uint32_t k = 0; st != PKV_OK && k < n; k++)
                action_failed(e, &e->step.actions[i + k], num_seqs, st);
            i += n - 1;
            continue;
        }
        pkv__seq *s = a->seq;
        pkv_status st = a->kind == PKV__ACTION_SWAP_OUT
                            ? pkv__kv_swap_copy_out(&e->kv, &s->kv, &e->alloc)
                            : pkv__kv_swap_copy_in(&e->kv, &s->kv, &e->alloc,
                                                   s->num_computed);
        if (st != PKV_OK)
            action_failed(e, a, num_seqs, st);
    }
}

/* The backend refused the step: give back the slots the plan gave the
 * step's rows, as if it had scheduled none. What the actions did (swaps,
 * copies) stands: it left every sequence consistent. */
static void unplan_rows(pkv_engine *e, uint32_t num_seqs)
{
    for (uint32_t i = 0; i < num_seqs; i++) {
        pkv__seq *s = e->step.step_seqs[i];
        uint32_t before = pkv__kv_held(&s->kv);
        pkv__kv_truncate(&e->kv, &s->kv, s->num_computed);
        pkv__seqs_count_blocks(&e->seqs, s, before);
        s->scheduled = 0;
        s->num_tokens -= s->step_drafts; /* a retry takes them again */
        s->step_drafts = 0;
    }
}

/* After a sequence's step: its windowed groups give back the blocks its
 * next row cannot see. */
static void slide_windows(pkv_engine *e, pkv__seq *s)
{
    uint32_t dropped =
        pkv__kv_slide(&e->kv, &s->kv, s->num_computed);
    pkv__seqs_tenant_add(&e->seqs, s->tenant, -(int64_t)dropped);
}

/* Lay the planned step out as the batch and the backend's step: its
 * sequences, rows and samples, and each group's tables and slots, group
 * after group (backend.h). */
static void build_batch(pkv_engine *e, uint32_t num_seqs)
{
    const pkv__kv *kv = &e->kv;
    uint32_t groups = kv->groups.num_groups;
    uint32_t total = 0, rows = 0, samples = 0, max_blocks = 1;
    for (uint32_t i = 0; i < num_seqs; i++)
        total += e->step.step_seqs[i]->scheduled;
    for (uint32_t i = 0; i < num_seqs; i++) {
        pkv__seq *s = e->step.step_seqs[i];
        /* The first token it reads (prefetch.h). */
        if (i + PKV__PREFETCH_AHEAD / 2 < num_seqs) {
            const pkv__seq *ahead = e->step.step_seqs[i + PKV__PREFETCH_AHEAD / 2];
            PKV__PREFETCH(ahead->tokens + ahead->num_computed);
        }
        if (pkv__kv_blocks(&s->kv) > max_blocks)
            max_blocks = pkv__kv_blocks(&s->kv);
        e->step.seq_ids[i] = s->id;
        e->step.seq_user_data[i] = s->user_data;
        e->step.query_start[i] = rows;
        uint32_t first = rows, end = s->num_computed + s->scheduled;
        e->step.context_lens[i] = end;
        e->step.stages[i] = pkv__kv_stage(&s->kv);
        pkv__kv_plan_windows(&e->kv, &s->kv, s->num_computed, rows,
                             s->scheduled);
        for (uint32_t p = s->num_computed; p < end; p++, rows++) {
            e->step.token_ids[rows] = s->tokens[p];
            e->step.positions[rows] = p;
        }
        for (uint32_t g = 0; g < groups; g++) {
            const pkv__table *t = pkv__kv_table(&s->kv, g);
            uint64_t *slots = e->step.slots + (size_t)g * total + first;
            for (uint32_t p = s->num_computed; p < end; p++)
                *slots++ = pkv__table_slot(t, &kv->pool, p);
            e->step.step_tables[g * num_seqs + i] = t->blocks;
            e->step.table_versions[g * num_seqs + i] = t->version;
        }
        /* The last row samples; with drafts, every row from the last
         * accepted token on. */
        for (uint32_t r = rows - 1 - s->step_drafts;
             end == s->num_tokens && r < rows; r++) {
            e->step.sample_rows[samples] = r;
            e->step.sample_seq_ids[samples++] = s->id;
        }
    }
    e->step.query_start[num_seqs] = rows;
    pkv_batch *b = &e->step.batch;
    b->num_seqs = num_seqs;
    b->num_tokens = rows;
    b->seq_ids = e->step.seq_ids;
    b->seq_user_data = e->step.seq_user_data;
    b->query_start = e->step.query_start;
    b->context_lens = e->step.context_lens;
    b->token_ids = e->step.token_ids;
    b->positions = e->step.positions;
    b->num_samples = samples;
    b->sample_rows = e->step.sample_rows;
    b->sample_seq_ids = e->step.sample_seq_ids;
    b->preempted = e->step.preempted;

    pkv__step *st = &e->step.backend_step;
    st->num_seqs = num_seqs;
    st->num_tokens = rows;
    st->query_start = e->step.query_start;
    st->context_lens = e->step.context_lens;
    st->block_tables = e->step.step_tables;
    st->max_blocks_per_seq = max_blocks;
    st->table_versions = e->step.table_versions;
    st->slots = e->step.slots;
    st->stages = PKV_LAYOUT_QUANTIZED(e->params.kv_dtype) ? e->step.stages : NULL;
    st->windows = pkv__kv_step_windows(kv);
}

/* Report ended sequences in the batch and free them. */
static void report_ended(pkv_engine *e)
{
    uint32_t n = e->seqs.ended.count;
    for (uint32_t i = 0; i < n; i++) {
        pkv__seq *s = e->seqs.ended.items[i];
        e->step.finished[i] = s->finish;
        e->step.finished_user_data[i] = s->user_data;
        pkv__map_put(&e->seqs.by_id, s->id, 0);
        pkv__seq_free(s, &e->alloc);
    }
    e->seqs.ended.count = 0;
    e->step.batch.num_finished = n;
    e->step.batch.finished = e->step.finished;
    e->step.batch.finished_user_data = e->step.finished_user_data;
    if (n)
        pkv__inbox_retire(&e->inbox, n);
}

pkv_status pkv_engine_step_begin(pkv_engine *e, const pkv_batch **out)
{
    if (out != NULL)
        *out = NULL;
    if (e == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "engine is NULL");
    if (out == NULL)
        return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT, "out is NULL");
    if (e->step.in_step)
        return pkv__engine_fail(e->message, PKV_ERR_BAD_STATE,
                                "step_begin called twice: call step_end "
                                "first");
    pkv_status st = drain_inbox(e);
    if (st == PKV_OK)
        st = reserve_step(e);
    if (st != PKV_OK)
        return pkv__engine_fail(e->message, st, "step arrays");
    /* The store's landed blocks join the prefix cache before the plan
     * looks there; waiting prompts are asked for theirs. */
    pkv__store_step_begin(e->store, &e->seqs.waiting,
                          e->seqs.longest_tokens);
    /* The plan, and every allocation applying it needs: until both
     * succeeded nothing changed. */
    pkv__plan_input in = {&e->kv,
                          &e->seqs,
                          &e->params,
                          e->watermark_blocks,
                          e->totals.steps,
                          e->drafts_step,
                          pkv__store_enabled(e->store),
                          &e->alloc};
    st = pkv__planner_run(&e->step.plan, &in);
    if (st == PKV_OK)
        st = pkv__plan_reserve(&e->step.plan, &e->seqs);
    if (st != PKV_OK)
        return pkv__engine_fail(e->message, st, "step plan");
    uint32_t num_seqs = 0;
    pkv__plan_apply(&e->step.plan, &e->seqs, &e->step, &num_seqs);
    run_actions(e, &num_seqs);
    build_batch(e, num_seqs);
    if (num_seqs > 0) {
        st = e->device.ops->begin_step(e->device.backend, &e->step.backend_step);
        if (st != PKV_OK) {
            unplan_rows(e, num_seqs);
            PKV__ENGINE_CHECK(e);
            return pkv__engine_fail(e->message, st, "backend step: %s",
                                    pkv_last_error());
        }
    }
    report_ended(e);
    memset(e->step.layer_done, 0, e->params.num_layers);
    memset(e->step.seq_bad, 0, num_seqs);
    e->step.layers_left = e->params.num_layers;
    e->step.in_step = 1;
    e->totals.steps++;
    *out = &e->step.batch;
    PKV__ENGINE_CHECK(e);
    return PKV_OK;
}


/* Speculative decoding at step_end: s ran its last token and
 * step_drafts drafts, each row sampled (sampled[0..step_drafts]). Keep the
 * drafts the samples confirm (sampled[r] is draft r + 1), up to a stop
 * flag or max_new_tokens, and their KV; drop the rest of the rows, as a
 * truncation would (a U8 block sealed in this step is kept whole or
 * computed again, never re-quantised). Returns the index of the sample
 * that follows the kept drafts: the caller appends it. */
static uint32_t settle_drafts(pkv_engine *e, pkv__seq *s,
                              const int32_t *sampled, const uint8_t *stop)
{
    uint32_t k = s->step_drafts;
    uint32_t first = s->num_tokens - k; /* the first draft's index */
    uint32_t a = 0;
    while (a < k && sampled[a] == s->tokens[first + a] &&
           (stop == NULL || !stop[a]))
        a++;
    if (s->max_new_tokens != 0 &&
        s->num_generated + a + 1 > s->max_new_tokens)
        a = s->num_generated + 1 >= s->max_new_tokens
                ? 0
                : s->max_new_tokens - s->num_generated - 1;
    e->totals.draft_tokens_accepted += a;
    /* Keep the KV of the last token and the accepted drafts. */
    uint32_t keep = s->num_computed + 1 + a;
    s->num_computed += s->scheduled;
    pkv__seqs_cut_kv(&e->seqs, s, keep);
    s->num_tokens = first + a;
    s->num_generated += a;
    s->step_drafts = 0;
    return a;
}

pkv_status pkv_engine_step_end(pkv_engine *e, const int32_t *sampled,
                               const uint8_t *stop, uint32_t num_samples)
{
    if (e == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "engine is NULL");
    if (!e->step.in_step)
        return pkv__engine_fail(e->message, PKV_ERR_BAD_STATE,
                                "step_end outside a step: call step_begin");
    /* A batch with no rows has nothing to attend: its layers are free. */
    if (e->step.layers_left != 0 && e->step.batch.num_tokens != 0)
        return pkv__engine_fail(e->message, PKV_ERR_BAD_STATE,
                                "step_end with %u layers not attended",
                                (unsigned)e->step.layers_left);
    const pkv_batch *b = &e->step.batch;
    if (num_samples != b->num_samples || (num_samples > 0 && sampled == NULL))
        return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                "%u sampled tokens for %u sample rows%s",
                                (unsigned)num_samples,
                                (unsigned)b->num_samples,
                                sampled == NULL ? " (sampled is NULL)" : "");
    uint32_t vocab = e->params.vocab_size;
    for (uint32_t j = 0; j < num_samples; j++)
        if (sampled[j] < 0 || (vocab != 0 && (uint32_t)sampled[j] >= vocab))
            return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                    "sampled[%u] is %d; token ids are "
                                    "0..%u",
                                    (unsigned)j, (int)sampled[j],
                                    (unsigned)(vocab ? vocab - 1 : INT32_MAX));

    uint32_t j = 0;
    for (uint32_t i = 0; i < b->num_seqs; i++) {
        pkv__seq *s = e->step.step_seqs[i];
        /* Its fields, then the token it will append (prefetch.h), twice
         * as far ahead as the other loops: this one does less per
         * sequence. */
        if (i + 2 * PKV__PREFETCH_AHEAD < b->num_seqs)
            pkv__seq_prefetch_end(e->step.step_seqs[i + 2 * PKV__PREFETCH_AHEAD]);
        if (i + PKV__PREFETCH_AHEAD < b->num_seqs) {
            const pkv__seq *ahead = e->step.step_seqs[i + PKV__PREFETCH_AHEAD];
            PKV__PREFETCH_WRITE(ahead->tokens + ahead->num_tokens);
        }
        uint32_t samples_here = 0;
        while (j + samples_here < num_samples &&
               b->sample_seq_ids[j + samples_here] == s->id)
            samples_here++;
        uint32_t sample = j;
        j += samples_here;
        if (e->step.seq_bad[i]) {
            pkv__seqs_end(&e->seqs, s, PKV_FINISH_REASON_FAILED,
                                  PKV_ERR_NON_FINITE);
            continue;
        }
        pkv__kv_commit_windows(&e->kv, &s->kv, s->num_computed,
                               b->query_start[i], s->scheduled);
        if (s->step_drafts > 0)
            sample += settle_drafts(e, s, sampled + sample,
                                    stop != NULL ? stop + sample : NULL);
        else
            s->num_computed += s->scheduled;
        s->scheduled = 0;
        /* A cache: when its chain cannot grow, later prompts miss. Most
         * steps fill no block: then only the sequence's first 64 bytes
         * are read (seq.h), where num_computed equals table.num_tokens. */
        assert(s->num_computed == pkv__kv_tokens(&s->kv));
        if (pkv__kv_behind(&e->kv, &s->kv, s->num_computed)) {
            uint32_t registered;
            if (pkv__kv_register(&e->kv, &s->kv, s->tokens, &registered) !=
                PKV_OK)
                pkv__engine_log(e->message, PKV_LOG_LEVEL_DEBUG,
                                "seq %llu: prefix registration skipped "
                                "(memory)",
                                (unsigned long long)s->id);
            if (pkv__store_enabled(e->store))
                pkv__store_collect(e->store, s, registered);
        }
        /* Only once its blocks are cached: they may be hits. */
        slide_windows(e, s);
        if (samples_here == 0)
            continue;
        s->tokens[s->num_tokens++] = sampled[sample];
        if (s->num_tokens > e->seqs.longest_tokens)
            e->seqs.longest_tokens = s->num_tokens;
        s->num_generated++;
        s->protect = 0;
        if (stop != NULL && stop[sample])
            pkv__seqs_end(&e->seqs, s, PKV_FINISH_REASON_STOP, PKV_OK);
        else if (s->max_new_tokens != 0 &&
                 s->num_generated >= s->max_new_tokens)
            pkv__seqs_end(&e->seqs, s, PKV_FINISH_REASON_LENGTH, PKV_OK);
        else if (s->num_tokens >= e->params.max_model_len)
            pkv__seqs_end(&e->seqs, s, PKV_FINISH_REASON_MAX_MODEL_LEN,
                                  PKV_OK);
    }
    /* One pass over running for every sequence that ended here. */
    pkv__seqs_sweep_ended(&e->seqs);
    /* No block changed since the collect: ended sequences' blocks stay
     * cached until an allocation takes them. */
    pkv__store_send(e->store);
    e->step.in_step = 0;
    PKV__ENGINE_CHECK(e);
    return PKV_OK;
}
