/* SPDX-License-Identifier: MIT */
/* The engine's inbox (inbox.h): sequences added and aborted from any thread.
 *  */
#include "inbox.h"

#include <string.h>

pkv_status pkv__inbox_init(pkv__inbox *inbox, const pkv__allocator *alloc)
{
    memset(inbox, 0, sizeof *inbox);
    inbox->lock = pkv__calloc(alloc, 1, sizeof *inbox->lock);
    if (inbox->lock == NULL)
        return PKV_ERR_OUT_OF_MEMORY;
    if (pkv__lock_init(inbox->lock) != 0) {
        pkv__free(alloc, inbox->lock, 1, sizeof *inbox->lock);
        inbox->lock = NULL;
        return PKV_ERR_OUT_OF_MEMORY;
    }
    return PKV_OK;
}

void pkv__inbox_release(pkv__inbox *inbox, const pkv__allocator *alloc)
{
    pkv__seq *seq = inbox->adds_head;
    while (seq != NULL) {
        pkv__seq *next = seq->inbox_next;
        pkv__seq_free(seq, alloc);
        seq = next;
    }
    pkv__free(alloc, inbox->aborts, inbox->abort_capacity,
              sizeof *inbox->aborts);
    if (inbox->lock != NULL) {
        pkv__lock_destroy(inbox->lock);
        pkv__free(alloc, inbox->lock, 1, sizeof *inbox->lock);
    }
    memset(inbox, 0, sizeof *inbox);
}

pkv_seq_id pkv__inbox_add(pkv__inbox *inbox, pkv__seq *seq)
{
    pkv__lock_take(inbox->lock);
    pkv_seq_id id = ++inbox->last_id;
    seq->id = id;
    seq->order.arrival = ++inbox->arrivals;
    seq->state = PKV__SEQ_QUEUED;
    seq->inbox_next = NULL;
    if (inbox->adds_tail != NULL)
        inbox->adds_tail->inbox_next = seq;
    else
        inbox->adds_head = seq;
    inbox->adds_tail = seq;
    inbox->live++;
    pkv__lock_give(inbox->lock);
    return id;
}

pkv_status pkv__inbox_abort(pkv__inbox *inbox, const pkv__allocator *alloc,
                            pkv_seq_id id)
{
    pkv_status st = PKV_OK;
    pkv__lock_take(inbox->lock);
    if (id == 0 || id > inbox->last_id) {
        st = PKV_ERR_NOT_FOUND;
    } else {
        void *aborts;
        st = pkv__grow(alloc, inbox->aborts, &inbox->abort_capacity,
                       inbox->num_aborts, (size_t)inbox->num_aborts + 1,
                       sizeof *inbox->aborts, &aborts);
        if (st == PKV_OK) {
            inbox->aborts = aborts;
            inbox->aborts[inbox->num_aborts++] = id;
        }
    }
    pkv__lock_give(inbox->lock);
    return st;
}

int pkv__inbox_take(pkv__inbox *inbox, uint64_t max_live, pkv__seq **adds,
                    pkv_seq_id **aborts, uint32_t *num_aborts,
                    size_t *abort_capacity)
{
    pkv__lock_take(inbox->lock);
    if (inbox->live > max_live) {
        pkv__lock_give(inbox->lock);
        return 0;
    }
    *adds = inbox->adds_head;
    inbox->adds_head = NULL;
    inbox->adds_tail = NULL;
    *aborts = inbox->aborts;
    *num_aborts = inbox->num_aborts;
    *abort_capacity = inbox->abort_capacity;
    inbox->aborts = NULL;
    inbox->num_aborts = 0;
    inbox->abort_capacity = 0;
    pkv__lock_give(inbox->lock);
    return 1;
}

void pkv__inbox_issue(pkv__inbox *inbox, pkv__seq *seq)
{
    pkv__lock_take(inbox->lock);
    seq->id = ++inbox->last_id;
    seq->order.arrival = ++inbox->arrivals;
    inbox->live++;
    pkv__lock_give(inbox->lock);
}

void pkv__inbox_retire(pkv__inbox *inbox, uint64_t n)
{
    pkv__lock_take(inbox->lock);
    inbox->live -= n;
    pkv__lock_give(inbox->lock);
}

void pkv__inbox_set_saving(pkv__inbox *inbox, uint32_t n)
{
    pkv__lock_take(inbox->lock);
    inbox->saving = n;
    pkv__lock_give(inbox->lock);
}

int pkv__inbox_busy(const pkv__inbox *inbox)
{
    pkv__lock_take(inbox->lock);
    int busy = inbox->live > 0 || inbox->saving > 0;
    pkv__lock_give(inbox->lock);
    return busy;
}

uint64_t pkv__inbox_live_count(const pkv__inbox *inbox)
{
    pkv__lock_take(inbox->lock);
    uint64_t live = inbox->live;
    pkv__lock_give(inbox->lock);
    return live;
}

int pkv__inbox_abort_pending(const pkv__inbox *inbox, pkv_seq_id id)
{
    int pending = 0;
    pkv__lock_take(inbox->lock);
    for (uint32_t i = 0; i < inbox->num_aborts && !pending; i++)
        pending = inbox->aborts[i] == id;
    pkv__lock_give(inbox->lock);
    return pending;
}

int pkv__inbox_queued(const pkv__inbox *inbox, pkv_seq_id id)
{
    int queued = 0;
    pkv__lock_take(inbox->lock);
    for (const pkv__seq *s = inbox->adds_head; s != NULL && !queued;
         s = s->inbox_next)
        queued = s->id == id;
    pkv__lock_give(inbox->lock);
    return queued;
}
