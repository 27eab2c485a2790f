/* SPDX-License-Identifier: MIT */
/* Debug-build invariant check of the engine (check.h). */
#include "check.h"
#include "engine.h"
#include "seqs.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int by_address(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (const pkv__seq *const *)a;
    uintptr_t y = (uintptr_t) * (const pkv__seq *const *)b;
    return x < y ? -1 : x > y;
}

static int by_tenant(const void *a, const void *b)
{
    uint32_t x = (*(const pkv__seq *const *)a)->tenant;
    uint32_t y = (*(const pkv__seq *const *)b)->tenant;
    return x < y ? -1 : x > y;
}

/* The tenant map against a recount over the running sequences (sorted by
 * tenant in place), the only ones with blocks. */
static const char *check_tenants(const pkv_engine *e, const pkv__seq **run,
                                 uint32_t n, char *buf, size_t size)
{
    qsort(run, n, sizeof *run, by_tenant);
    uint32_t tenants = 0;
    for (uint32_t i = 0; i < n;) {
        uint32_t t = run[i]->tenant;
        uint64_t sum = 0;
        for (; i < n && run[i]->tenant == t; i++)
            sum += pkv__kv_held(&e->kv, &run[i]->kv);
        uint64_t counted = pkv__seqs_tenant_blocks(&e->seqs, t);
        if (counted != sum)
            return pkv__describe(buf, size,
                                 "tenant %u: counted %llu blocks, holds "
                                 "%llu",
                                 (unsigned)t, (unsigned long long)counted,
                                 (unsigned long long)sum);
        tenants += sum != 0;
    }
    if (e->seqs.tenant_blocks.count != tenants)
        return pkv__describe(buf, size, "tenant map holds %u tenants, %u hold "
                      "blocks", (unsigned)e->seqs.tenant_blocks.count,
                      (unsigned)tenants);
    return NULL;
}

static const char *check_seqs(const pkv_engine *e, pkv__kv_tally *tally,
                              const pkv__seq **all, char *buf, size_t size)
{
    const pkv__seq_list *lists[] = {&e->seqs.waiting, &e->seqs.running,
                                    &e->seqs.swapped, &e->seqs.ended};
    const int32_t states[] = {PKV__SEQ_WAITING, PKV__SEQ_RUNNING,
                              PKV__SEQ_SWAPPED, PKV__SEQ_FINISHED};
    size_t n = 0;
    for (size_t l = 0; l < 4; l++) {
        for (uint32_t i = 0; i < lists[l]->count; i++) {
            const pkv__seq *s = lists[l]->items[i];
            all[n++] = s;
            if (pkv__map_get(&e->seqs.by_id, s->id) != (uintptr_t)s)
                return pkv__describe(buf, size, "seq %llu: not in the id map",
                              (unsigned long long)s->id);
            if (s->num_tokens > e->seqs.longest_tokens)
                return pkv__describe(buf, size,
                                     "seq %llu: %u tokens, longest_tokens "
                                     "%u",
                                     (unsigned long long)s->id,
                                     (unsigned)s->num_tokens,
                                     (unsigned)e->seqs.longest_tokens);
            if (s->num_tokens > s->token_capacity)
                return pkv__describe(
                    buf, size, "seq %llu: %u tokens, room for %u",
                    (unsigned long long)s->id, (unsigned)s->num_tokens,
                    s->token_capacity);
            /* step_end appends what it samples without allocating. */
            if (s->step.rows > 0 && s->num_tokens >= s->token_capacity)
                return pkv__describe(buf, size,
                              "seq %llu: runs with no room for the token "
                              "it samples (%u tokens, room for %u)",
                              (unsigned long long)s->id,
                              (unsigned)s->num_tokens, s->token_capacity);
            if (s->state != states[l])
                return pkv__describe(buf, size, "seq %llu: state %d in list %d",
                              (unsigned long long)s->id, (int)s->state,
                              (int)states[l]);
            /* Slots cover exactly the computed tokens, plus the step's
             * rows, within its tokens. */
            pkv__kv_seq_state at = {
                s->id, states[l] == PKV__SEQ_RUNNING,
                states[l] == PKV__SEQ_SWAPPED, s->num_computed,
                s->num_computed + (e->step.in_step ? s->step.rows : 0)};
            if (at.covered > s->num_tokens)
                return pkv__describe(buf, size, "seq %llu: slots for %u "
                                     "tokens of %u",
                                     (unsigned long long)s->id,
                                     (unsigned)at.covered,
                                     (unsigned)s->num_tokens);
            const char *why =
                pkv__kv_check_seq(&e->kv, &s->kv, &at, tally, buf, size);
            if (why != NULL)
                return why;
        }
    }
    if (e->seqs.by_id.count != n)
        return pkv__describe(buf, size,
                             "id map holds %u sequences, the lists %zu",
                             (unsigned)e->seqs.by_id.count, n);
    if (e->seqs.running.count > e->params.max_num_seqs)
        return pkv__describe(buf, size, "%u running, max_num_seqs %u",
                      (unsigned)e->seqs.running.count,
                      (unsigned)e->params.max_num_seqs);
    /* running's pointers come first in `all` after waiting's. */
    const char *why = check_tenants(e, all + e->seqs.waiting.count,
                                    e->seqs.running.count, buf, size);
    if (why != NULL)
        return why;
    qsort(all, n, sizeof *all, by_address);
    for (size_t i = 1; i < n; i++)
        if (all[i] == all[i - 1])
            return pkv__describe(buf, size, "seq %llu is listed twice",
                          (unsigned long long)all[i]->id);
    return NULL;
}

const char *pkv__engine_check(const pkv_engine *e, char *buf, size_t size)
{
    size_t seqs = (size_t)e->seqs.waiting.count + e->seqs.running.count +
                  e->seqs.swapped.count + e->seqs.ended.count;
    pkv__kv_tally tally = {calloc(e->kv.pool.num_blocks, sizeof(uint32_t)),
                           0, 0};
    const pkv__seq **all = calloc(seqs ? seqs : 1, sizeof *all);
    const char *why = NULL;
    /* Without memory for the recounts, only the pool is checked. */
    if (tally.refs != NULL && all != NULL)
        why = check_seqs(e, &tally, all, buf, size);
    else
        free(tally.refs), tally.refs = NULL;
    if (why == NULL && tally.refs != NULL)
        why = pkv__kv_check(&e->kv, &tally, e->params.swap_bytes, buf, size);
    free(tally.refs);
    free(all);
    return why;
}

#ifndef NDEBUG
void pkv__engine_check_or_abort(const pkv_engine *e, const char *where)
{
    char buf[256];
    const char *why = pkv__engine_check(e, buf, sizeof buf);
    if (why == NULL)
        return;
    fprintf(stderr, "pkv: engine invariant broken after %s: %s\n", where,
            why);
    abort();
}
#endif
