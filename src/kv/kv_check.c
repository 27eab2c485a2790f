/* SPDX-License-Identifier: MIT */
/* The KV-cache manager's invariants (kv.h), which the engine's check
 * (check.c) runs in debug builds and the tests run after every call. */
#include "kv/kv.h"

#include "error.h"

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
            return pkv__describe(buf, size, "block %u: state %u", (unsigned)b,
                          (unsigned)k->state);
        by_state[k->state]++;
        if (k->state == PKV__BLOCK_USED) {
            if (k->ref_count == 0)
                return pkv__describe(
                    buf, size, "block %u: used with no reference", (unsigned)b);
            fills += k->fill;
            if (k->group >= PKV__MAX_GROUPS)
                return pkv__describe(buf, size, "block %u: group %u",
                                     (unsigned)b, (unsigned)k->group);
            group_used[k->group]++;
            group_fills[k->group] += k->fill;
        } else if (!reserved && k->ref_count != 0) {
            return pkv__describe(buf, size,
                                 "block %u: %u references but not used",
                                 (unsigned)b, (unsigned)k->ref_count);
        }
        if (reserved && (k->cached || k->ref_count != 0 || k->fill != 0))
            return pkv__describe(buf, size, "the null block: cached %u, %u "
                          "references, fill %u: it holds nobody's KV",
                          (unsigned)k->cached, (unsigned)k->ref_count,
                          (unsigned)k->fill);
        if (k->state == PKV__BLOCK_FREE && k->cached)
            return pkv__describe(buf, size, "block %u: free but cached",
                          (unsigned)b);
        if (k->state == PKV__BLOCK_CACHED_FREE && !k->cached)
            return pkv__describe(buf, size, "block %u: cached-free, not cached",
                          (unsigned)b);
    }
    if (by_state[PKV__BLOCK_FREE] != p->num_free ||
        by_state[PKV__BLOCK_CACHED_FREE] != p->num_cached_free ||
        by_state[PKV__BLOCK_USED] + 1 != p->num_used)
        return pkv__describe(buf, size,
                      "pool counts free %u, cached-free %u, used %u; blocks "
                      "say %u, %u, %u",
                      (unsigned)p->num_free, (unsigned)p->num_cached_free,
                      (unsigned)p->num_used,
                      (unsigned)by_state[PKV__BLOCK_FREE],
                      (unsigned)by_state[PKV__BLOCK_CACHED_FREE],
                      (unsigned)by_state[PKV__BLOCK_USED] + 1);
    if (queue_ok(p, &p->free_queue, p->num_free, PKV__BLOCK_FREE) != 0)
        return pkv__describe(buf, size, "free queue does not hold the %u free "
                      "blocks", (unsigned)p->num_free);
    if (queue_ok(p, &p->lru_queue, p->num_cached_free,
                 PKV__BLOCK_CACHED_FREE) != 0)
        return pkv__describe(buf, size,
                             "LRU queue does not hold the %u cached-free "
                             "blocks",
                             (unsigned)p->num_cached_free);
    if (fills != p->tokens_stored)
        return pkv__describe(
            buf, size, "tokens_stored %llu, used blocks hold %llu",
            (unsigned long long)p->tokens_stored, (unsigned long long)fills);
    for (uint32_t g = 0; g < PKV__MAX_GROUPS; g++)
        if (group_used[g] != p->group_used[g] ||
            group_fills[g] != p->group_tokens[g])
            return pkv__describe(buf, size, "group %u: counted %u blocks, %llu "
                          "tokens; blocks say %u, %llu", (unsigned)g,
                          (unsigned)p->group_used[g],
                          (unsigned long long)p->group_tokens[g],
                          (unsigned)group_used[g],
                          (unsigned long long)group_fills[g]);
    return NULL;
}

/* Group g's table of a running sequence (id, computed tokens, covered:
 * the tokens it has slots for now) against the pool; counts its
 * references into refs. */
