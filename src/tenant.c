/* SPDX-License-Identifier: MIT */
/* Blocks held per tenant (tenant.h). */
#include "tenant.h"

static uint32_t home(const pkv__tenant_map *map, uint32_t tenant)
{
    return (tenant * 0x9e3779b1u) & map->mask; /* Fibonacci hashing */
}

pkv_status pkv__tenant_map_init(pkv__tenant_map *map,
                                const pkv__allocator *alloc,
                                uint32_t max_tenants)
{
    uint32_t capacity = 2;
    while (capacity < 2 * (uint64_t)max_tenants)
        capacity *= 2;
    map->mask = capacity - 1;
    map->tenant = pkv__calloc(alloc, capacity, sizeof *map->tenant);
    map->blocks = pkv__calloc(alloc, capacity, sizeof *map->blocks);
    if (map->tenant == NULL || map->blocks == NULL) {
        pkv__tenant_map_release(map, alloc);
        return PKV_ERR_OUT_OF_MEMORY;
    }
    return PKV_OK;
}

void pkv__tenant_map_release(pkv__tenant_map *map,
                             const pkv__allocator *alloc)
{
    pkv__free(alloc, map->tenant, (size_t)map->mask + 1, sizeof *map->tenant);
    pkv__free(alloc, map->blocks, (size_t)map->mask + 1, sizeof *map->blocks);
    map->tenant = NULL;
    map->blocks = NULL;
}

/* The tenant's slot, or the empty slot where it would go. */
static uint32_t find(const pkv__tenant_map *map, uint32_t tenant)
{
    uint32_t i = home(map, tenant);
    while (map->blocks[i] != 0 && map->tenant[i] != tenant)
        i = (i + 1) & map->mask;
    return i;
}

uint64_t pkv__tenant_blocks(const pkv__tenant_map *map, uint32_t tenant)
{
    return map->blocks[find(map, tenant)];
}

/* Empty slot i, then move back every entry of its cluster that could no
 * longer be found past the gap. */
static void remove_at(pkv__tenant_map *map, uint32_t i)
{
    map->blocks[i] = 0;
    for (uint32_t j = (i + 1) & map->mask; map->blocks[j] != 0;
         j = (j + 1) & map->mask) {
        uint32_t k = home(map, map->tenant[j]);
        /* Entry j may stay if its home lies cyclically in (i, j]. */
        int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (stays)
            continue;
        map->tenant[i] = map->tenant[j];
        map->blocks[i] = map->blocks[j];
        map->blocks[j] = 0;
        i = j;
    }
}

void pkv__tenant_add(pkv__tenant_map *map, uint32_t tenant, int64_t delta)
{
    if (delta == 0)
        return;
    uint32_t i = find(map, tenant);
    map->tenant[i] = tenant;
    map->blocks[i] = (uint64_t)((int64_t)map->blocks[i] + delta);
    if (map->blocks[i] == 0)
        remove_at(map, i);
}
