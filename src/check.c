/* SPDX-License-Identifier: MIT */
/* Debug-build invariant check of the engine (check.h). */
#include "check.h"
#include "engine.h"
#include "kv_layout.h"
#include "lifecycle.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static const char *broken(char *buf, size_t size, const char *fmt, ...)
    PKV__PRINTF(3, 4);

static const char *broken(char *buf, size_t size, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    vsnprintf(buf, size, fmt, args);
    va_end(args);
    return buf;
}

/* Walk a queue of the pool; 0 if it holds exactly `count` blocks, all in
 * `state`, linked both ways. */
static int queue_ok(const pkv__pool *p, const pkv__queue *q, uint32_t count,
                    uint8_t state)
{
    uint32_t n = 0, prev = PKV__NO_BLOCK;
    for (uint32_t b = q->head; b != PKV__NO_BLOCK; b = p->blocks[b].next) {
        if (b >= p->num_blocks || n >= count || p->blocks[b].state != state ||
            p->blocks[b].prev != prev)
            return -1;
        prev = b;
        n++;
    }
    return n == count && q->tail == prev ? 0 : -1;
}

static const char *check_pool(const pkv__pool *p, char *buf, size_t size)
{
    uint32_t by_state[4] = {0, 0, 0, 0};
    uint64_t fills = 0;
    uint32_t group_used[PKV__MAX_GROUPS] = {0};
    uint64_t group_fills[PKV__MAX_GROUPS] = {0};
    for (uint32_t b = 0; b < p->num_blocks; b++) {
        const pkv__block *k = &p->blocks[b];
        int reserved = k->state == PKV__BLOCK_RESERVED;
        if (reserved != (b == PKV__NULL_BLOCK) || k->state > PKV__BLOCK_USED)
            return broken(buf, size, "block %u: state %u", (unsigned)b,
                          (unsigned)k->state);
        by_state[k->state]++;
        if (k->state == PKV__BLOCK_USED) {
            if (k->ref_count == 0)
                return broken(buf, size, "block %u: used with no reference",
                              (unsigned)b);
            fills += k->fill;
            if (k->group >= PKV__MAX_GROUPS)
                return broken(buf, size, "block %u: group %u", (unsigned)b,
                              (unsigned)k->group);
            group_used[k->group]++;
            group_fills[k->group] += k->fill;
        } else if (!reserved && k->ref_count != 0) {
            return broken(buf, size, "block %u: %u references but not used",
                          (unsigned)b, (unsigned)k->ref_count);
        }
        if (reserved && (k->cached || k->ref_count != 0 || k->fill != 0))
            return broken(buf, size, "the null block: cached %u, %u "
                          "references, fill %u: it holds nobody's KV",
                          (unsigned)k->cached, (unsigned)k->ref_count,
                          (unsigned)k->fill);
        if (k->state == PKV__BLOCK_FREE && k->cached)
            return broken(buf, size, "block %u: free but cached",
                          (unsigned)b);
        if (k->state == PKV__BLOCK_CACHED_FREE && !k->cached)
            return broken(buf, size, "block %u: cached-free, not cached",
                          (unsigned)b);
    }
    if (by_state[PKV__BLOCK_FREE] != p->num_free ||
        by_state[PKV__BLOCK_CACHED_FREE] != p->num_cached_free ||
        by_state[PKV__BLOCK_USED] + 1 != p->num_used)
        return broken(buf, size,
                      "pool counts free %u, cached-free %u, used %u; blocks "
                      "say %u, %u, %u",
                      (unsigned)p->num_free, (unsigned)p->num_cached_free,
                      (unsigned)p->num_used,
                      (unsigned)by_state[PKV__BLOCK_FREE],
                      (unsigned)by_state[PKV__BLOCK_CACHED_FREE],
                      (unsigned)by_state[PKV__BLOCK_USED] + 1);
    if (queue_ok(p, &p->free_queue, p->num_free, PKV__BLOCK_FREE) != 0)
        return broken(buf, size, "free queue does not hold the %u free "
                      "blocks", (unsigned)p->num_free);
    if (queue_ok(p, &p->lru_queue, p->num_cached_free,
                 PKV__BLOCK_CACHED_FREE) != 0)
        return broken(buf, size, "LRU queue does not hold the %u cached-free "
                      "blocks", (unsigned)p->num_cached_free);
    if (fills != p->tokens_stored)
        return broken(buf, size, "tokens_stored %llu, used blocks hold %llu",
                      (unsigned long long)p->tokens_stored,
                      (unsigned long long)fills);
    for (uint32_t g = 0; g < PKV__MAX_GROUPS; g++)
        if (group_used[g] != p->group_used[g] ||
            group_fills[g] != p->group_tokens[g])
            return broken(buf, size, "group %u: counted %u blocks, %llu "
                          "tokens; blocks say %u, %llu", (unsigned)g,
                          (unsigned)p->group_used[g],
                          (unsigned long long)p->group_tokens[g],
                          (unsigned)group_used[g],
                          (unsigned long long)group_fills[g]);
    return NULL;
}

