/* SPDX-License-Identifier: MIT */
/* pkv_seq_*: adding, aborting and forking sequences; a prompt's cached
 * prefix looked up; block-table introspection; has_work. */
#include "check.h"
#include "engine.h"
#include "kv_layout.h"
#include "seqs.h"
#include "store/engine_store.h"
#include "struct_sizes.h"

#include <string.h>

pkv_status pkv_seq_params_init(pkv_seq_params *params)
{
    if (params == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "params is NULL");
    memset(params, 0, sizeof *params);
    params->struct_size = sizeof *params;
    return PKV_OK;
}

/* Token ids in [0, vocab_size) (any id >= 0 when vocab_size is 0). */
static int token_ok(const pkv_engine *e, int32_t token)
{
    return token >= 0 &&
           (e->params.vocab_size == 0 ||
            (uint32_t)token < e->params.vocab_size);
}

/* A prompt pkv_seq_add takes (any thread): PKV_OK, or the failure set
 * in both messages. */
static pkv_status check_prompt(pkv_engine *e, const int32_t *prompt,
                               uint32_t len)
{
    if (prompt == NULL || len == 0 || len >= e->params.max_model_len)
        return pkv__engine_fail_any_thread(
            e->message, PKV_ERR_INVALID_ARGUMENT,
            "prompt of %u tokens%s; must be 1..%u (max_model_len - 1)",
            (unsigned)len, prompt == NULL ? " (prompt is NULL)" : "",
            (unsigned)(e->params.max_model_len - 1));
    for (uint32_t i = 0; i < len; i++)
        if (!token_ok(e, prompt[i]))
            return pkv__engine_fail_any_thread(
                e->message, PKV_ERR_INVALID_ARGUMENT,
                "prompt[%u] is %d; token ids are 0..%u", (unsigned)i,
                (int)prompt[i],
                (unsigned)(e->params.vocab_size ? e->params.vocab_size - 1
                                                : INT32_MAX));
    return PKV_OK;
}

pkv_status pkv_seq_add(pkv_engine *e, const pkv_seq_params *params,
                       pkv_seq_id *out_id)
{
    if (out_id != NULL)
        *out_id = 0;
    if (e == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "engine is NULL");
    if (params == NULL || out_id == NULL)
        return pkv__engine_fail_any_thread(
            e->message, PKV_ERR_INVALID_ARGUMENT, "%s is NULL",
            params == NULL ? "params" : "out_id");
    char why[128];
    pkv_seq_params p;
    pkv_seq_params_init(&p);
    if (pkv__struct_read(&p, params, params->struct_size,
                         PKV__SEQ_PARAMS_MIN_SIZE, sizeof p, "params",
                         "pkv_seq_params_init", why, sizeof why))
        return pkv__engine_fail_any_thread(e->message, PKV_ERR_STRUCT_SIZE,
                                           "%s", why);
    if (p.flags != 0)
        return pkv__engine_fail_any_thread(
            e->message, PKV_ERR_INVALID_ARGUMENT,
            "params->flags is %#x; no flags are defined", (unsigned)p.flags);
    pkv_status bad = check_prompt(e, p.prompt, p.prompt_len);
    if (bad != PKV_OK)
        return bad;
    /* The prompt's chained hashes are computed here, on the host's
     * thread, once (kv.h). */
    pkv__seq *seq = pkv__seq_new(&e->alloc, &e->kv, p.prompt, p.prompt_len,
                                 p.cache_salt, p.prompt_len);
    if (seq == NULL)
        return pkv__engine_fail_any_thread(e->message, PKV_ERR_OUT_OF_MEMORY,
                                           "sequence of %u tokens",
                                           (unsigned)p.prompt_len);
    seq->max_new_tokens = p.max_new_tokens;
    seq->order.priority = p.priority;
    seq->tenant = p.tenant;
    seq->user_data = p.user_data;
    /* The stepping thread may free seq as soon as it is queued. */
    *out_id = pkv__inbox_add(&e->inbox, seq);
    return PKV_OK;
}

pkv_status pkv_seq_abort(pkv_engine *e, pkv_seq_id id)
{
    if (e == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "engine is NULL");
    pkv_status st = pkv__inbox_abort(&e->inbox, &e->alloc, id);
    if (st == PKV_ERR_NOT_FOUND)
        return pkv__engine_fail_any_thread(e->message, st,
                                           "sequence %llu was never added",
                                           (unsigned long long)id);
    if (st != PKV_OK)
        return pkv__engine_fail_any_thread(e->message, st, "abort queue");
    return PKV_OK;
}

