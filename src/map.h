/* SPDX-License-Identifier: MIT */
/*
 * A hash map from 64-bit keys to nonzero 64-bit values, for the engine's
 * O(1) lookups: blocks held per tenant, and sequence by id.
 *
 * Open addressing with linear probing; value 0 marks an empty slot, so a
 * key stored with 0 is a key removed (backward-shift deletion, no
 * tombstones). The capacity, a power of two, is kept at least twice the
 * entries: pkv__map_reserve makes room before a batch of puts (it is the
 * only call that allocates, so puts cannot fail).
 */
#ifndef PKV_MAP_H
#define PKV_MAP_H

#include "alloc.h"

#include <stdint.h>

typedef struct pkv__map {
    uint64_t *keys;
    uint64_t *values; /* 0: an empty slot */
    uint32_t mask;    /* capacity - 1; capacity 0: no arrays yet */
    uint32_t count;
} pkv__map;

/* An empty map that allocates nothing until reserved. */
void pkv__map_init(pkv__map *map);
void pkv__map_release(pkv__map *map, const pkv__allocator *alloc);

/* Room for `entries` keys in all, without further allocation. All or
 * nothing. */
pkv_status pkv__map_reserve(pkv__map *map, const pkv__allocator *alloc,
                            uint64_t entries);

/* Remove every key, keeping the room. O(capacity) if any key is there. */
void pkv__map_clear(pkv__map *map);

/* The key's value, 0 if absent. */
uint64_t pkv__map_get(const pkv__map *map, uint64_t key);

/* Start loading the key's home slot, for a pkv__map_get soon after
 * (prefetch.h). */
void pkv__map_prefetch(const pkv__map *map, uint64_t key);

/* Set the key's value; value 0 removes it. A new key needs room (see
 * pkv__map_reserve). */
void pkv__map_put(pkv__map *map, uint64_t key, uint64_t value);

#endif