/* A running sequence's table of group g against its tokens and the pool;
 * counts its references into refs. */
static const char *check_table(const pkv_engine *e, const pkv__seq *s,
                               uint32_t g, uint32_t *refs, char *buf,
                               size_t size)
{
    const pkv__table *t = pkv__kv_table(&s->kv, g);
    uint32_t bs = e->kv.pool.block_size;
    if (t->first_held > t->num_blocks ||
        (t->first_held > 0 && pkv__groups_window(&e->kv.groups, g) == 0))
        return broken(buf, size, "seq %llu: group %u dropped %u of %u "
                      "blocks", (unsigned long long)s->id, (unsigned)g,
                      (unsigned)t->first_held, (unsigned)t->num_blocks);
    /* Its blocks are exactly those its next row (or this step's first)
     * sees and the ones after: none it sees was dropped, none wholly
     * behind its window is held (pkv.h's give-back promise). */
    uint32_t seen = pkv__groups_first_seen(&e->kv.groups, g, bs, s->num_computed);
    if (t->first_held != seen)
        return broken(buf, size, "seq %llu: group %u holds blocks from %u; "
                      "its row at %u sees blocks from %u",
                      (unsigned long long)s->id, (unsigned)g,
                      (unsigned)t->first_held, (unsigned)s->num_computed,
                      (unsigned)seen);
    if (t->num_blocks != (t->num_tokens + bs - 1) / bs)
        return broken(buf, size, "seq %llu: %u blocks for %u tokens",
                      (unsigned long long)s->id, (unsigned)t->num_blocks,
                      (unsigned)t->num_tokens);
    /* Slots cover exactly the computed tokens, plus the step's rows. */
    uint32_t covered = s->num_computed + (e->step.in_step ? s->scheduled : 0);
    if (t->num_tokens != covered || covered > s->num_tokens)
        return broken(buf, size,
                      "seq %llu: slots for %u tokens, computed %u (+%u "
                      "scheduled), tokens %u",
                      (unsigned long long)s->id, (unsigned)t->num_tokens,
                      (unsigned)s->num_computed,
                      (unsigned)(e->step.in_step ? s->scheduled : 0),
                      (unsigned)s->num_tokens);
    for (uint32_t i = 0; i < t->first_held; i++)
        if (t->blocks[i] != PKV__NULL_BLOCK)
            return broken(buf, size, "seq %llu: dropped block %u is %u",
                          (unsigned long long)s->id, (unsigned)i,
                          (unsigned)t->blocks[i]);
    for (uint32_t i = t->first_held; i < t->num_blocks; i++) {
        uint32_t b = t->blocks[i];
        if (b == PKV__NULL_BLOCK || b >= e->kv.pool.num_blocks)
            return broken(buf, size, "seq %llu: block %u is %u",
                          (unsigned long long)s->id, (unsigned)i,
                          (unsigned)b);
        uint32_t want = t->num_tokens - i * bs < bs ? t->num_tokens - i * bs
                                                    : bs;
        /* A truncate inside a block others hold (or the prefix cache)
         * leaves its fill: the next append copies or rewrites it. */
        const pkv__block *k = &e->kv.pool.blocks[b];
        if (k->group != g)
            return broken(buf, size, "seq %llu: block %u (%u) of group %u "
                          "is counted in group %u",
                          (unsigned long long)s->id, (unsigned)i,
                          (unsigned)b, (unsigned)g, (unsigned)k->group);
        int last_kept = i + 1 == t->num_blocks && k->fill > want;
        if (k->fill != want && !last_kept)
            return broken(buf, size, "seq %llu: block %u (%u) holds %u "
                          "tokens, the table says %u",
                          (unsigned long long)s->id, (unsigned)i,
                          (unsigned)b, (unsigned)e->kv.pool.blocks[b].fill,
                          (unsigned)want);
        refs[b]++;
    }
    return NULL;
}

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
            sum += pkv__kv_held(&run[i]->kv);
        uint64_t counted = pkv__seqs_tenant_blocks(&e->seqs, t);
        if (counted != sum)
            return broken(buf, size, "tenant %u: counted %llu blocks, holds "
                          "%llu", (unsigned)t, (unsigned long long)counted,
                          (unsigned long long)sum);
        tenants += sum != 0;
    }
    if (e->seqs.tenant_blocks.count != tenants)
        return broken(buf, size, "tenant map holds %u tenants, %u hold "
                      "blocks", (unsigned)e->seqs.tenant_blocks.count,
                      (unsigned)tenants);
    return NULL;
}

