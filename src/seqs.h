/* SPDX-License-Identifier: MIT */
/*
 * The engine's sequences: by state (the waiting, running, swapped and
 * ended lists) and by id, their moves between the lists, their end,
 * giving back what a sequence holds (its KV to the KV-cache manager, a
 * load in flight to the KV store), and the per-tenant block counts that
 * follow their tables. The planner (planner.c) reads them; the plan's
 * apply and the step calls (engine_step.c, engine_seq.c) change them
 * only through these, so that neither calls into the other.
 */
#ifndef PKV_SEQS_H
#define PKV_SEQS_H

#include "alloc.h"
#include "inbox.h"
#include "kv/kv.h"
#include "map.h"
#include "seq.h"

struct pkv__engine_store;

typedef struct pkv__seqs {
    /* By state. waiting and swapped are kept in policy order; running in
     * order of admission. ended: not yet reported. */
    pkv__seq_list waiting;
    pkv__seq_list running;
    pkv__seq_list swapped;
    pkv__seq_list ended;
    pkv__map by_id;         /* id -> pkv__seq *, every sequence in the
                               lists (reserved with them) */
    pkv__map tenant_blocks; /* tenant -> blocks its tables hold, tenants
                               with blocks only (at most max_num_seqs) */
    uint32_t unswept; /* 1 << state of each list that holds sequences
                         ended by pkv__seqs_end */
    uint32_t longest_tokens; /* most tokens any sequence ever held: sizes
                                the step arrays without a scan */
    int32_t policy; /* params.policy: the order of waiting and swapped */
    /* What an end or a cut gives back to, the engine's: the KV-cache
     * manager, the KV store (a load in flight), the counters
     * (seqs_finished), the allocator. */
    pkv__kv *kv;
    struct pkv__engine_store *store;
    pkv_engine_stats *totals;
    pkv__allocator alloc;
} pkv__seqs;

/* Sequences for params (the tenant map), giving back to kv and store,
 * counting in totals; release frees every sequence still held, without
 * giving back its blocks. */
pkv_status pkv__seqs_init(pkv__seqs *seqs, const pkv__allocator *alloc,
                          const pkv_engine_params *params, pkv__kv *kv,
                          struct pkv__engine_store *store,
                          pkv_engine_stats *totals);
void pkv__seqs_release(pkv__seqs *seqs);

/* The live sequence with this id (ended ones excluded), or NULL. O(1). */
pkv__seq *pkv__seqs_find(const pkv__seqs *seqs, pkv_seq_id id);

/* Take the ended sequences out of their lists (pkv__seqs_end left them
 * there), one pass per list that holds any. */
void pkv__seqs_sweep_ended(pkv__seqs *seqs);

/* Blocks the tenant's tables hold; change that count by delta (at every
 * change to a table). */
uint64_t pkv__seqs_tenant_blocks(const pkv__seqs *seqs, uint32_t tenant);
void pkv__seqs_tenant_add(pkv__seqs *seqs, uint32_t tenant, int64_t delta);

/* Count the blocks seq's tables gained (or lost) since they held `before`
 * (pkv__kv_held) against its tenant. */
void pkv__seqs_count_blocks(pkv__seqs *seqs, const pkv__seq *seq,
                            uint32_t before);

/* Give every list, and the id map, room for `live` sequences. */
pkv_status pkv__seqs_reserve(pkv__seqs *seqs, uint64_t live);

/* Insert into a waiting or swapped list in policy order. The list has
 * room: every list is reserved for every live sequence. */
void pkv__seqs_enqueue(const pkv__seqs *seqs, pkv__seq_list *list,
                       pkv__seq *seq);

/* The live sequence id names, for a call (`what`) that must come between
 * steps: PKV_ERR_BAD_STATE during a step or before any step saw the
 * sequence, PKV_ERR_NOT_FOUND if it is not live (the engine's message
 * set). */
pkv_status pkv__engine_find_between_steps(pkv_engine *engine, pkv_seq_id id,
                                          const char *what, pkv__seq **out);

/* End a sequence (any state but queued): release its KV and a load in
 * flight, and queue its report, leaving it in its list. A call that may
 * end many sequences (step_end, a batch of aborts) then takes them all
 * out with one pass, pkv__seqs_sweep_ended, instead of searching a list
 * once per end. Until the sweep the list holds ended sequences. */
void pkv__seqs_end(pkv__seqs *seqs, pkv__seq *seq, int32_t reason,
                   pkv_status status);

/* Release a sequence's KV (kv.h's pkv__kv_drop), its blocks counted off
 * its tenant. */
void pkv__seqs_drop_kv(pkv__seqs *seqs, pkv__seq *seq);

/* Cut a running sequence's KV back to its first `keep` tokens as stored
 * (kv.h's pkv__kv_cut: what it keeps is computed again), its blocks
 * counted against its tenant. Sets num_computed. */
void pkv__seqs_cut_kv(pkv__seqs *seqs, pkv__seq *seq, uint32_t keep);

/* A sequence joins the lists (its id issued by the inbox): found by id,
 * counted in longest_tokens, in the list of `state` (running: last;
 * waiting or swapped: in policy order). The lists have room
 * (pkv__seqs_reserve). */
void pkv__seqs_join(pkv__seqs *seqs, pkv__seq *seq, uint8_t state);

/* Move the sequences queued in the inbox into waiting, and end those
 * whose abort is queued. On failure (PKV_ERR_OUT_OF_MEMORY) nothing was
 * taken from the inbox. */
pkv_status pkv__seqs_take_inbox(pkv__seqs *seqs, pkv__inbox *inbox);

/* After a running sequence's step: its windowed groups give back the
 * blocks its next row cannot see, counted off its tenant. */
static inline void pkv__seqs_slide(pkv__seqs *seqs, pkv__seq *seq)
{
    uint32_t dropped = pkv__kv_slide(seqs->kv, &seq->kv, seq->num_computed);
    if (dropped > 0)
        pkv__seqs_tenant_add(seqs, seq->tenant, -(int64_t)dropped);
}

/* A recomputed sequence (preempted, or its KV lost) waits to compute
 * every token again: it joins waiting, and may ask the store again. */
void pkv__seqs_recompute(pkv__seqs *seqs, pkv__seq *seq);

#endif