static const char *check_table(const pkv__kv *kv, const pkv__kv_seq *s,
                               uint32_t g, pkv_seq_id id, uint32_t computed,
                               uint32_t covered, uint32_t *refs, char *buf,
                               size_t size)
{
    const pkv__table *t = pkv__kv_table(s, g);
    uint32_t bs = kv->pool.block_size;
    if (t->first_held > t->num_blocks ||
        (t->first_held > 0 && pkv__groups_window(&kv->groups, g) == 0))
        return pkv__describe(buf, size, "seq %llu: group %u dropped %u of "
                             "%u blocks", (unsigned long long)id,
                             (unsigned)g, (unsigned)t->first_held,
                             (unsigned)t->num_blocks);
    /* Its blocks are exactly those its next row (or this step's first)
     * sees and the ones after: none it sees was dropped, none wholly
     * behind its window is held (pkv.h's give-back promise). */
    uint32_t seen = pkv__groups_first_seen(&kv->groups, g, bs, computed);
    if (t->first_held != seen)
        return pkv__describe(buf, size, "seq %llu: group %u holds blocks "
                             "from %u; its row at %u sees blocks from %u",
                             (unsigned long long)id, (unsigned)g,
                             (unsigned)t->first_held, (unsigned)computed,
                             (unsigned)seen);
    if (t->num_blocks != (t->num_tokens + bs - 1) / bs)
        return pkv__describe(buf, size, "seq %llu: %u blocks for %u tokens",
                             (unsigned long long)id, (unsigned)t->num_blocks,
                             (unsigned)t->num_tokens);
    /* Slots cover exactly the computed tokens, plus the step's rows. */
    if (t->num_tokens != covered)
        return pkv__describe(buf, size,
                             "seq %llu: slots for %u tokens, computed %u "
                             "(+%u scheduled)",
                             (unsigned long long)id, (unsigned)t->num_tokens,
                             (unsigned)computed,
                             (unsigned)(covered - computed));
    for (uint32_t i = 0; i < t->first_held; i++)
        if (t->blocks[i] != PKV__NULL_BLOCK)
            return pkv__describe(buf, size, "seq %llu: dropped block %u is "
                                 "%u", (unsigned long long)id, (unsigned)i,
                                 (unsigned)t->blocks[i]);
    for (uint32_t i = t->first_held; i < t->num_blocks; i++) {
        uint32_t b = t->blocks[i];
        if (b == PKV__NULL_BLOCK || b >= kv->pool.num_blocks)
            return pkv__describe(buf, size, "seq %llu: block %u is %u",
                                 (unsigned long long)id, (unsigned)i,
                                 (unsigned)b);
        uint32_t want = t->num_tokens - i * bs < bs ? t->num_tokens - i * bs
                                                    : bs;
        /* A truncate inside a block others hold (or the prefix cache)
         * leaves its fill: the next append copies or rewrites it. */
        const pkv__block *k = &kv->pool.blocks[b];
        if (k->group != g)
            return pkv__describe(buf, size, "seq %llu: block %u (%u) of "
                                 "group %u is counted in group %u",
                                 (unsigned long long)id, (unsigned)i,
                                 (unsigned)b, (unsigned)g,
                                 (unsigned)k->group);
        int last_kept = i + 1 == t->num_blocks && k->fill > want;
        if (k->fill != want && !last_kept)
            return pkv__describe(buf, size, "seq %llu: block %u (%u) holds "
                                 "%u tokens, the table says %u",
                                 (unsigned long long)id, (unsigned)i,
                                 (unsigned)b, (unsigned)k->fill,
                                 (unsigned)want);
        refs[b]++;
    }
    return NULL;
}

/* A running quantized sequence's rollback windows (rollback.h) hold
 * blocks it froze, each in its own tail: logical block j in window
 * j % W. */
