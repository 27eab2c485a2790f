/* SPDX-License-Identifier: MIT */
/* pkv_engine_step_begin and pkv_engine_step_end: the host's loop, one call
 * each per step (pkv_engine_attend, the call per layer, is in
 * engine_attend.c). Both hold the prefix lock while they change the
 * cache (kv.h), so that pkv_engine_lookup_prefix may run on any thread;
 * step_end then delivers the KV events. */
#include "check.h"
#include "engine.h"
#include "planner.h"
#include "step_actions.h"
#include "store/engine_store.h"

#include <assert.h>
#include <string.h>

/* pkv_engine_step_begin, under the prefix lock (its wrapper below). */
static pkv_status step_begin(pkv_engine *e, const pkv_batch **out)
{
    if (out != NULL)
        *out = NULL;
    if (e == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "engine is NULL");
    if (out == NULL)
        return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                "out is NULL");
    if (e->step.in_step)
        return pkv__engine_fail(e->message, PKV_ERR_BAD_STATE,
                                "step_begin called twice: call step_end "
                                "first");
    /* Everything the step may need, allocated before the first change. */
    pkv__seqs *q = &e->seqs;
    pkv_status st = pkv__seqs_take_inbox(q, &e->inbox);
    if (st == PKV_OK)
        st = pkv__step_state_reserve(
            &e->step, &e->alloc, q->ended.count,
            q->running.count + q->waiting.count + q->swapped.count,
            q->longest_tokens / pkv__kv_block_size(&e->kv));
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
    pkv__step_run_actions(&e->step, &e->seqs, e->message, &num_seqs);
    pkv__step_state_lay_out(&e->step, &e->kv, num_seqs);
    if (num_seqs > 0) {
        st = e->device.ops->begin_step(e->device.backend,
                                       &e->step.backend_step);
        if (st != PKV_OK) {
            pkv__step_unplan_rows(&e->step, &e->seqs, num_seqs);
            PKV__ENGINE_CHECK(e);
            return pkv__engine_fail(e->message, st, "backend step: %s",
                                    pkv_last_error());
        }
    }
    pkv__step_state_report(&e->step, &e->seqs, &e->inbox);
    memset(e->step.layer_done, 0, e->params.num_layers);
    memset(e->step.seq_bad, 0, num_seqs);
    e->step.layers_left = e->params.num_layers;
    e->step.in_step = 1;
    e->totals.steps++;
    *out = &e->step.batch;
    PKV__ENGINE_CHECK(e);
    return PKV_OK;
}

pkv_status pkv_engine_step_begin(pkv_engine *e, const pkv_batch **out)
{
    if (e != NULL)
        pkv__kv_lock(&e->kv);
    pkv_status st = step_begin(e, out);
    if (e != NULL)
        pkv__kv_unlock(&e->kv);
    return st;
}


/* Speculative decoding at step_end: s ran its last token and
 * step.drafts drafts, each row sampled (sampled[0..step.drafts]). Keep the
 * drafts the samples confirm (sampled[r] is draft r + 1), up to a stop
 * flag or max_new_tokens, and their KV; drop the rest of the rows, as a
 * truncation would (a U8 block frozen in this step is kept whole or
 * computed again, never re-quantised). Returns the index of the sample
 * that follows the kept drafts: the caller appends it. */
static uint32_t settle_drafts(pkv__seqs *seqs, pkv__seq *s,
                              const int32_t *sampled, const uint8_t *stop)
{
    uint32_t k = s->step.drafts;
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
    seqs->totals->draft_tokens_accepted += a;
    /* Keep the KV of the last token and the accepted drafts. */
    uint32_t keep = s->num_computed + 1 + a;
    s->num_computed += s->step.rows;
    pkv__seqs_cut_kv(seqs, s, keep);
    s->num_tokens = first + a;
    s->num_generated += a;
    s->step.drafts = 0;
    return a;
}

/* pkv_engine_step_end, under the prefix lock (its wrapper below). */
static pkv_status step_end(pkv_engine *e, const int32_t *sampled,
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
            pkv__seq_prefetch_end(
                e->step.step_seqs[i + 2 * PKV__PREFETCH_AHEAD]);
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
                               b->query_start[i], s->step.rows);
        if (s->step.drafts > 0)
            sample += settle_drafts(&e->seqs, s, sampled + sample,
                                    stop != NULL ? stop + sample : NULL);
        else
            s->num_computed += s->step.rows;
        s->step.rows = 0;
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
        pkv__seqs_slide(&e->seqs, s);
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

pkv_status pkv_engine_step_end(pkv_engine *e, const int32_t *sampled,
                               const uint8_t *stop, uint32_t num_samples)
{
    if (e == NULL)
        return step_end(e, sampled, stop, num_samples);
    pkv__kv_lock(&e->kv);
    pkv_status st = step_end(e, sampled, stop, num_samples);
    pkv__kv_unlock(&e->kv);
    /* Unlocked: the host's callback may look up. */
    if (st == PKV_OK)
        pkv__kv_deliver_events(&e->kv);
    return st;
}
