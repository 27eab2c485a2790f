/* SPDX-License-Identifier: MIT */
/*
 * Blocks held per tenant: the sum of num_blocks over the block tables of
 * the tenant's sequences, kept up to date at every table change, so a
 * quota check costs O(1) instead of a scan of the running list.
 *
 * An open-addressing map (linear probing) of tenant -> blocks. A tenant
 * whose count drops to zero leaves the map (backward-shift deletion), so
 * the map holds only tenants with blocks: at most max_num_seqs of them,
 * and its fixed capacity (twice that, rounded up to a power of two) never
 * fills.
 */
#ifndef PKV_TENANT_H
#define PKV_TENANT_H

#include "alloc.h"

#include <stdint.h>

typedef struct pkv__tenant_map {
    uint32_t *tenant;
    uint64_t *blocks; /* 0: an empty slot */
    uint32_t mask;    /* capacity - 1 */
} pkv__tenant_map;

/* Room for `max_tenants` tenants with blocks at once. */
pkv_status pkv__tenant_map_init(pkv__tenant_map *map,
                                const pkv__allocator *alloc,
                                uint32_t max_tenants);
void pkv__tenant_map_release(pkv__tenant_map *map,
                             const pkv__allocator *alloc);

/* Blocks the tenant holds (0 if none). */
uint64_t pkv__tenant_blocks(const pkv__tenant_map *map, uint32_t tenant);

/* Change the tenant's count by delta; the count must not go below zero. */
void pkv__tenant_add(pkv__tenant_map *map, uint32_t tenant, int64_t delta);

#endif
