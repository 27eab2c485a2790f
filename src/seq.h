/* SPDX-License-Identifier: MIT */
/* A sequence (request) and the ordered lists the scheduler keeps them in. */
#ifndef PKV_SEQ_H
#define PKV_SEQ_H

#include "backend.h"
#include "kv/kv.h"
#include "prefetch.h"
#include "store/store_seq.h"

enum pkv__seq_state {
    PKV__SEQ_QUEUED = 0, /* in the inbox, not yet seen by the scheduler */
    PKV__SEQ_WAITING = 1,
    PKV__SEQ_RUNNING = 2,
    PKV__SEQ_SWAPPED = 3,
    PKV__SEQ_FINISHED = 4 /* ended, not yet reported in a batch */
};

typedef struct pkv__seq {
    /* What a step reads or writes for each sequence it runs comes first,
     * together, so that a step touches two of the sequence's cache
     * lines, not three or four (malloc aligns it to 16 bytes, not to a
     * line): a host's forward pass between two steps evicts them, and
     * each line a step touches per sequence is then a miss (callgrind,
     * pkv-bench scheduler's loaded rows; docs/performance.md). step_end
     * reads only the first 64 bytes. Aligning the struct to a cache line
     * made warm steps over long prompts 1.5x slower, for a reason not
     * found: not done. */

    /* step_end's: */
    pkv_seq_id id;
    /* Every token: the prompt, then each sampled one. The last sampled
     * token has no KV yet: it is the next decode row. A scheduled
     * sequence has room for one more token (pkv__plan_reserve), so
     * step_end never allocates. */
    int32_t *tokens;
    uint32_t num_tokens;
    uint32_t num_computed; /* tokens whose KV is in the cache */
    struct {
        uint32_t rows;   /* its rows in the current step */
        uint32_t drafts; /* the last of them: drafts (see below) */
    } step;
    uint32_t num_generated;
    uint32_t max_new_tokens;
    uint8_t state; /* enum pkv__seq_state */
    /* Anti-thrash: set when resumed after a preemption, cleared when it
     * samples a token; while set it is not chosen as a victim (except by
     * the oldest running sequence, which must always progress). */
    uint8_t protect;
    uint32_t tenant;
    /* Its KV (the KV-cache manager's, kv/kv.h): the chain step_end reads
     * in the first 64 bytes, the tables and the tail step_begin reads
     * after it. */
    pkv__kv_seq kv;

    /* The rest of what step_begin reads: */
    uint32_t token_capacity;
    void *user_data; /* the host's, from pkv_seq_params; echoed in batches */

    /* Speculative decoding: the drafts pkv_seq_propose gave for the step
     * numbered drafts.step (stale after it), drafts.count of drafts.size
     * allocated; step.drafts of them are appended to tokens during the
     * step that runs them. */
    struct {
        int32_t *ids;
        uint32_t count;
        uint32_t size;
        uint64_t step;
    } drafts;

    /* The rest changes at admission, preemption, a new full block or the
     * end. */
    uint32_t prompt_len;
    /* Its place in waiting and swapped: by priority under the priority
     * policy, then by arrival (ties broken by id). */
    struct {
        int32_t priority;
        uint64_t arrival;
    } order;

    pkv_finished finish;
    struct pkv__seq *inbox_next;

    /* Its KV store state (store/engine_store.h). */
    pkv__store_seq store;
} pkv__seq;

/* Prefetch what a step reads of the sequence (prefetch.h): its first
 * 128 bytes, or step_end's first 64. */
static inline void pkv__seq_prefetch(const pkv__seq *seq)
{
    const char *at = (const char *)seq;
    PKV__PREFETCH(at);
    PKV__PREFETCH(at + 64);
    PKV__PREFETCH(at + 127);
}

static inline void pkv__seq_prefetch_end(const pkv__seq *seq)
{
    const char *at = (const char *)seq;
    PKV__PREFETCH(at);
    PKV__PREFETCH(at + 63);
}

/* Its tables: the next link of the planner's chain. */
static inline void pkv__seq_prefetch_tables(const pkv__seq *seq)
{
    PKV__PREFETCH(seq->kv.tables);
}

/* Its first table's last block id: the link after. */
static inline void pkv__seq_prefetch_tail(const pkv__seq *seq)
{
    const pkv__table *t = &seq->kv.tables[0];
    if (t->num_blocks > 0)
        PKV__PREFETCH(&t->blocks[t->num_blocks - 1]);
}

/* An array of sequence pointers, items[0 .. count), that may start past
 * the beginning of its allocation (base, capacity entries): a removal or
 * an insertion moves whichever side of it is shorter, so both ends are
 * O(1) (the scheduler admits from the front of a long waiting queue and
 * appends to running). */
typedef struct pkv__seq_list {
    pkv__seq **items;
    uint32_t count;
    pkv__seq **base;
    size_t capacity;
} pkv__seq_list;

/* Room for `needed` items; nothing changes on failure. */
pkv_status pkv__seq_list_reserve(pkv__seq_list *list,
                                 const pkv__allocator *alloc,
                                 uint32_t needed);
void pkv__seq_list_release(pkv__seq_list *list, const pkv__allocator *alloc);
/* Insert at index (<= count); capacity must allow it (count < capacity).
 * O(min(index, count - index)), except when the array must first slide
 * back to its base (amortised O(1)). */
void pkv__seq_list_insert(pkv__seq_list *list, uint32_t index, pkv__seq *seq);
/* O(min(index, count - index)). */
void pkv__seq_list_remove_at(pkv__seq_list *list, uint32_t index);
/* Remove seq from the list if it is there. */
void pkv__seq_list_remove(pkv__seq_list *list, const pkv__seq *seq);
/* Of items[0 .. n), keep those in `state`, in order; the others leave the
 * list. O(n). */
void pkv__seq_list_keep_front(pkv__seq_list *list, uint32_t n, int32_t state);

/* A new sequence holding a copy of the prompt, with room for one more
 * token, and its KV made by kv (pkv__kv_seq_init: the chained hashes of
 * the full blocks of its first `hashed` tokens, 0 for none). NULL when
 * memory runs out. */
pkv__seq *pkv__seq_new(const pkv__allocator *alloc, const pkv__kv *kv,
                       const int32_t *prompt, uint32_t prompt_len,
                       uint64_t salt, uint32_t hashed);
/* Make room for num_tokens + more tokens. */
pkv_status pkv__seq_reserve_tokens(pkv__seq *seq, const pkv__allocator *alloc,
                                   uint32_t more);
/* Free the sequence object; its blocks must be released (pkv__kv_drop). */
void pkv__seq_free(pkv__seq *seq, const pkv__allocator *alloc);

#endif