static const char *check_windows(const pkv__kv *kv, const pkv__kv_seq *s,
                                 pkv_seq_id id, uint32_t computed, char *buf,
                                 size_t size)
{
    const pkv__rollback *r = &kv->rollback;
    if (r->window_blocks == NULL)
        return NULL;
    const uint32_t *held = pkv__rollback_held(r, s->stage);
    uint32_t frozen = computed / kv->pool.block_size, w = r->window;
    for (uint32_t k = 0; k < w; k++)
        if (held[k] != PKV__NO_BLOCK && (held[k] % w != k || held[k] >= frozen))
            return pkv__describe(buf, size, "seq %llu: window %u holds block "
                                 "%u; %u blocks frozen",
                                 (unsigned long long)id, (unsigned)k,
                                 (unsigned)held[k], (unsigned)frozen);
    return NULL;
}

const char *pkv__kv_check_seq(const pkv__kv *kv, const pkv__kv_seq *s,
                              const pkv__kv_seq_state *at,
                              pkv__kv_tally *tally, char *buf, size_t size)
{
    const pkv__kv_record *r = s->record;
    if (at->running) {
        for (uint32_t g = 0; g < r->groups; g++) {
            const char *why = check_table(kv, s, g, at->id, at->computed,
                                          at->covered, tally->refs, buf,
                                          size);
            if (why != NULL)
                return why;
        }
        if ((kv->max_stages > 0) != (s->stage != PKV__NO_STAGE))
            return pkv__describe(buf, size, "seq %llu: running with stage "
                                 "%u", (unsigned long long)at->id,
                                 (unsigned)s->stage);
        tally->stages += s->stage != PKV__NO_STAGE;
        return check_windows(kv, s, at->id, at->computed, buf, size);
    }
    if (pkv__kv_held(kv, s) != 0 || s->stage != PKV__NO_STAGE)
        return pkv__describe(buf, size, "seq %llu (not running) holds %u "
                             "blocks, stage %u",
                             (unsigned long long)at->id,
                             (unsigned)pkv__kv_held(kv, s), (unsigned)s->stage);
    if (at->swapped != (r->swap != NULL))
        return pkv__describe(buf, size, "seq %llu (%s swapped out): swap "
                             "data %p", (unsigned long long)at->id,
                             at->swapped ? "" : "not ", (void *)r->swap);
    if (r->swap != NULL && !r->swap_imported)
        tally->swap += r->swap_size;
    return NULL;
}

const char *pkv__kv_check(const pkv__kv *kv, const pkv__kv_tally *tally,
                          uint64_t swap_bytes, char *buf, size_t size)
{
    const pkv__pool *pool = &kv->pool;
    const char *why = check_pool(pool, buf, size);
    if (why != NULL)
        return why;
    for (uint32_t b = 1; tally->refs != NULL && b < pool->num_blocks; b++)
        if (tally->refs[b] != pool->blocks[b].ref_count)
            return pkv__describe(buf, size,
                                 "block %u: ref_count %u, held by %u tables",
                                 (unsigned)b,
                                 (unsigned)pool->blocks[b].ref_count,
                                 (unsigned)tally->refs[b]);
    if (tally->swap != kv->swap_used || tally->swap > swap_bytes)
        return pkv__describe(buf, size,
                             "swap_used %llu, swapped sequences hold %llu, "
                             "of %llu",
                             (unsigned long long)kv->swap_used,
                             (unsigned long long)tally->swap,
                             (unsigned long long)swap_bytes);
    if (kv->max_stages > 0 &&
        tally->stages + kv->num_free_stages != kv->max_stages)
        return pkv__describe(buf, size, "%u staging tails held, %u free, of "
                             "%u", (unsigned)tally->stages,
                             (unsigned)kv->num_free_stages,
                             (unsigned)kv->max_stages);
    for (uint32_t i = 0; kv->rollback.window_blocks != NULL &&
                         i < kv->num_free_stages;
         i++) {
        const uint32_t *held =
            pkv__rollback_held(&kv->rollback, kv->free_stages[i]);
        for (uint32_t k = 0; k < kv->rollback.window; k++)
            if (held[k] != PKV__NO_BLOCK)
                return pkv__describe(buf, size, "free staging tail %u: "
                                     "window %u holds block %u",
                                     (unsigned)kv->free_stages[i],
                                     (unsigned)k, (unsigned)held[k]);
    }
    return NULL;
}
