/* SPDX-License-Identifier: MIT */
/* The checking host: records, the three parts of a step, the checks. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include "check_host.h"

#include "dense_ref.h"
#include "hash_model.h"

#include "check.h"
#include "engine.h"
#include "store/engine_store.h"
#include "seqs.h"
#include "half.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

_Noreturn void ch_failf(const ch_host *host, const char *fmt, ...)
{
    char msg[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(msg, sizeof msg, fmt, args);
    va_end(args);
    host->fail(msg);
    abort(); /* fail must not return */
}

#define CHECK(host, cond)                                                \
    do {                                                                 \
        if (!(cond))                                                     \
            ch_failf(host, "%s:%d: check failed: %s", __FILE__, __LINE__, \
                     #cond);                                             \
    } while (0)

/* With host->retry, a status an injected fault gives: counted. */
static int injected(ch_host *host, pkv_status st)
{
    if (!host->retry || (st != PKV_ERR_OUT_OF_MEMORY && st != PKV_ERR_DEVICE &&
                         st != PKV_ERR_DEVICE_MEMORY))
        return 0;
    host->faults++;
    return 1;
}

static void *xrealloc(const ch_host *host, void *p, size_t size)
{
    void *q = realloc(p, size ? size : 1);
    if (q == NULL)
        ch_failf(host, "out of host memory (%zu bytes)", size);
    return q;
}

void ch_init(ch_host *host, const pkv_engine_params *params, double tolerance,
             void (*fail)(const char *message))
{
    memset(host, 0, sizeof *host);
    host->tolerance = tolerance;
    host->check_stride = 1;
    host->fail = fail;
    if (pkv_engine_create(params, &host->engine) != PKV_OK)
        ch_failf(host, "pkv_engine_create: %s", pkv_last_error());
    /* The engine resolves defaults; read back what it uses. */
    host->params = host->engine->params;
}

void ch_free(ch_host *host)
{
    pkv_engine_destroy(host->engine);
    for (uint64_t i = 0; i < host->num_ids; i++) {
        free(host->seqs[i].tokens);
        free(host->seqs[i].sample_out);
        free(host->seqs[i].recorded);
    }
    free(host->seqs);
    free(host->q);
    free(host->k);
    free(host->v);
    free(host->out);
    free(host->hk);
    free(host->hv);
    free(host->q16);
    free(host->k16);
    free(host->v16);
    free(host->out16);
    free(host->ref);
    free(host->rows);
    memset(host, 0, sizeof *host);
}

ch_seq *ch_find(ch_host *host, uint64_t id)
{
    if (id == 0 || id > host->num_ids || !host->seqs[id - 1].known)
        return NULL;
    return &host->seqs[id - 1];
}

/* The record of id, created empty if needed. */
static ch_seq *record(ch_host *host, uint64_t id)
{
    CHECK(host, id != 0 && id < (1u << 24));
    if (id > host->num_ids) {
        uint64_t n = host->num_ids ? host->num_ids : 64;
        while (n < id)
            n *= 2;
        host->seqs = xrealloc(host, host->seqs, (size_t)n * sizeof *host->seqs);
        memset(host->seqs + host->num_ids, 0,
               (size_t)(n - host->num_ids) * sizeof *host->seqs);
        host->num_ids = n;
    }
    ch_seq *s = &host->seqs[id - 1];
    CHECK(host, !s->known);
    s->known = 1;
    if (id > host->last_id)
        host->last_id = id;
    return s;
}

static void push_token(ch_host *host, ch_seq *s, int32_t token)
{
    if (s->num_tokens == s->capacity) {
        s->capacity = s->capacity ? s->capacity * 2 : 16;
        s->tokens = xrealloc(host, s->tokens, s->capacity * sizeof *s->tokens);
    }
    s->tokens[s->num_tokens++] = token;
}

pkv_status ch_add(ch_host *host, const pkv_seq_params *params,
                  pkv_seq_id *out_id)
{
    pkv_status st = pkv_seq_add(host->engine, params, out_id);
    if (st != PKV_OK) {
        CHECK(host, *out_id == 0);
        return st;
    }
    /* Ids come from 1 upwards and are never reused. */
    CHECK(host, *out_id == host->last_id + 1);
    ch_seq *s = record(host, *out_id);
    for (uint32_t i = 0; i < params->prompt_len; i++)
        push_token(host, s, params->prompt[i]);
    s->max_new_tokens = params->max_new_tokens;
    s->complete = 1;
    return PKV_OK;
}

/* ch_add of a prompt with p's other fields, failing on an error. */
static pkv_seq_id add_or_fail(ch_host *host, pkv_seq_params *p,
                              const int32_t *prompt, uint32_t len,
                              uint32_t max_new_tokens)
{
    p->prompt = prompt;
    p->prompt_len = len;
    p->max_new_tokens = max_new_tokens;
    pkv_seq_id id = 0;
    if (ch_add(host, p, &id) != PKV_OK)
        ch_failf(host, "pkv_seq_add: %s", pkv_last_error());
    return id;
}

pkv_seq_id ch_add_prompt(ch_host *host, const int32_t *prompt, uint32_t len,
                         uint32_t max_new_tokens, int32_t priority,
                         uint32_t tenant)
{
    pkv_seq_params p;
    pkv_seq_params_init(&p);
    p.priority = priority;
    p.tenant = tenant;
    return add_or_fail(host, &p, prompt, len, max_new_tokens);
}

pkv_seq_id ch_add_salted(ch_host *host, const int32_t *prompt, uint32_t len,
                         uint32_t max_new_tokens, uint64_t salt)
{
    pkv_seq_params p;
    pkv_seq_params_init(&p);
    p.cache_salt = salt;
    return add_or_fail(host, &p, prompt, len, max_new_tokens);
}

void ch_abort(ch_host *host, pkv_seq_id id)
{
    pkv_status st = pkv_seq_abort(host->engine, id);
    if (id == 0 || id > host->last_id) {
        CHECK(host, st == PKV_ERR_NOT_FOUND);
        return;
    }
    CHECK(host, st == PKV_OK);
    ch_seq *s = ch_find(host, id);
    if (s != NULL && !s->ended && s->expect == 0)
        s->expect = PKV_FINISH_REASON_ABORTED;
}

/* For a call that needs a live sequence between steps (s: the engine's,
 * looked up before the call, NULL in a step): the status st it gave must
 * be BAD_STATE in a step or for a sequence no step saw, NOT_FOUND for
 * one that is not live. Returns 1 when one of those applied. */
static int checked_not_between_steps(ch_host *host, pkv_seq_id id,
                                     const pkv__seq *s, pkv_status st)
{
    pkv_engine *e = host->engine;
    if (e->step.in_step) {
        CHECK(host, st == PKV_ERR_BAD_STATE);
        return 1;
    }
    if (s == NULL) {
        CHECK(host, st == (pkv__inbox_queued(&e->inbox, id)
                               ? PKV_ERR_BAD_STATE
                               : PKV_ERR_NOT_FOUND));
        return 1;
    }
    return 0;
}

pkv_status ch_fork(ch_host *host, pkv_seq_id parent, int32_t last_token,
                   pkv_seq_id *out_child)
{
    pkv_engine *e = host->engine;
    const pkv__seq *p =
        e->step.in_step ? NULL : pkv__seqs_find(&e->seqs, parent);
    uint32_t parent_blocks = p ? pkv__kv_blocks(&p->kv) : 0;
    pkv_status st = pkv_seq_fork(e, parent, last_token, out_child);
    if (checked_not_between_steps(host, parent, p, st)) {
        /* nothing more to check */
    } else if (p->state != PKV__SEQ_RUNNING || p->num_generated == 0) {
        CHECK(host, st == PKV_ERR_BAD_STATE);
    } else if (last_token >= 0 && host->params.vocab_size != 0 &&
               (uint32_t)last_token >= host->params.vocab_size) {
        CHECK(host, st == PKV_ERR_INVALID_ARGUMENT ||
                        st == PKV_ERR_BAD_STATE);
    } else if (!pkv__inbox_abort_pending(&e->inbox, parent) &&
               e->seqs.running.count < host->params.max_num_seqs) {
        /* pkv.h's only other refusals: none is BAD_STATE (a running
         * sequence that must compute some of its tokens again, after a
         * cut inside a frozen block, forks too). */
        CHECK(host, st != PKV_ERR_BAD_STATE);
    }
    if (st != PKV_OK) {
        CHECK(host, *out_child == 0);
        CHECK(host, injected(host, st) || st == PKV_ERR_BAD_STATE ||
                        st == PKV_ERR_NOT_FOUND ||
                        st == PKV_ERR_INVALID_ARGUMENT || st == PKV_ERR_QUOTA);
        return st;
    }
    CHECK(host, *out_child == host->last_id + 1);
    ch_seq *ps = ch_find(host, parent);
    CHECK(host, ps != NULL && !ps->ended);
    ch_seq *c = record(host, *out_child);
    ps = ch_find(host, parent); /* record may move the array */
    for (uint32_t i = 0; i < ps->num_tokens - ps->drafts; i++)
        push_token(host, c, ps->tokens[i]);
    if (last_token >= 0)
        c->tokens[c->num_tokens - 1] = last_token;
    c->generated = ps->generated;
    c->max_new_tokens = ps->max_new_tokens;
    c->complete = 1;
    /* The child shares every block of its parent. */
    const pkv__seq *cs = pkv__seqs_find(&e->seqs, *out_child);
    CHECK(host, cs != NULL && cs->state == PKV__SEQ_RUNNING);
    CHECK(host, pkv__kv_blocks(&cs->kv) == parent_blocks);
    CHECK(host, memcmp(cs->kv.tables[0].blocks, p->kv.tables[0].blocks,
                       parent_blocks * sizeof *p->kv.tables[0].blocks) == 0);
    return PKV_OK;
}

pkv_status ch_truncate(ch_host *host, pkv_seq_id id, uint32_t num_tokens)
{
    pkv_engine *e = host->engine;
    const pkv__seq *s = e->step.in_step ? NULL : pkv__seqs_find(&e->seqs, id);
    pkv_status st = pkv_seq_truncate(e, id, num_tokens);
    /* A cut drops the drafts (a call that cuts nothing keeps them). */
    ch_seq *d = ch_find(host, id);
    if (st == PKV_OK && s->drafts.count == 0 && d->drafts > 0) {
        d->num_tokens -= d->drafts;
        d->drafts = 0;
    }
    if (checked_not_between_steps(host, id, s, st)) {
        /* nothing more to check */
    } else if (num_tokens == 0 || num_tokens > s->num_tokens) {
        CHECK(host, st == PKV_ERR_INVALID_ARGUMENT);
    } else {
        CHECK(host, st == PKV_OK);
    }
    if (st != PKV_OK)
        return st;
    ch_seq *r = ch_find(host, id);
    CHECK(host, r != NULL && !r->ended &&
                    r->num_tokens - r->drafts >= num_tokens);
    if (r->drafts > 0) /* kept: the call cut nothing */
        return PKV_OK;
    uint32_t cut = r->num_tokens - num_tokens;
    r->generated -= cut < r->generated ? cut : r->generated;
    r->num_tokens = num_tokens;
    CHECK(host, s->num_tokens == num_tokens &&
                    s->num_generated == r->generated &&
                    s->num_computed < num_tokens);
    return PKV_OK;
}

pkv_status ch_move(ch_host *host, pkv_seq_id id, pkv_seq_id *out_copy)
{
    pkv_engine *e = host->engine;
    *out_copy = 0;
    const pkv__seq *s = e->step.in_step ? NULL : pkv__seqs_find(&e->seqs, id);
    size_t size = 0;
    pkv_status st = pkv_seq_export(e, id, NULL, 0, &size);
    if (!checked_not_between_steps(host, id, s, st))
        CHECK(host, st == PKV_OK);
    if (st != PKV_OK)
        return st;
    uint8_t *data = xrealloc(host, NULL, size);
    size_t got = 0;
    st = pkv_seq_export(e, id, data, size, &got);
    CHECK(host, st == PKV_OK && got == size);
    pkv_seq_id copy = 7;
    st = pkv_seq_import(e, NULL, data, size, &copy);
    free(data);
    /* The original holds its KV's blocks; the copy needs one more. */
    CHECK(host, st == PKV_OK || st == PKV_ERR_NO_BLOCKS);
    if (st != PKV_OK) {
        CHECK(host, copy == 0);
        return st;
    }
    const ch_seq *r = ch_find(host, id);
    CHECK(host, r != NULL && !r->ended &&
                    r->num_tokens - r->drafts == s->num_tokens);
    ch_record_import(host, copy, r);
    CHECK(host,
          pkv__seqs_find(&e->seqs, copy)->num_computed == s->num_computed);
    *out_copy = copy;
    return PKV_OK;
}

void ch_record_import(ch_host *host, pkv_seq_id id, const ch_seq *from)
{
    CHECK(host, id == host->last_id + 1);
    /* With its KV it waits swapped out, else it waits to be computed. */
    const pkv__seq *es = pkv__seqs_find(&host->engine->seqs, id);
    CHECK(host, es != NULL && es->state == (es->num_computed
                                                ? PKV__SEQ_SWAPPED
                                                : PKV__SEQ_WAITING));
    if (es->num_computed > 0)
        host->imported++;
    /* from may be in this host's array, which record may move. */
    uint32_t len = from->num_tokens - from->drafts;
    int32_t *tokens = xrealloc(host, NULL, len * sizeof *tokens);
    memcpy(tokens, from->tokens, len * sizeof *tokens);
    uint32_t generated = from->generated, max_new = from->max_new_tokens;
    ch_seq *c = record(host, id);
    for (uint32_t i = 0; i < len; i++)
        push_token(host, c, tokens[i]);
    free(tokens);
    c->generated = generated;
    c->max_new_tokens = max_new;
    c->complete = 1;
}

pkv_status ch_propose(ch_host *host, pkv_seq_id id, const int32_t *drafts,
                      uint32_t n)
{
    pkv_engine *e = host->engine;
    const pkv__seq *s = e->step.in_step ? NULL : pkv__seqs_find(&e->seqs, id);
    pkv_status st = pkv_seq_propose(e, id, drafts, n);
    if (injected(host, st))
        return st; /* it changed nothing: the drafts before stay */
    if (checked_not_between_steps(host, id, s, st)) {
        /* nothing more to check */
    } else if (s->state != PKV__SEQ_RUNNING ||
               s->num_computed + 1 != s->num_tokens) {
        CHECK(host, st == PKV_ERR_BAD_STATE);
    } else if (n > PKV_MAX_DRAFTS ||
               s->num_tokens + n >= host->params.max_model_len) {
        CHECK(host, st == PKV_ERR_INVALID_ARGUMENT);
    }
    CHECK(host, st == PKV_OK || st == PKV_ERR_BAD_STATE ||
                    st == PKV_ERR_NOT_FOUND ||
                    st == PKV_ERR_INVALID_ARGUMENT);
    if (st != PKV_OK)
        return st;
    ch_seq *r = ch_find(host, id);
    CHECK(host, r != NULL && !r->ended);
    r->num_tokens -= r->drafts;
    CHECK(host, r->num_tokens == s->num_tokens);
    for (uint32_t i = 0; i < n; i++)
        push_token(host, r, drafts[i]);
    r->drafts = n;
    return PKV_OK;
}

void ch_propose_wrong(ch_host *host, pkv_seq_id id, uint32_t n)
{
    const ch_seq *s = ch_find(host, id);
    CHECK(host, s != NULL && n <= 64);
    uint32_t vocab = host->params.vocab_size;
    int32_t truth = hm_sample(s->tokens[s->num_tokens - 1],
                              s->num_tokens - 1, vocab);
    int32_t wrong[64];
    for (uint32_t i = 0; i < n; i++)
        wrong[i] = (int32_t)(((uint32_t)truth + 1) % vocab);
    if (ch_propose(host, id, wrong, n) != PKV_OK)
        ch_failf(host, "pkv_seq_propose: %s",
                 pkv_engine_last_error(host->engine));
}

/* ------------------------------------------------------------------ step */

static void reserve(ch_host *host, size_t rows, size_t ctx)
{
    const pkv_engine_params *p = &host->params;
    size_t hq = p->num_q_heads, hkv = p->num_kv_heads, d = p->head_dim;
    if (rows > host->cap_rows) {
        size_t n = rows * 2;
        host->q = xrealloc(host, host->q, n * hq * d * sizeof(float));
        host->out = xrealloc(host, host->out,
                             n * p->num_layers * hq * d * sizeof(float));
        host->k = xrealloc(host, host->k, n * hkv * d * sizeof(float));
        host->v = xrealloc(host, host->v, n * hkv * d * sizeof(float));
        host->q16 = xrealloc(host, host->q16, n * hq * d * sizeof(uint16_t));
        host->out16 =
            xrealloc(host, host->out16, n * hq * d * sizeof(uint16_t));
        host->k16 = xrealloc(host, host->k16, n * hkv * d * sizeof(uint16_t));
        host->v16 = xrealloc(host, host->v16, n * hkv * d * sizeof(uint16_t));
        host->ref = xrealloc(host, host->ref, n * hq * d * sizeof(double));
        host->rows = xrealloc(host, host->rows, n * sizeof(uint32_t));
        host->cap_rows = n;
    }
    if (ctx > host->cap_ctx) {
        size_t n = ctx * 2;
        host->hk = xrealloc(host, host->hk, n * hkv * d * sizeof(float));
        host->hv = xrealloc(host, host->hv, n * hkv * d * sizeof(float));
        host->cap_ctx = n;
    }
}

/* A finished report: the id ends once, for the reason the host expects. */
static void take_report(ch_host *host, const pkv_finished *f)
{
    ch_seq *s = ch_find(host, f->id);
    if (s == NULL && host->learn && f->id != 0 && f->id < (1u << 24)) {
        s = record(host, f->id);
        s->max_new_tokens = host->learn_max_new_tokens;
    }
    if (s == NULL)
        ch_failf(host, "seq %llu ended but was never issued",
                 (unsigned long long)f->id);
    if (s->ended)
        ch_failf(host, "seq %llu reported as ended twice",
                 (unsigned long long)f->id);
    CHECK(host, f->reserved0 == 0);
    CHECK(host, f->num_generated == s->generated);
    CHECK(host, f->reason >= PKV_FINISH_REASON_STOP &&
                    f->reason <= PKV_FINISH_REASON_FAILED);
    if (f->reason == PKV_FINISH_REASON_FAILED)
        CHECK(host, f->status == PKV_ERR_NO_BLOCKS ||
                        f->status == PKV_ERR_QUOTA ||
                        f->status == PKV_ERR_NON_FINITE ||
                        f->status == PKV_ERR_OUT_OF_MEMORY);
    else
        CHECK(host, f->status == PKV_OK);
    if (s->expect != 0 && f->reason != s->expect)
        ch_failf(host, "seq %llu ended with reason %d; expected %d",
                 (unsigned long long)f->id, (int)f->reason, (int)s->expect);
    /* Unforeseen ends: only failures, or aborts from other threads. */
    if (s->expect == 0)
        CHECK(host,
              f->reason == PKV_FINISH_REASON_FAILED ||
                  (host->learn && f->reason == PKV_FINISH_REASON_ABORTED));
    s->ended = 1;
    s->reason = f->reason;
    s->status = f->status;
    host->ended++;
}

/* Check one sequence's rows of the batch against its history (learning
 * tokens in learn mode). Returns its row count. */
static uint32_t check_rows(ch_host *host, const pkv_batch *b, uint32_t i)
{
    const pkv_engine_params *p = &host->params;
    uint64_t id = b->seq_ids[i];
    ch_seq *s = ch_find(host, id);
    if (s == NULL && host->learn) {
        s = record(host, id);
        s->max_new_tokens = host->learn_max_new_tokens;
    }
    if (s == NULL)
        ch_failf(host, "batch holds unknown seq %llu", (unsigned long long)id);
    if (s->ended || s->expect != 0)
        ch_failf(host, "batch holds seq %llu, which should have ended",
                 (unsigned long long)id);
    uint32_t first = b->query_start[i], last = b->query_start[i + 1];
    CHECK(host, first < last);
    uint32_t n = last - first, ctx = b->context_lens[i];
    CHECK(host, ctx >= n && ctx <= p->max_model_len);
    if (n > 1 && p->long_prefill_threshold != 0)
        CHECK(host, n <= p->long_prefill_threshold);
    for (uint32_t r = first; r < last; r++) {
        uint32_t pos = b->positions[r];
        CHECK(host, pos == ctx - n + (r - first));
        if (pos < s->num_tokens) {
            if (b->token_ids[r] != s->tokens[pos])
                ch_failf(host, "seq %llu position %u: token %d, history %d",
                         (unsigned long long)id, pos, (int)b->token_ids[r],
                         (int)s->tokens[pos]);
        } else {
            /* Only a sequence the host learns may show new tokens, and
             * only in order. */
            CHECK(host, host->learn && !s->complete && pos == s->num_tokens);
            push_token(host, s, b->token_ids[r]);
        }
    }
    CHECK(host, ctx <= s->num_tokens);
    return n;
}

/* A step call failed: fail, or (host->retry) count the fault and let the
 * caller call again, at most 3 times in a row. */
static void retried(ch_host *host, const char *call, int *tries)
{
    if (!host->retry || ++*tries > 3)
        ch_failf(host, "%s: %s", call, pkv_engine_last_error(host->engine));
    host->faults++;
}

void ch_begin(ch_host *host)
{
    pkv_engine *e = host->engine;
    const pkv_engine_params *p = &host->params;
    const pkv_batch *b = NULL;
    int tries = 0;
    while (pkv_engine_step_begin(e, &b) != PKV_OK)
        retried(host, "step_begin", &tries);
    CHECK(host, b != NULL);
    host->batch = b;
    host->steps++;
    host->preempted_reports += b->num_preempted;

    for (uint32_t i = 0; i < b->num_finished; i++)
        take_report(host, &b->finished[i]);
    /* Everything the host ended or aborted is reported now. */
    for (uint64_t id = 1; id <= host->num_ids; id++) {
        const ch_seq *s = &host->seqs[id - 1];
        if (s->known && !s->ended && s->expect != 0)
            ch_failf(host, "seq %llu should have been reported (reason %d)",
                     (unsigned long long)id, (int)s->expect);
    }

    CHECK(host, b->num_seqs <= p->max_num_seqs);
    CHECK(host, b->num_tokens <= p->max_batch_tokens);
    CHECK(host, b->num_seqs == 0 || b->query_start[0] == 0);
    CHECK(host,
          b->num_seqs == 0 || b->query_start[b->num_seqs] == b->num_tokens);
    uint32_t rows = 0, j = 0;
    for (uint32_t i = 0; i < b->num_seqs; i++) {
        for (uint32_t k = 0; k < i; k++)
            CHECK(host, b->seq_ids[k] != b->seq_ids[i]);
        rows += check_rows(host, b, i);
        ch_seq *s = ch_find(host, b->seq_ids[i]);
        s->bad = 0;
        /* A sample per row from the last token on: 1 + the drafts run. */
        uint32_t samples = 0, q0 = b->query_start[i];
        while (j + samples < b->num_samples &&
               b->sample_seq_ids[j + samples] == b->seq_ids[i])
            samples++;
        s->ran = samples > 0 ? samples - 1 : 0;
        if (samples > 0) {
            CHECK(host, s->ran <= s->drafts);
            CHECK(host, b->context_lens[i] ==
                            s->num_tokens - s->drafts + s->ran);
            CHECK(host, b->query_start[i + 1] - q0 >= samples);
            for (uint32_t k = 0; k < samples; k++)
                CHECK(host, b->sample_rows[j + k] ==
                                b->query_start[i + 1] - samples + k);
            s->complete = 1;
            j += samples;
        } else if (s->complete) {
            CHECK(host, b->context_lens[i] < s->num_tokens - s->drafts);
        }
    }
    CHECK(host, rows == b->num_tokens);
    CHECK(host, j == b->num_samples);
    for (uint32_t i = 0; i < b->num_preempted; i++) {
        ch_seq *s = ch_find(host, b->preempted[i]);
        CHECK(host, host->learn || s != NULL);
        CHECK(host, s == NULL || !s->ended);
        for (uint32_t k = 0; k < b->num_seqs; k++)
            CHECK(host, b->seq_ids[k] != b->preempted[i]);
    }
    reserve(host, b->num_tokens + 1, 1);
}

static pkv_tensor tensor(const ch_host *host, float *f32, uint16_t *f16,
                         uint32_t heads)
{
    pkv_tensor t;
    memset(&t, 0, sizeof t);
    t.struct_size = sizeof t;
    t.dtype = host->f16_tensors ? PKV_TENSOR_DTYPE_F16 : PKV_TENSOR_DTYPE_F32;
    t.memory = PKV_TENSOR_MEMORY_HOST;
    t.rows = host->batch->num_tokens;
    t.heads = heads;
    t.head_dim = host->params.head_dim;
    t.data = host->f16_tensors ? (void *)f16 : (void *)f32;
    return t;
}

/* Round through f16 in place, as the engine will see an f16 tensor. */
static void to_f16(float *x, uint16_t *h, size_t n)
{
    pkv__f32_to_f16_n(x, h, (uint32_t)n);
    pkv__f16_to_f32_n(h, x, (uint32_t)n);
}

/* Compare sequence i's output rows of one layer (those check_stride
 * picks) with the dense reference over its whole history. */
static void check_outputs(ch_host *host, uint32_t i, uint32_t layer)
{
    const pkv_engine_params *p = &host->params;
    const pkv_batch *b = host->batch;
    uint32_t hq = p->num_q_heads, hkv = p->num_kv_heads, d = p->head_dim;
    ch_seq *s = ch_find(host, b->seq_ids[i]);
    uint32_t first = b->query_start[i], n = b->query_start[i + 1] - first;
    uint32_t ctx = b->context_lens[i];
    reserve(host, b->num_tokens + 1, ctx);
    size_t row = (size_t)hkv * d;
    for (uint32_t t = 0; t < ctx; t++) {
        hm_row(HM_K, s->tokens[t], t, layer, hkv, d, host->hk + t * row);
        hm_row(HM_V, s->tokens[t], t, layer, hkv, d, host->hv + t * row);
    }
    if (host->f16_tensors) {
        uint16_t *h = host->k16;
        for (uint32_t t = 0; t < ctx; t++) {
            to_f16(host->hk + t * row, h, row);
            to_f16(host->hv + t * row, h, row);
        }
    }
    uint32_t checked = 0;
    for (uint32_t r = 0; r < n; r++)
        if ((ctx - n + r) % host->check_stride == 0 || r + 1 == n)
            host->rows[checked++] = r;
    const float *q = host->q + (size_t)first * hq * d;
    const float *out = host->out + ((size_t)layer * b->num_tokens + first) *
                                       hq * d;
    dense_ref_attention(q, host->hk, host->hv, n, ctx, hq, hkv, d,
                        (double)p->scale,
                        p->layer_windows != NULL ? p->layer_windows[layer]
                                                 : p->sliding_window,
                        host->rows, checked, host->ref);
    for (uint32_t i_row = 0; i_row < checked; i_row++) {
        uint32_t r = host->rows[i_row];
        for (uint32_t c = 0; c < hq * d; c++) {
            double want = host->ref[(size_t)i_row * hq * d + c];
            double got = out[(size_t)r * hq * d + c];
            double err = fabs(got - want);
            if (err > host->max_error)
                host->max_error = err;
            if (!(err <= host->tolerance))
                ch_failf(host,
                         "seq %llu position %u layer %u element %u: %.9g, "
                         "reference %.9g",
                         (unsigned long long)b->seq_ids[i], ctx - n + r,
                         (unsigned)layer, c, got, want);
        }
    }
    host->rows_checked += checked;
}

void ch_attend(ch_host *host, uint32_t poison_row, uint32_t poison_layer)
{
    pkv_engine *e = host->engine;
    const pkv_engine_params *p = &host->params;
    const pkv_batch *b = host->batch;
    uint32_t T = b->num_tokens, hq = p->num_q_heads, hkv = p->num_kv_heads;
    uint32_t d = p->head_dim;
    size_t qn = (size_t)T * hq * d, kvn = (size_t)T * hkv * d;
    for (uint32_t layer = 0; layer < p->num_layers; layer++) {
        /* Every layer's output is kept, for record_samples. */
        float *out = host->out + (size_t)layer * qn;
        for (uint32_t r = 0; r < T; r++) {
            int32_t tok = b->token_ids[r];
            uint32_t pos = b->positions[r];
            hm_row(HM_Q, tok, pos, layer, hq, d, host->q + (size_t)r * hq * d);
            hm_row(HM_K, tok, pos, layer, hkv, d,
                   host->k + (size_t)r * hkv * d);
            hm_row(HM_V, tok, pos, layer, hkv, d,
                   host->v + (size_t)r * hkv * d);
        }
        if (host->f16_tensors) {
            to_f16(host->q, host->q16, qn);
            to_f16(host->k, host->k16, kvn);
            to_f16(host->v, host->v16, kvn);
        }
        int poison = poison_row < T && poison_layer == layer;
        if (poison) {
            host->k[(size_t)poison_row * hkv * d] = NAN;
            if (host->f16_tensors)
                pkv__f32_to_f16_n(host->k, host->k16, (uint32_t)kvn);
            for (uint32_t i = 0; i < b->num_seqs; i++)
                if (poison_row >= b->query_start[i] &&
                    poison_row < b->query_start[i + 1])
                    ch_find(host, b->seq_ids[i])->bad = 1;
        }
        pkv_tensor tq = tensor(host, host->q, host->q16, hq);
        pkv_tensor tk = tensor(host, host->k, host->k16, hkv);
        pkv_tensor tv = tensor(host, host->v, host->v16, hkv);
        pkv_tensor to = tensor(host, out, host->out16, hq);
        int tries = 0;
        while (pkv_engine_attend(e, layer, &tq, &tk, &tv, &to) != PKV_OK)
            retried(host, "attend", &tries);
        if (host->f16_tensors)
            pkv__f16_to_f32_n(host->out16, out, (uint32_t)qn);
        for (uint32_t i = 0; i < b->num_seqs; i++)
            if (!ch_find(host, b->seq_ids[i])->bad)
                check_outputs(host, i, layer);
    }
}

/* Keep the output rows (every layer) of batch row r, the sample row for
 * position `position` of s. */
static void record_sample(ch_host *host, ch_seq *s, uint32_t position,
                          uint32_t r)
{
    const pkv_engine_params *p = &host->params;
    size_t row = (size_t)p->num_q_heads * p->head_dim;
    size_t per_position = p->num_layers * row;
    if (position >= s->record_capacity) {
        uint32_t cap = s->record_capacity ? s->record_capacity : 64;
        while (cap <= position)
            cap *= 2;
        s->sample_out = xrealloc(host, s->sample_out,
                                 cap * per_position * sizeof(float));
        s->recorded = xrealloc(host, s->recorded, cap);
        memset(s->recorded + s->record_capacity, 0,
               cap - s->record_capacity);
        s->record_capacity = cap;
    }
    size_t T = host->batch->num_tokens;
    for (uint32_t layer = 0; layer < p->num_layers; layer++)
        memcpy(s->sample_out + position * per_position + layer * row,
               host->out + (layer * T + r) * row, row * sizeof(float));
    s->recorded[position] = 1;
}

/* s samples token (stop: with its stop flag): the end it is due. */
static void take_token(ch_host *host, ch_seq *s, int32_t token, int stop)
{
    push_token(host, s, token);
    s->generated++;
    if (stop)
        s->expect = PKV_FINISH_REASON_STOP;
    else if (s->max_new_tokens != 0 && s->generated >= s->max_new_tokens)
        s->expect = PKV_FINISH_REASON_LENGTH;
    else if (s->num_tokens >= host->params.max_model_len)
        s->expect = PKV_FINISH_REASON_MAX_MODEL_LEN;
}

void ch_sampled(ch_host *host, pkv_seq_id id, int32_t token)
{
    ch_seq *s = ch_find(host, id);
    CHECK(host, s != NULL && !s->ended && s->drafts == 0);
    take_token(host, s, token, 0);
}

void ch_end(ch_host *host, const uint8_t *stop)
{
    pkv_engine *e = host->engine;
    const pkv_engine_params *p = &host->params;
    const pkv_batch *b = host->batch;
    uint32_t n = b->num_samples;
    int32_t *sampled = xrealloc(host, NULL, (n + 1) * sizeof *sampled);
    uint32_t vocab = p->vocab_size ? p->vocab_size : 1000;
    for (uint32_t j = 0; j < n; j++) {
        uint32_t r = b->sample_rows[j];
        sampled[j] = hm_sample(b->token_ids[r], b->positions[r], vocab);
    }
    /* The batch is valid until the next step_begin: read it first. */
    for (uint32_t i = 0, j = 0; i < b->num_seqs; i++) {
        ch_seq *s = ch_find(host, b->seq_ids[i]);
        int here = j < n && b->sample_seq_ids[j] == b->seq_ids[i];
        uint32_t sample = j;
        j += here ? 1 + s->ran : 0;
        if (s->bad) {
            s->expect = PKV_FINISH_REASON_FAILED;
            s->bad = 0;
            continue;
        }
        if (!here)
            continue;
        /* Drafts: the engine keeps those the samples confirm, up to a
         * stop or max_new_tokens, then the next sample. */
        uint32_t first = s->num_tokens - s->drafts, a = 0;
        while (a < s->ran && sampled[sample + a] == s->tokens[first + a] &&
               (stop == NULL || !stop[sample + a]))
            a++;
        if (s->max_new_tokens != 0 &&
            s->generated + a + 1 > s->max_new_tokens)
            a = s->generated + 1 >= s->max_new_tokens
                    ? 0
                    : s->max_new_tokens - s->generated - 1;
        for (uint32_t k = 0; host->record_samples && k <= a; k++) {
            uint32_t r = b->sample_rows[sample + k];
            record_sample(host, s, b->positions[r], r);
        }
        s->num_tokens = first + a;
        s->generated += a;
        s->drafts = 0;
        sample += a;
        take_token(host, s, sampled[sample], stop != NULL && stop[sample]);
    }
    /* Drafts that did not run are gone. */
    for (uint64_t id = 1; id <= host->num_ids; id++) {
        ch_seq *s = &host->seqs[id - 1];
        s->num_tokens -= s->drafts;
        s->drafts = 0;
        s->ran = 0;
    }
    int tries = 0;
    while (pkv_engine_step_end(e, sampled, stop, n) != PKV_OK)
        retried(host, "step_end", &tries);
    free(sampled);
    host->batch = NULL;
}

void ch_step(ch_host *host, const pkv_batch **batch_out)
{
    ch_begin(host);
    if (batch_out != NULL)
        *batch_out = host->batch;
    ch_attend(host, UINT32_MAX, 0);
    ch_end(host, NULL);
}

/* ------------------------------------------------------------ invariants */

/* The engine's record of a live sequence agrees with the host's. */
static void check_seq(ch_host *host, const pkv__seq *s)
{
    ch_seq *h = ch_find(host, s->id);
    if (h == NULL && host->learn)
        return;
    if (h == NULL || h->ended)
        ch_failf(host, "engine holds seq %llu, which the host %s",
                 (unsigned long long)s->id,
                 h == NULL ? "never saw" : "saw end");
    CHECK(host, s->num_generated == h->generated);
    if (h->complete) {
        /* The record holds every proposed draft; the engine's tokens the
         * ones the current step runs. */
        CHECK(host, s->num_tokens == h->num_tokens - h->drafts + h->ran);
        CHECK(host, memcmp(s->tokens, h->tokens,
                           s->num_tokens * sizeof *s->tokens) == 0);
    }
}

void ch_check(ch_host *host)
{
    pkv_engine *e = host->engine;
    /* The pool, tables, lists and tails: the engine's own check (check.h),
     * which debug builds also run after every step. */
    char why[256];
    if (pkv__engine_check(e, why, sizeof why) != NULL)
        ch_failf(host, "engine invariant: %s", why);

    const pkv__seq_list *lists[] = {&e->seqs.running, &e->seqs.waiting,
                                    &e->seqs.swapped};
    for (size_t l = 0; l < 3; l++)
        for (uint32_t i = 0; i < lists[l]->count; i++)
            check_seq(host, lists[l]->items[i]);

    uint32_t nb = e->kv.pool.num_blocks;
    pkv_engine_stats st;
    st.struct_size = sizeof st;
    CHECK(host, pkv_engine_get_stats(e, &st) == PKV_OK);
    CHECK(host, st.blocks_total == nb);
    CHECK(host, st.blocks_free + st.blocks_cached_free + st.blocks_used ==
                    st.blocks_total);
    CHECK(host, st.num_running == e->seqs.running.count &&
                    st.num_waiting == e->seqs.waiting.count &&
                    st.num_swapped == e->seqs.swapped.count);
    CHECK(host, st.prefix_hit_tokens <= st.prefix_query_tokens);
    /* Tokens are counted in the slots that hold them, group by group, and
     * the groups' blocks and tokens add up to the pool's. */
    CHECK(host, st.tokens_stored <= st.slots_allocated);
    uint64_t group_blocks = 0, group_tokens = 0;
    for (uint32_t g = 0; g < st.kv_groups; g++) {
        uint32_t window;
        uint64_t blocks, tokens;
        CHECK(host, pkv_engine_get_group_stats(e, g, &window, &blocks,
                                               &tokens) == PKV_OK);
        CHECK(host, tokens <= blocks * st.block_size);
        group_blocks += blocks;
        group_tokens += tokens;
    }
    CHECK(host, group_blocks + 1 == st.blocks_used &&
                    group_tokens == st.tokens_stored);
    /* Imported sequences come in as swap-ins without a swap-out. */
    CHECK(host, st.swap_ins <= st.swap_outs + host->imported);
    if (!host->learn) {
        /* Live sequences: queued, in the lists, ended and not reported. */
        uint64_t queued = 0;
        for (const pkv__seq *s = e->inbox.adds_head; s; s = s->inbox_next)
            queued++;
        uint64_t live = queued + e->seqs.running.count + e->seqs.waiting.count +
                        e->seqs.swapped.count + e->seqs.ended.count;
        CHECK(host, live == e->inbox.live);
        /* KV store: each loading sequence waits with one load in flight;
         * saves in flight keep the engine busy. */
        uint32_t loads = 0, saves = 0, loading = 0;
        for (uint32_t i = 0; i < e->store->num_ops; i++) {
            const pkv__seq *s = e->store->ops[i].seq;
            loads += s != NULL;
            saves += s == NULL;
            CHECK(host, s == NULL || (s->state == PKV__SEQ_WAITING &&
                                      s->store.state == PKV__STORE_LOADING));
        }
        for (uint32_t i = 0; i < e->seqs.waiting.count; i++)
            loading +=
                e->seqs.waiting.items[i]->store.state == PKV__STORE_LOADING;
        CHECK(host, loads == loading && loads == e->store->num_loading);
        CHECK(host, (pkv_engine_has_work(e) != 0) == (live != 0 || saves != 0));
    }
}

void ch_run(ch_host *host, uint64_t max_steps)
{
    uint64_t steps = 0;
    while (pkv_engine_has_work(host->engine)) {
        if (steps++ == max_steps)
            ch_failf(host, "the engine still has work after %llu steps",
                     (unsigned long long)max_steps);
        ch_step(host, NULL);
        ch_check(host);
        if (host->idle != NULL)
            host->idle();
    }
}

void ch_check_idle(ch_host *host)
{
    for (uint64_t id = 1; id <= host->last_id; id++) {
        const ch_seq *s = ch_find(host, id);
        if (s != NULL && !s->ended)
            ch_failf(host, "seq %llu never ended", (unsigned long long)id);
    }
    const pkv_engine *e = host->engine;
    pkv_engine_stats st;
    st.struct_size = sizeof st;
    CHECK(host, pkv_engine_get_stats(e, &st) == PKV_OK);
    CHECK(host, st.num_running + st.num_waiting + st.num_swapped == 0);
    CHECK(host, st.blocks_free + st.blocks_cached_free == st.blocks_total - 1);
    CHECK(host, st.blocks_used == 1);
    const pkv__pool *pool = &e->kv.pool;
    CHECK(host, e->seqs.running.count + e->seqs.waiting.count +
                        e->seqs.swapped.count + e->seqs.ended.count ==
                    0);
    CHECK(host, pool->num_free + pool->num_cached_free == pool->num_blocks - 1);
    for (uint32_t blk = 0; blk < pool->num_blocks; blk++)
        CHECK(host, pool->blocks[blk].ref_count == 0);
    CHECK(host, e->kv.swap_used == 0);
}

void ch_drain(ch_host *host, uint64_t max_steps)
{
    ch_run(host, max_steps);
    ch_check_idle(host);
}

static void sleep_1ms(void)
{
    struct timespec t = {0, 1000000L};
    nanosleep(&t, NULL);
}

void ch_run_idle(ch_host *host)
{
    for (uint32_t i = 0; pkv_engine_has_work(host->engine); i++) {
        if (i == 20000)
            ch_failf(host, "the engine still has work after 20000 steps");
        const pkv_batch *b;
        ch_step(host, &b);
        if (b->num_tokens == 0)
            sleep_1ms();
    }
    ch_check_idle(host);
}

uint32_t ch_rows_of(const pkv_batch *b, pkv_seq_id id)
{
    for (uint32_t i = 0; i < b->num_seqs; i++)
        if (b->seq_ids[i] == id)
            return b->query_start[i + 1] - b->query_start[i];
    return 0;
}

uint32_t ch_first_rows(ch_host *host, pkv_seq_id id)
{
    for (uint32_t i = 0; i < 20000; i++) {
        const pkv_batch *b;
        ch_step(host, &b);
        uint32_t rows = ch_rows_of(b, id);
        if (rows)
            return rows;
        if (b->num_tokens == 0)
            sleep_1ms();
    }
    ch_failf(host, "sequence %llu never ran", (unsigned long long)id);
}

const uint8_t ch_seal_key[32] = {
    0x3c, 0x91, 0x0e, 0x5a, 0x77, 0x02, 0xd4, 0x6b, 0x18, 0xe9, 0xa0,
    0x4f, 0x62, 0xb3, 0x85, 0x1d, 0xc7, 0x39, 0xfe, 0x20, 0x54, 0x8a,
    0x6d, 0x13, 0xb8, 0x47, 0x0c, 0xe5, 0x9a, 0x71, 0x26, 0xdf};
const uint8_t ch_other_seal_key[32] = {1,  2,  3,  4,  5,  6,  7,  8,
                                       9,  10, 11, 12, 13, 14, 15, 16,
                                       17, 18, 19, 20, 21, 22, 23, 24,
                                       25, 26, 27, 28, 29, 30, 31, 32};
