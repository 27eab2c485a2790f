/* SPDX-License-Identifier: MIT */
/* The plan's memory (plan.h): its arrays grow and are freed here; the
 * scheduler, plan_apply and the engine only use them. */
#include "plan.h"

#include <string.h>

pkv_status pkv__plan_reserve_items(pkv__plan *plan,
                                   const pkv__allocator *alloc, size_t n)
{
    void *items;
    pkv_status st = pkv__grow(alloc, plan->items, &plan->items_capacity, 0,
                              n, sizeof *plan->items, &items);
    if (st == PKV_OK)
        plan->items = items;
    return st;
}

pkv_status pkv__plan_reserve_links(pkv__plan *plan,
                                   const pkv__allocator *alloc, size_t more)
{
    void *links, *ids;
    pkv_status st = pkv__grow(alloc, plan->links, &plan->links_capacity,
                              plan->num_links, plan->num_links + more,
                              sizeof *plan->links, &links);
    if (st != PKV_OK)
        return st;
    plan->links = links;
    st = pkv__grow(alloc, plan->ids, &plan->ids_capacity, plan->num_ids,
                   plan->num_ids + more, sizeof *plan->ids, &ids);
    if (st == PKV_OK)
        plan->ids = ids;
    return st;
}

void pkv__plan_release(pkv__plan *plan, const pkv__allocator *alloc)
{
    pkv__free(alloc, plan->items, plan->items_capacity, sizeof *plan->items);
    pkv__free(alloc, plan->links, plan->links_capacity, sizeof *plan->links);
    pkv__free(alloc, plan->ids, plan->ids_capacity, sizeof *plan->ids);
    pkv__map_release(&plan->refs, alloc);
    pkv__map_release(&plan->tenants, alloc);
    pkv__map_release(&plan->left, alloc);
    memset(plan, 0, sizeof *plan);
}
