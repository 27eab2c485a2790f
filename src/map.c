/* SPDX-License-Identifier: MIT */
/* Open-addressing u64 -> u64 map (map.h). */
#include "map.h"
#include "prefetch.h"

#include <assert.h>
#include <string.h>

static uint32_t home(const pkv__map *map, uint64_t key)
{
    key ^= key >> 33; /* a 64-bit mixer (murmur3's finaliser) */
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (uint32_t)key & map->mask;
}

void pkv__map_init(pkv__map *map)
{
    map->keys = NULL;
    map->values = NULL;
    map->mask = 0;
    map->count = 0;
}

static size_t capacity(const pkv__map *map)
{
    return map->values == NULL ? 0 : (size_t)map->mask + 1;
}

void pkv__map_release(pkv__map *map, const pkv__allocator *alloc)
{
    pkv__free(alloc, map->keys, capacity(map), sizeof *map->keys);
    pkv__free(alloc, map->values, capacity(map), sizeof *map->values);
    pkv__map_init(map);
}

/* The key's slot, or the empty slot where it would go. */
static uint32_t find(const pkv__map *map, uint64_t key)
{
    uint32_t i = home(map, key);
    while (map->values[i] != 0 && map->keys[i] != key)
        i = (i + 1) & map->mask;
    return i;
}

void pkv__map_prefetch(const pkv__map *map, uint64_t key)
{
    if (map->count == 0)
        return;
    uint32_t i = home(map, key);
    PKV__PREFETCH(&map->keys[i]);
    PKV__PREFETCH(&map->values[i]);
}

pkv_status pkv__map_reserve(pkv__map *map, const pkv__allocator *alloc,
                            uint64_t entries)
{
    size_t want = 16;
    while (want < 2 * entries) {
        if (want > (size_t)UINT32_MAX / 2)
            return PKV_ERR_OUT_OF_MEMORY;
        want *= 2;
    }
    if (want <= capacity(map))
        return PKV_OK;
    pkv__map bigger;
    bigger.keys = pkv__calloc(alloc, want, sizeof *bigger.keys);
    bigger.values = pkv__calloc(alloc, want, sizeof *bigger.values);
    bigger.mask = (uint32_t)(want - 1);
    bigger.count = 0;
    if (bigger.keys == NULL || bigger.values == NULL) {
        pkv__free(alloc, bigger.keys, want, sizeof *bigger.keys);
        pkv__free(alloc, bigger.values, want, sizeof *bigger.values);
        return PKV_ERR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < capacity(map); i++)
        if (map->values[i] != 0)
            pkv__map_put(&bigger, map->keys[i], map->values[i]);
    pkv__map_release(map, alloc);
    *map = bigger;
    return PKV_OK;
}

void pkv__map_clear(pkv__map *map)
{
    if (map->count == 0)
        return;
    memset(map->values, 0, capacity(map) * sizeof *map->values);
    map->count = 0;
}

uint64_t pkv__map_get(const pkv__map *map, uint64_t key)
{
    return map->values == NULL ? 0 : map->values[find(map, key)];
}

/* Empty slot i, then move back every entry of its cluster that could no
 * longer be found past the gap. */
static void remove_at(pkv__map *map, uint32_t i)
{
    map->values[i] = 0;
    map->count--;
    for (uint32_t j = (i + 1) & map->mask; map->values[j] != 0;
         j = (j + 1) & map->mask) {
        uint32_t k = home(map, map->keys[j]);
        /* Entry j may stay if its home lies cyclically in (i, j]. */
        int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (stays)
            continue;
        map->keys[i] = map->keys[j];
        map->values[i] = map->values[j];
        map->values[j] = 0;
        i = j;
    }
}

void pkv__map_put(pkv__map *map, uint64_t key, uint64_t value)
{
    if (map->values == NULL) { /* nothing reserved: only a removal */
        assert(value == 0);
        return;
    }
    uint32_t i = find(map, key);
    if (map->values[i] == 0) {
        if (value == 0)
            return;
        assert(2 * (size_t)(map->count + 1) <= capacity(map));
        map->keys[i] = key;
        map->count++;
    } else if (value == 0) {
        remove_at(map, i);
        return;
    }
    map->values[i] = value;
}
