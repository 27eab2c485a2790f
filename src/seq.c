/* SPDX-License-Identifier: MIT */
/* Sequences and their ordered lists (seq.h). */
#include "seq.h"

#include <stddef.h>
#include <string.h>

pkv_status pkv__seq_list_reserve(pkv__seq_list *list,
                                 const pkv__allocator *alloc,
                                 uint32_t needed)
{
    if (needed <= list->capacity)
        return PKV_OK;
    size_t cap = list->capacity ? list->capacity : 4;
    while (cap < needed)
        cap *= 2; /* needed < 2^32: no overflow */
    pkv__seq **grown = pkv__calloc(alloc, cap, sizeof *grown);
    if (grown == NULL)
        return PKV_ERR_OUT_OF_MEMORY;
    if (list->count)
        memcpy(grown, list->items, list->count * sizeof *grown);
    pkv__free(alloc, list->base, list->capacity, sizeof *grown);
    list->base = grown;
    list->items = grown;
    list->capacity = cap;
    return PKV_OK;
}

void pkv__seq_list_release(pkv__seq_list *list, const pkv__allocator *alloc)
{
    pkv__free(alloc, list->base, list->capacity, sizeof *list->items);
    memset(list, 0, sizeof *list);
}

void pkv__seq_list_insert(pkv__seq_list *list, uint32_t index, pkv__seq *seq)
{
    size_t head = (size_t)(list->items - list->base);
    if (head > 0 && index < list->count / 2) {
        /* Slide the front down one. */
        memmove(list->items - 1, list->items, index * sizeof *list->items);
        list->items--;
    } else {
        if (head + list->count == list->capacity) {
            /* No room at the end: back to the base (count < capacity). */
            memmove(list->base, list->items,
                    list->count * sizeof *list->items);
            list->items = list->base;
        }
        memmove(list->items + index + 1, list->items + index,
                (list->count - index) * sizeof *list->items);
    }
    list->items[index] = seq;
    list->count++;
}

void pkv__seq_list_remove_at(pkv__seq_list *list, uint32_t index)
{
    if (index < list->count / 2) {
        /* Slide the front up one. */
        memmove(list->items + 1, list->items, index * sizeof *list->items);
        list->items++;
    } else {
        memmove(list->items + index, list->items + index + 1,
                (list->count - index - 1) * sizeof *list->items);
    }
    list->count--;
}

void pkv__seq_list_remove(pkv__seq_list *list, const pkv__seq *seq)
{
    for (uint32_t i = 0; i < list->count; i++)
        if (list->items[i] == seq) {
            pkv__seq_list_remove_at(list, i);
            return;
        }
}

void pkv__seq_list_keep_front(pkv__seq_list *list, uint32_t n, int32_t state)
{
    uint32_t first_kept = n; /* the kept ones move to the end of [0, n) */
    for (uint32_t i = n; i-- > 0;)
        if (list->items[i]->state == state)
            list->items[--first_kept] = list->items[i];
    list->items += first_kept; /* items[0 .. first_kept) leave */
    list->count -= first_kept;
}

/* The step's fields first (seq.h). */
#define END_OF(field)                                                     \
    (offsetof(pkv__seq, field) + sizeof(((pkv__seq *)0)->field))
_Static_assert(END_OF(kv.chain) <= 64, "step_end's fields in 64 bytes");
_Static_assert(END_OF(user_data) <= 128, "a step's fields in 128 bytes");

pkv__seq *pkv__seq_new(const pkv__allocator *alloc, const pkv__kv *kv,
                       const int32_t *prompt, uint32_t prompt_len,
                       uint64_t salt, uint32_t hashed)
{
    pkv__seq *seq = pkv__calloc(alloc, 1, sizeof *seq);
    if (seq == NULL)
        return NULL;
    seq->token_capacity = prompt_len + 16;
    seq->tokens = pkv__calloc(alloc, seq->token_capacity, sizeof *seq->tokens);
    if (seq->tokens == NULL ||
        pkv__kv_seq_init(kv, &seq->kv, alloc, prompt, hashed, salt) !=
            PKV_OK) {
        pkv__seq_free(seq, alloc);
        return NULL;
    }
    memcpy(seq->tokens, prompt, prompt_len * sizeof *prompt);
    seq->num_tokens = prompt_len;
    seq->prompt_len = prompt_len;
    return seq;
}

pkv_status pkv__seq_reserve_tokens(pkv__seq *seq, const pkv__allocator *alloc,
                                   uint32_t more)
{
    size_t needed = (size_t)seq->num_tokens + more;
    if (needed <= seq->token_capacity) /* most steps */
        return PKV_OK;
    void *tokens;
    size_t capacity = seq->token_capacity;
    pkv_status st = pkv__grow(alloc, seq->tokens, &capacity, seq->num_tokens,
                              needed, sizeof *seq->tokens, &tokens);
    seq->tokens = tokens;
    /* Tokens stay below max_model_len, at most 2^24: 32 bits hold it. */
    seq->token_capacity = (uint32_t)capacity;
    return st;
}

void pkv__seq_free(pkv__seq *seq, const pkv__allocator *alloc)
{
    if (seq == NULL)
        return;
    pkv__free(alloc, seq->tokens, seq->token_capacity, sizeof *seq->tokens);
    pkv__kv_seq_free(&seq->kv, alloc);
    pkv__free(alloc, seq->drafts.ids, seq->drafts.size,
              sizeof *seq->drafts.ids);
    pkv__free(alloc, seq->store.digests, seq->store.digests_capacity, 1);
    pkv__free(alloc, seq, 1, sizeof *seq);
}