pkv_status pkv_engine_lookup_prefix(pkv_engine *e, const int32_t *tokens,
                                    uint32_t num_tokens, uint64_t cache_salt,
                                    uint32_t *num_cached)
{
    if (num_cached != NULL)
        *num_cached = 0;
    if (e == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "engine is NULL");
    if (num_cached == NULL)
        return pkv__engine_fail_any_thread(
            e->message, PKV_ERR_INVALID_ARGUMENT, "num_cached is NULL");
    pkv_status st = check_prompt(e, tokens, num_tokens);
    if (st != PKV_OK)
        return st;
    uint32_t blocks = 0;
    st = pkv__kv_probe(&e->kv, &e->alloc, tokens, num_tokens, cache_salt,
                       &blocks);
    if (st != PKV_OK)
        return pkv__engine_fail_any_thread(e->message, st,
                                           "lookup of %u tokens",
                                           (unsigned)num_tokens);
    *num_cached = blocks * e->params.block_size;
    return PKV_OK;
}

pkv_status pkv_engine_store_keys(pkv_engine *e, const int32_t *tokens,
                                 uint32_t num_tokens, uint64_t cache_salt,
                                 char *keys, uint32_t capacity,
                                 uint32_t *num_keys)
{
    if (num_keys != NULL)
        *num_keys = 0;
    if (e == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "engine is NULL");
    if (num_keys == NULL || (keys == NULL && capacity > 0))
        return pkv__engine_fail_any_thread(
            e->message, PKV_ERR_INVALID_ARGUMENT, "%s is NULL",
            num_keys == NULL ? "num_keys" : "keys");
    pkv_status st = check_prompt(e, tokens, num_tokens);
    if (st != PKV_OK)
        return st;
    if (!pkv__store_enabled(e->store))
        return pkv__engine_fail_any_thread(e->message, PKV_ERR_BAD_STATE,
                                           "the engine has no KV store");
    uint32_t n = (num_tokens - 1) / e->params.block_size;
    n = n < capacity ? n : capacity;
    st = pkv__store_prompt_keys(e->store, tokens, n, cache_salt, keys);
    if (st != PKV_OK)
        return pkv__engine_fail_any_thread(e->message, st,
                                           "store keys of %u blocks",
                                           (unsigned)n);
    *num_keys = n;
    return PKV_OK;
}

/* pkv_seq_fork, under the prefix lock (its wrapper below). */
static pkv_status fork_seq(pkv_engine *e, pkv_seq_id parent_id,
                           int32_t last_token, pkv_seq_id *out_child)
{
    if (out_child != NULL)
        *out_child = 0;
    if (e == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "engine is NULL");
    if (out_child == NULL)
        return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                "out_child is NULL");
    pkv__seq *parent;
    pkv_status found =
        pkv__engine_find_between_steps(e, parent_id, "fork", &parent);
    if (found != PKV_OK)
        return found;
    /* One that must compute some tokens again (a cut fell back to a
     * frozen block's start) forks too: the child shares the KV it has
     * and computes the same tokens again. */
    if (parent->state != PKV__SEQ_RUNNING || parent->num_generated == 0)
        return pkv__engine_fail(e->message, PKV_ERR_BAD_STATE,
                                "sequence %llu is not running with a sampled "
                                "token",
                                (unsigned long long)parent_id);
    if (pkv__inbox_abort_pending(&e->inbox, parent_id))
        return pkv__engine_fail(e->message, PKV_ERR_BAD_STATE,
                                "sequence %llu has an abort pending",
                                (unsigned long long)parent_id);
    if (e->seqs.running.count >= e->params.max_num_seqs)
        return pkv__engine_fail(e->message, PKV_ERR_BAD_STATE,
                                "%u sequences already run (max_num_seqs)",
                                (unsigned)e->seqs.running.count);
    if (last_token >= 0 && !token_ok(e, last_token))
        return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                "last_token %d is out of range",
                                (int)last_token);
    uint32_t quota = e->params.max_blocks_per_tenant;
    if (quota != 0) {
        uint64_t used = pkv__seqs_tenant_blocks(&e->seqs, parent->tenant);
        if (used + pkv__kv_held(&e->kv, &parent->kv) > quota)
            return pkv__engine_fail(e->message, PKV_ERR_QUOTA,
                                    "tenant %u holds %llu of %u blocks",
                                    (unsigned)parent->tenant,
                                    (unsigned long long)used,
                                    (unsigned)quota);
    }

    /* Everything that can fail comes first. */
    pkv_status st =
        pkv__seqs_reserve(&e->seqs, pkv__inbox_live_count(&e->inbox) + 17);
    pkv__seq *child = NULL;
    if (st == PKV_OK) {
        child = pkv__seq_new(&e->alloc, &e->kv, parent->tokens,
                             parent->num_tokens, pkv__kv_salt(&parent->kv),
                             0);
        st = child == NULL ? PKV_ERR_OUT_OF_MEMORY : PKV_OK;
    }
    if (st == PKV_OK)
        st = pkv__kv_fork(&e->kv, &child->kv, &parent->kv);
    if (st != PKV_OK) {
        if (child != NULL) {
            pkv__kv_drop(&e->kv, &child->kv);
            pkv__seq_free(child, &e->alloc);
        }
        return pkv__engine_fail(e->message, st, "fork of sequence %llu",
                                (unsigned long long)parent_id);
    }
    child->prompt_len = parent->prompt_len;
    child->max_new_tokens = parent->max_new_tokens;
    child->num_generated = parent->num_generated;
    child->num_computed = parent->num_computed;
    child->order.priority = parent->order.priority;
    child->tenant = parent->tenant;
    child->user_data = parent->user_data;
    pkv__seqs_count_blocks(&e->seqs, child, 0);
    if (last_token >= 0)
        child->tokens[child->num_tokens - 1] = last_token;
    pkv__inbox_issue(&e->inbox, child);
    pkv__seqs_join(&e->seqs, child, PKV__SEQ_RUNNING);
    *out_child = child->id;
    PKV__ENGINE_CHECK(e);
    return PKV_OK;
}