/* A running U8 sequence's rollback windows (rollback.h) hold blocks it
 * sealed, each in its own tail: logical block j in window j % W. */
static const char *check_windows(const pkv_engine *e, const pkv__seq *s,
                                 char *buf, size_t size)
{
    uint32_t w = e->params.u8_rollback_blocks;
    if (e->rollback.window_blocks == NULL)
        return NULL;
    const uint32_t *held = e->rollback.window_blocks + s->stage * w;
    uint32_t sealed = s->num_computed / e->params.block_size;
    for (uint32_t k = 0; k < w; k++)
        if (held[k] != PKV__NO_BLOCK && (held[k] % w != k || held[k] >= sealed))
            return broken(buf, size, "seq %llu: window %u holds block %u; "
                          "%u blocks sealed",
                          (unsigned long long)s->id, (unsigned)k,
                          (unsigned)held[k], (unsigned)sealed);
    return NULL;
}

static const char *check_seqs(const pkv_engine *e, uint32_t *refs,
                              const pkv__seq **all, char *buf, size_t size)
{
    const pkv__seq_list *lists[] = {&e->seqs.waiting, &e->seqs.running, &e->seqs.swapped,
                                    &e->seqs.ended};
    const int32_t states[] = {PKV__SEQ_WAITING, PKV__SEQ_RUNNING,
                              PKV__SEQ_SWAPPED, PKV__SEQ_FINISHED};
    size_t n = 0;
    uint64_t swap = 0;
    uint32_t stages_held = 0;
    int u8 = PKV_LAYOUT_QUANTIZED(e->params.kv_dtype);
    for (size_t l = 0; l < 4; l++) {
        for (uint32_t i = 0; i < lists[l]->count; i++) {
            const pkv__seq *s = lists[l]->items[i];
            all[n++] = s;
            if (pkv__map_get(&e->seqs.by_id, s->id) != (uintptr_t)s)
                return broken(buf, size, "seq %llu: not in the id map",
                              (unsigned long long)s->id);
            if (s->num_tokens > e->seqs.longest_tokens)
                return broken(buf, size, "seq %llu: %u tokens, longest_tokens "
                              "%u", (unsigned long long)s->id,
                              (unsigned)s->num_tokens,
                              (unsigned)e->seqs.longest_tokens);
            if (s->num_tokens > s->token_capacity)
                return broken(buf, size, "seq %llu: %u tokens, room for %u",
                              (unsigned long long)s->id,
                              (unsigned)s->num_tokens, s->token_capacity);
            /* step_end appends what it samples without allocating. */
            if (s->scheduled > 0 && s->num_tokens >= s->token_capacity)
                return broken(buf, size,
                              "seq %llu: runs with no room for the token "
                              "it samples (%u tokens, room for %u)",
                              (unsigned long long)s->id,
                              (unsigned)s->num_tokens, s->token_capacity);
            if (s->state != states[l])
                return broken(buf, size, "seq %llu: state %d in list %d",
                              (unsigned long long)s->id, (int)s->state,
                              (int)states[l]);
            if (states[l] == PKV__SEQ_RUNNING) {
                const char *why = NULL;
                for (uint32_t g = 0; why == NULL && g < s->kv.groups;
                     g++)
                    why = check_table(e, s, g, refs, buf, size);
                if (why != NULL)
                    return why;
                if (u8 != (s->stage != PKV__NO_STAGE))
                    return broken(buf, size, "seq %llu: running with stage "
                                  "%u", (unsigned long long)s->id,
                                  (unsigned)s->stage);
                stages_held += (uint32_t)u8;
                why = check_windows(e, s, buf, size);
                if (why != NULL)
                    return why;
                continue;
            }
            if (pkv__kv_held(&s->kv) != 0 || s->stage != PKV__NO_STAGE)
                return broken(buf, size, "seq %llu (state %d) holds %u "
                              "blocks, stage %u",
                              (unsigned long long)s->id, (int)s->state,
                              (unsigned)pkv__kv_held(&s->kv),
                              (unsigned)s->stage);
            if ((states[l] == PKV__SEQ_SWAPPED) != (s->swap_data != NULL))
                return broken(buf, size, "seq %llu (state %d): swap data %p",
                              (unsigned long long)s->id, (int)s->state,
                              s->swap_data);
            if (s->swap_data != NULL && !s->swap_imported)
                swap += s->swap_size;
        }
    }
    if (e->seqs.by_id.count != n)
        return broken(buf, size, "id map holds %u sequences, the lists %zu",
                      (unsigned)e->seqs.by_id.count, n);
    if (swap != e->seqs.swap_used || swap > e->params.swap_bytes)
        return broken(buf, size,
                      "swap_used %llu, swapped sequences hold %llu, of %llu",
                      (unsigned long long)e->seqs.swap_used,
                      (unsigned long long)swap,
                      (unsigned long long)e->params.swap_bytes);
    if (e->seqs.running.count > e->params.max_num_seqs)
        return broken(buf, size, "%u running, max_num_seqs %u",
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
            return broken(buf, size, "seq %llu is listed twice",
                          (unsigned long long)all[i]->id);
    if (u8 && stages_held + e->seqs.num_free_stages != e->params.max_num_seqs)
        return broken(buf, size, "%u staging tails held, %u free, of %u",
                      (unsigned)stages_held, (unsigned)e->seqs.num_free_stages,
                      (unsigned)e->params.max_num_seqs);
    for (uint32_t i = 0; e->rollback.window_blocks != NULL && i < e->seqs.num_free_stages;
         i++) {
        uint32_t w = e->params.u8_rollback_blocks;
        const uint32_t *held = e->rollback.window_blocks + e->seqs.free_stages[i] * w;
        for (uint32_t k = 0; k < w; k++)
            if (held[k] != PKV__NO_BLOCK)
                return broken(buf, size, "free staging tail %u: window %u "
                              "holds block %u", (unsigned)e->seqs.free_stages[i],
                              (unsigned)k, (unsigned)held[k]);
    }
    return NULL;
}

const char *pkv__engine_check(const pkv_engine *e, char *buf, size_t size)
{
    const char *why = check_pool(&e->kv.pool, buf, size);
    if (why != NULL)
        return why;
    size_t seqs = (size_t)e->seqs.waiting.count + e->seqs.running.count +
                  e->seqs.swapped.count + e->seqs.ended.count;
    uint32_t *refs = calloc(e->kv.pool.num_blocks, sizeof *refs);
    const pkv__seq **all = calloc(seqs ? seqs : 1, sizeof *all);
    if (refs != NULL && all != NULL) { /* else: not checked */
        why = check_seqs(e, refs, all, buf, size);
        for (uint32_t b = 1; why == NULL && b < e->kv.pool.num_blocks; b++)
            if (refs[b] != e->kv.pool.blocks[b].ref_count)
                why = broken(buf, size,
                             "block %u: ref_count %u, held by %u tables",
                             (unsigned)b,
                             (unsigned)e->kv.pool.blocks[b].ref_count,
                             (unsigned)refs[b]);
    }
    free(refs);
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
