/* SPDX-License-Identifier: MIT */
/*
 * A step's plan: what the planner decided (planner.c), as data, and the
 * engine's side of it (plan_apply.c). The planner reads const views of
 * the KV-cache manager and the sequences and writes only the plan; the
 * engine first reserves every
 * allocation the plan needs, and only when all of them succeeded applies
 * it, with no step that can fail. So step_begin either applies a whole
 * plan or changes nothing.
 *
 * While it plans, the scheduler keeps a view of what the plan has done so
 * far (blocks available, reference counts and tenant counts as they will
 * be once the plan is applied), because the engine's own state must stay
 * as it was. The engine applies the plan in an order that the view
 * accounts for: every release first (preemptions, ends), then the prefix
 * blocks admissions adopt, then every allocation. An allocation then never
 * evicts a cached block that an admission planned to hit, and never finds
 * fewer blocks than the view counted.
 */
#ifndef PKV_PLAN_H
#define PKV_PLAN_H

#include "kv/prefix.h"
#include "map.h"

struct pkv__seq;
struct pkv__seqs;
struct pkv__step_state;

enum pkv__plan_kind {
    PKV__PLAN_RUN = 1,     /* a running sequence computes `rows` more */
    PKV__PLAN_PREEMPT = 2, /* a running sequence is swapped out or freed
                              for a recompute */
    PKV__PLAN_END = 3,     /* a sequence fails: it can never fit */
    PKV__PLAN_SWAP_IN = 4, /* a swapped sequence comes back with `rows` */
    PKV__PLAN_ADMIT = 5    /* a waiting sequence starts with `hits`
                              prefix blocks and `rows` */
};

typedef struct pkv__plan_item {
    int32_t kind;      /* enum pkv__plan_kind */
    pkv_status status; /* END: why it fails */
    struct pkv__seq *seq;
    uint32_t rows;       /* RUN, SWAP_IN, ADMIT: rows this step */
    uint32_t drafts;     /* RUN: speculative drafts after its row */
    uint32_t hits;       /* ADMIT: its prefix hit, in blocks (kv.h's
                            pkv__kv_lookup): its chain is
                            links[first_link ..], the blocks its tables
                            take ids[first_id ..] */
    uint32_t first_link;
    uint32_t first_id;
    uint8_t swap;        /* PREEMPT: swap out; else recompute */
} pkv__plan_item;

typedef struct pkv__plan {
    pkv__plan_item *items; /* in the order decided */
    size_t items_capacity;
    uint32_t num_items;
    /* The admissions' prefix hits: their chains' links, the block ids
     * their tables take. */
    pkv__chain_link *links;
    size_t links_capacity;
    uint32_t num_links;
    uint32_t num_ids;
    uint32_t *ids;
    size_t ids_capacity;
    uint32_t num_of[PKV__PLAN_ADMIT + 1]; /* items of each kind */
    /* The scheduler looked at waiting[0 .. waiting_seen) and
     * swapped[0 .. swapped_seen): the sequences it admitted or ended are
     * among them. */
    uint32_t waiting_seen;
    uint32_t swapped_seen;
    /* Blocks available once the plan is applied, as the view counted
     * them: a debug build checks the pool against it after the apply. */
    uint32_t available;
    uint64_t number; /* plans made so far */
    /* The view. refs: block -> its reference count + 1 once applied, for
     * the blocks the plan touches. tenants: tenant -> its blocks + 1 once
     * applied, for the tenants the plan touches (with quotas only). left:
     * id -> 1 for each sequence the plan takes out of running. */
    pkv__map refs;
    pkv__map tenants;
    pkv__map left;
} pkv__plan;

/* The plan's memory (plan.c): room for n items; for `more` links and ids
 * after those in use (PKV_ERR_OUT_OF_MEMORY changes nothing); release. */
pkv_status pkv__plan_reserve_items(pkv__plan *plan,
                                   const pkv__allocator *alloc, size_t n);
pkv_status pkv__plan_reserve_links(pkv__plan *plan,
                                   const pkv__allocator *alloc, size_t more);
void pkv__plan_release(pkv__plan *plan, const pkv__allocator *alloc);

/* Make every allocation applying the plan to seqs needs (plan_apply.c):
 * table and chain room, room in tokens for what each sequence that runs
 * may sample at step_end; swap buffers, and a preemption whose buffer
 * cannot be had becomes a recompute. PKV_ERR_OUT_OF_MEMORY leaves nothing
 * changed but capacity. */
pkv_status pkv__plan_reserve(pkv__plan *plan, struct pkv__seqs *seqs);

/* Apply the reserved plan to the sequences and their KV: every change it
 * decided, the device actions (step->actions) recorded in order and the
 * step's sequences in step->step_seqs[0 .. *num_seqs). Cannot fail. */
void pkv__plan_apply(const pkv__plan *plan, struct pkv__seqs *seqs,
                     struct pkv__step_state *step, uint32_t *num_seqs);

#endif