pkv_status pkv_seq_fork(pkv_engine *e, pkv_seq_id parent_id,
                        int32_t last_token, pkv_seq_id *out_child)
{
    if (e != NULL)
        pkv__kv_lock(&e->kv);
    pkv_status st = fork_seq(e, parent_id, last_token, out_child);
    if (e != NULL)
        pkv__kv_unlock(&e->kv);
    return st;
}

pkv_status pkv_seq_propose(pkv_engine *e, pkv_seq_id id,
                           const int32_t *drafts, uint32_t num_drafts)
{
    if (e == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "engine is NULL");
    pkv__seq *s;
    pkv_status found = pkv__engine_find_between_steps(e, id, "propose", &s);
    if (found != PKV_OK)
        return found;
    if (num_drafts > 0 && drafts == NULL)
        return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                "drafts is NULL");
    if (s->state != PKV__SEQ_RUNNING)
        return pkv__engine_fail(e->message, PKV_ERR_BAD_STATE,
                                "sequence %llu is not running: drafts "
                                "follow the last token of a decoding "
                                "sequence",
                                (unsigned long long)id);
    if (s->num_computed + 1 != s->num_tokens)
        return pkv__engine_fail(
            e->message, PKV_ERR_BAD_STATE,
            "sequence %llu must recompute the KV of tokens %u..%u first "
            "(a rollback or a truncate dropped a U8 block, or its prompt "
            "is not done): drafts follow once only its last token is left",
            (unsigned long long)id, (unsigned)s->num_computed,
            (unsigned)(s->num_tokens - 2));

    if (num_drafts > PKV_MAX_DRAFTS ||
        (uint64_t)s->num_tokens + num_drafts >= e->params.max_model_len)
        return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                "%u drafts after %u tokens; at most %u, "
                                "and fewer than max_model_len %u in all",
                                (unsigned)num_drafts, (unsigned)s->num_tokens,
                                (unsigned)PKV_MAX_DRAFTS,
                                (unsigned)e->params.max_model_len);
    for (uint32_t i = 0; i < num_drafts; i++)
        if (!token_ok(e, drafts[i]))
            return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                    "drafts[%u] is %d; out of range",
                                    (unsigned)i, (int)drafts[i]);
    /* Room now, so that the step never allocates for them: the drafts,
     * and in tokens the drafts and the token sampled after them. */
    void *grown;
    size_t size = s->drafts.size;
    if (pkv__grow(&e->alloc, s->drafts.ids, &size, 0, num_drafts,
                  sizeof *s->drafts.ids, &grown) != PKV_OK)
        return pkv__engine_fail(e->message, PKV_ERR_OUT_OF_MEMORY, "%u drafts",
                                (unsigned)num_drafts);
    s->drafts.ids = grown;
    s->drafts.size = (uint32_t)size;
    if (pkv__seq_reserve_tokens(s, &e->alloc, num_drafts + 1) != PKV_OK)
        return pkv__engine_fail(e->message, PKV_ERR_OUT_OF_MEMORY, "%u drafts",
                                (unsigned)num_drafts);
    if (num_drafts > 0)
        memcpy(s->drafts.ids, drafts, num_drafts * sizeof *drafts);
    s->drafts.count = num_drafts;
    s->drafts.step = e->totals.steps;
    e->drafts_step = e->totals.steps;
    /* The step's block tables are sized by the longest sequence. */
    if (s->num_tokens + num_drafts > e->seqs.longest_tokens)
        e->seqs.longest_tokens = s->num_tokens + num_drafts;
    return PKV_OK;
}

