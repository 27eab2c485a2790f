/* SPDX-License-Identifier: MIT */
/* The engine's inbox: pkv_seq_add and pkv_seq_abort from any thread queue
 * here under a mutex; the stepping thread drains it at step_begin. It also
 * counts live sequences for pkv_engine_has_work. */
#ifndef PKV_INBOX_H
#define PKV_INBOX_H

#include "lock.h"
#include "seq.h"

typedef struct pkv__inbox {
    /* Behind a pointer, so that a reader of a const engine (has_work) can
     * take it. */
    pkv__lock *lock;
    pkv__seq *adds_head;
    pkv__seq *adds_tail;
    pkv_seq_id *aborts;
    uint32_t num_aborts;
    size_t abort_capacity;
    pkv_seq_id last_id;  /* ids issued: 1 .. last_id */
    uint64_t arrivals;   /* arrival counter */
    uint64_t live;       /* added and not yet reported as ended */
    uint32_t saving;     /* KV store saves in flight (has_work) */
} pkv__inbox;

pkv_status pkv__inbox_init(pkv__inbox *inbox, const pkv__allocator *alloc);
/* Frees queued sequences too. Safe after a failed init. */
void pkv__inbox_release(pkv__inbox *inbox, const pkv__allocator *alloc);

/* Give seq an id and arrival and queue it; returns the id. Thread-safe.
 * Once queued, seq belongs to the stepping thread, which may end and free
 * it at any time: the caller must not touch it again. */
pkv_seq_id pkv__inbox_add(pkv__inbox *inbox, pkv__seq *seq);

/* Queue an abort. PKV_ERR_NOT_FOUND for an id never issued. Thread-safe. */
pkv_status pkv__inbox_abort(pkv__inbox *inbox, const pkv__allocator *alloc,
                            pkv_seq_id id);

/* Take everything queued, unless more than max_live sequences are live
 * (then return 0 and take nothing: the caller makes room and asks again).
 * The adds come as a linked list (inbox_next), the aborts as an array the
 * caller frees (abort_capacity entries). Thread-safe. */
int pkv__inbox_take(pkv__inbox *inbox, uint64_t max_live, pkv__seq **adds,
                    pkv_seq_id **aborts, uint32_t *num_aborts,
                    size_t *abort_capacity);

/* Sequences live now (added and not yet reported as ended). Thread-safe. */
uint64_t pkv__inbox_live_count(const pkv__inbox *inbox);

/* 1 if sequence id is added and not yet taken by a step. Thread-safe. */
int pkv__inbox_queued(const pkv__inbox *inbox, pkv_seq_id id);

/* 1 if an abort of id is queued and not yet taken. Thread-safe. */
int pkv__inbox_abort_pending(const pkv__inbox *inbox, pkv_seq_id id);

/* An id and arrival for a sequence created on the stepping thread (fork). */
void pkv__inbox_issue(pkv__inbox *inbox, pkv__seq *seq);

/* The KV store's saves in flight are now n (engine_store.c). Thread-safe. */
void pkv__inbox_set_saving(pkv__inbox *inbox, uint32_t n);

/* Whether sequences are live or saves in flight: pkv_engine_has_work.
 * Thread-safe. */
int pkv__inbox_busy(const pkv__inbox *inbox);

/* n sequences have been reported as ended. Thread-safe. */
void pkv__inbox_retire(pkv__inbox *inbox, uint64_t n);



#endif
