/* SPDX-License-Identifier: MIT */
/* The engine's sequences (seqs.h). */
#include "seqs.h"

#include "engine.h"
#include "inbox.h"
#include "store/engine_store.h"

#include <string.h>

pkv_status pkv__seqs_init(pkv__seqs *s, const pkv__allocator *a,
                          const pkv_engine_params *p, pkv__kv *kv,
                          struct pkv__engine_store *store,
                          pkv_engine_stats *totals)
{
    memset(s, 0, sizeof *s);
    s->policy = p->policy;
    s->kv = kv;
    s->store = store;
    s->totals = totals;
    s->alloc = *a;
    return pkv__map_reserve(&s->tenant_blocks, a, p->max_num_seqs);
}

void pkv__seqs_release(pkv__seqs *s)
{
    const pkv__allocator *a = &s->alloc;
    pkv__seq_list *lists[] = {&s->waiting, &s->running, &s->swapped,
                              &s->ended};
    for (size_t l = 0; l < 4; l++) {
        for (uint32_t i = 0; i < lists[l]->count; i++)
            pkv__seq_free(lists[l]->items[i], a);
        pkv__seq_list_release(lists[l], a);
    }
    pkv__map_release(&s->tenant_blocks, a);
    pkv__map_release(&s->by_id, a);
}

pkv__seq *pkv__seqs_find(const pkv__seqs *seqs, pkv_seq_id id)
{
    pkv__seq *s = (pkv__seq *)(uintptr_t)pkv__map_get(&seqs->by_id, id);
    return s != NULL && s->state != PKV__SEQ_FINISHED ? s : NULL;
}

void pkv__seqs_drop_kv(pkv__seqs *s, pkv__seq *seq)
{
    pkv__seqs_tenant_add(s, seq->tenant,
                         -(int64_t)pkv__kv_held(s->kv, &seq->kv));
    pkv__kv_drop(s->kv, &seq->kv);
}

void pkv__seqs_count_blocks(pkv__seqs *seqs, const pkv__seq *seq,
                            uint32_t before)
{
    pkv__seqs_tenant_add(seqs, seq->tenant,
                         (int64_t)pkv__kv_held(seqs->kv, &seq->kv) -
                             (int64_t)before);
}

/* Remove the ended sequences from a list, keeping the others' order. */
static void sweep(pkv__seq_list *list)
{
    uint32_t kept = 0;
    for (uint32_t i = 0; i < list->count; i++)
        if (list->items[i]->state != PKV__SEQ_FINISHED)
            list->items[kept++] = list->items[i];
    list->count = kept;
}

void pkv__seqs_sweep_ended(pkv__seqs *s)
{
    if (s->unswept & (1u << PKV__SEQ_WAITING))
        sweep(&s->waiting);
    if (s->unswept & (1u << PKV__SEQ_RUNNING))
        sweep(&s->running);
    if (s->unswept & (1u << PKV__SEQ_SWAPPED))
        sweep(&s->swapped);
    s->unswept = 0;
}

void pkv__seqs_end(pkv__seqs *s, pkv__seq *seq, int32_t reason,
                   pkv_status status)
{
    s->unswept |= 1u << seq->state;
    if (seq->store.state == PKV__STORE_LOADING)
        pkv__store_forget(s->store, seq, 0);
    pkv__seqs_drop_kv(s, seq);
    pkv__kv_drop_swap(s->kv, &seq->kv, &s->alloc);
    seq->state = PKV__SEQ_FINISHED;
    seq->finish.id = seq->id;
    seq->finish.reason = reason;
    seq->finish.status = status;
    seq->finish.num_generated = seq->num_generated;
    pkv__seq_list_insert(&s->ended, s->ended.count, seq);
    s->totals->seqs_finished++;
}

void pkv__seqs_recompute(pkv__seqs *s, pkv__seq *seq)
{
    seq->num_computed = 0;
    seq->state = PKV__SEQ_WAITING;
    seq->store.state = PKV__STORE_NOT_ASKED; /* it may hold them now */
    pkv__seqs_enqueue(s, &s->waiting, seq);
}

/* Every sequence list gets room for every live sequence, so that moving
 * sequences between lists never allocates. */
pkv_status pkv__seqs_reserve(pkv__seqs *s, uint64_t live)
{
    const pkv__allocator *a = &s->alloc;
    if (live > UINT32_MAX)
        return PKV_ERR_OUT_OF_MEMORY;
    pkv__seq_list *lists[] = {&s->waiting, &s->running, &s->swapped,
                              &s->ended};
    for (size_t l = 0; l < 4; l++) {
        pkv_status st = pkv__seq_list_reserve(lists[l], a, (uint32_t)live);
        if (st != PKV_OK)
            return st;
    }
    return pkv__map_reserve(&s->by_id, a, live);
}