/* pkv_seq_truncate, under the prefix lock (its wrapper below). */
static pkv_status truncate_seq(pkv_engine *e, pkv_seq_id id,
                               uint32_t num_tokens)
{
    if (e == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "engine is NULL");
    pkv__seq *s;
    pkv_status found = pkv__engine_find_between_steps(e, id, "truncate", &s);
    if (found != PKV_OK)
        return found;
    if (num_tokens == 0 || num_tokens > s->num_tokens)
        return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                "keep %u tokens of sequence %llu; it has "
                                "1..%u",
                                (unsigned)num_tokens, (unsigned long long)id,
                                (unsigned)s->num_tokens);
    if (num_tokens == s->num_tokens)
        return PKV_OK;
    s->drafts.count = 0; /* they followed the tokens cut */
    uint32_t bs = e->params.block_size;
    if (s->state == PKV__SEQ_SWAPPED) {
        /* Its blocks are host bytes now: recompute it instead. */
        pkv__seq_list_remove(&e->seqs.swapped, s);
        pkv__kv_drop_swap(&e->kv, &s->kv, &e->alloc);
        pkv__seqs_recompute(&e->seqs, s);
    } else if (s->state == PKV__SEQ_RUNNING) {
        /* The KV of every kept token but the last (the next input row). */
        uint32_t c = s->num_computed;
        pkv__seqs_cut_kv(&e->seqs, s, num_tokens - 1 < c ? num_tokens - 1 : c);
    }
    uint32_t cut = s->num_tokens - num_tokens;
    s->num_generated -= cut < s->num_generated ? cut : s->num_generated;
    if (s->prompt_len > num_tokens)
        s->prompt_len = num_tokens;
    s->num_tokens = num_tokens;
    /* Later tokens may differ from the prompt's. */
    pkv__kv_forget_tokens(&e->kv, &s->kv, num_tokens);
    if (pkv__store_enabled(e->store))
        pkv__store_forget(e->store, s, num_tokens / bs);
    PKV__ENGINE_CHECK(e);
    return PKV_OK;
}

pkv_status pkv_seq_truncate(pkv_engine *e, pkv_seq_id id, uint32_t num_tokens)
{
    if (e != NULL)
        pkv__kv_lock(&e->kv);
    pkv_status st = truncate_seq(e, id, num_tokens);
    if (e != NULL)
        pkv__kv_unlock(&e->kv);
    return st;
}

pkv_status pkv_engine_get_block_table(const pkv_engine *e, pkv_seq_id id,
                                      const uint32_t **blocks,
                                      uint32_t *num_blocks,
                                      uint32_t *num_tokens)
{
    return pkv_engine_get_group_block_table(e, id, 0, blocks, num_blocks,
                                            num_tokens);
}

pkv_status pkv_engine_get_group_block_table(const pkv_engine *e,
                                            pkv_seq_id id, uint32_t group,
                                            const uint32_t **blocks,
                                            uint32_t *num_blocks,
                                            uint32_t *num_tokens)
{
    if (blocks != NULL)
        *blocks = NULL;
    if (num_blocks != NULL)
        *num_blocks = 0;
    if (num_tokens != NULL)
        *num_tokens = 0;
    if (e == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT, "engine is NULL");
    if (blocks == NULL || num_blocks == NULL || num_tokens == NULL)
        return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                "every out-parameter must be set");
    if (group >= pkv__kv_num_groups(&e->kv))
        return pkv__engine_fail(e->message, PKV_ERR_INVALID_ARGUMENT,
                                "group %u of %u", (unsigned)group,
                                (unsigned)pkv__kv_num_groups(&e->kv));
    const pkv__seq *seq = pkv__seqs_find(&e->seqs, id);
    if (seq == NULL && pkv__inbox_queued(&e->inbox, id))
        return PKV_OK; /* added, not yet seen by a step: no blocks */
    if (seq == NULL)
        return pkv__engine_fail(e->message, PKV_ERR_NOT_FOUND,
                                "sequence %llu is not live",
                                (unsigned long long)id);
    *blocks = pkv__kv_table(&seq->kv, group)->blocks;
    *num_blocks = pkv__kv_blocks(&seq->kv);
    *num_tokens = pkv__kv_tokens(&seq->kv);
    return PKV_OK;
}

int pkv_engine_has_work(const pkv_engine *e)
{
    if (e == NULL)
        return 0;
    return pkv__inbox_busy(&e->inbox);
}
