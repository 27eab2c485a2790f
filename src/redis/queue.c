/* SPDX-License-Identifier: MIT */
/*
 * The connector's FIFOs of operations (internal.h): push, pop, take the
 * ops of a ticket, free. The caller holds the connector's lock, or owns
 * the list (a connector being freed).
 */
#include "internal.h"

#include <stdlib.h>

void pkv__redis_list_push(pkv__redis_list *list, pkv__redis_op *op)
{
    op->next = NULL;
    if (list->tail != NULL)
        list->tail->next = op;
    else
        list->head = op;
    list->tail = op;
}

pkv__redis_op *pkv__redis_list_pop(pkv__redis_list *list)
{
    pkv__redis_op *op = list->head;
    if (op != NULL) {
        list->head = op->next;
        if (list->head == NULL)
            list->tail = NULL;
        op->next = NULL;
    }
    return op;
}

void pkv__redis_list_free(pkv__redis_list *list)
{
    pkv__redis_op *op;
    while ((op = pkv__redis_list_pop(list)) != NULL)
        free(op);
}

void pkv__redis_list_take(pkv__redis_list *list, uint64_t ticket,
                          pkv__redis_list *out)
{
    pkv__redis_list keep = {NULL, NULL};
    pkv__redis_op *op;
    while ((op = pkv__redis_list_pop(list)) != NULL)
        pkv__redis_list_push(op->ticket == ticket ? out : &keep, op);
    *list = keep;
}

int pkv__redis_list_has(const pkv__redis_list *list, uint64_t ticket)
{
    for (const pkv__redis_op *op = list->head; op != NULL; op = op->next)
        if (op->ticket == ticket)
            return 1;
    return 0;
}