uint64_t pkv__seqs_tenant_blocks(const pkv__seqs *s, uint32_t tenant)
{
    return pkv__map_get(&s->tenant_blocks, tenant);
}

void pkv__seqs_tenant_add(pkv__seqs *s, uint32_t tenant, int64_t delta)
{
    /* Most decode steps add no block: skip the two map look-ups. */
    if (delta == 0)
        return;
    uint64_t n = pkv__map_get(&s->tenant_blocks, tenant);
    pkv__map_put(&s->tenant_blocks, tenant, (uint64_t)((int64_t)n + delta));
}

/* Policy order of waiting and swapped sequences. */
static int comes_before(const pkv__seqs *s, const pkv__seq *a,
                        const pkv__seq *b)
{
    if (s->policy == PKV_SCHED_POLICY_PRIORITY &&
        a->order.priority != b->order.priority)
        return a->order.priority < b->order.priority;
    return a->order.arrival < b->order.arrival;
}

void pkv__seqs_enqueue(const pkv__seqs *s, pkv__seq_list *list,
                       pkv__seq *seq)
{
    uint32_t at = list->count;
    while (at > 0 && comes_before(s, seq, list->items[at - 1]))
        at--;
    pkv__seq_list_insert(list, at, seq);
}

pkv_status pkv__engine_find_between_steps(pkv_engine *e, pkv_seq_id id,
                                          const char *what, pkv__seq **out)
{
    *out = NULL;
    if (e->step.in_step)
        return pkv__engine_fail(e->message, PKV_ERR_BAD_STATE,
                                "%s during a step: call it after step_end",
                                what);
    *out = pkv__seqs_find(&e->seqs, id);
    if (*out == NULL && pkv__inbox_queued(&e->inbox, id))
        return pkv__engine_fail(e->message, PKV_ERR_BAD_STATE,
                                "sequence %llu has not run yet",
                                (unsigned long long)id);
    if (*out == NULL)
        return pkv__engine_fail(e->message, PKV_ERR_NOT_FOUND,
                                "sequence %llu is not live",
                                (unsigned long long)id);
    return PKV_OK;
}

void pkv__seqs_cut_kv(pkv__seqs *s, pkv__seq *seq, uint32_t keep)
{
    uint32_t before = pkv__kv_held(s->kv, &seq->kv);
    seq->num_computed = pkv__kv_cut(s->kv, &seq->kv, seq->num_computed, keep);
    pkv__seqs_count_blocks(s, seq, before);
}

void pkv__seqs_join(pkv__seqs *s, pkv__seq *seq, uint8_t state)
{
    seq->state = state;
    pkv__map_put(&s->by_id, seq->id, (uint64_t)(uintptr_t)seq);
    if (seq->num_tokens > s->longest_tokens)
        s->longest_tokens = seq->num_tokens;
    if (state == PKV__SEQ_RUNNING)
        pkv__seq_list_insert(&s->running, s->running.count, seq);
    else
        pkv__seqs_enqueue(s, state == PKV__SEQ_SWAPPED ? &s->swapped
                                                       : &s->waiting,
                          seq);
}

pkv_status pkv__seqs_take_inbox(pkv__seqs *s, pkv__inbox *inbox)
{
    pkv__seq *adds;
    pkv_seq_id *aborts;
    uint32_t num_aborts;
    size_t abort_capacity;
    for (;;) {
        /* More may arrive between the count and the take: then again. */
        uint64_t live = pkv__inbox_live_count(inbox) + 16;
        pkv_status st = pkv__seqs_reserve(s, live);
        if (st != PKV_OK)
            return st;
        if (pkv__inbox_take(inbox, live, &adds, &aborts, &num_aborts,
                            &abort_capacity))
            break;
    }
    while (adds != NULL) {
        pkv__seq *seq = adds;
        adds = seq->inbox_next;
        seq->inbox_next = NULL;
        pkv__seqs_join(s, seq, PKV__SEQ_WAITING);
    }
    for (uint32_t i = 0; i < num_aborts; i++) {
        pkv__seq *seq = pkv__seqs_find(s, aborts[i]);
        if (seq != NULL)
            pkv__seqs_end(s, seq, PKV_FINISH_REASON_ABORTED, PKV_OK);
    }
    pkv__seqs_sweep_ended(s);
    pkv__free(&s->alloc, aborts, abort_capacity, sizeof *aborts);
    return PKV_OK;
}

