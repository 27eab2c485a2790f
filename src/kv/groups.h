/* SPDX-License-Identifier: MIT */
/*
 * Hybrid memory: layers grouped by their attention window, so that a
 * windowed layer keeps only the blocks its window can still reach
 * (docs/design.md, "Hybrid memory"). Every group has the same number of
 * layers (its slots), and each slot is one backend arena: a pool block
 * holds one block of each slot, and each group gives every sequence its
 * own block table over the shared pool. Without hybrid memory, or when
 * every layer has the same window, there is one group of every layer and
 * an arena per layer, as before groups existed.
 */
#ifndef PKV_GROUPS_H
#define PKV_GROUPS_H

#include "alloc.h"
#include "pool.h"

#include <stdint.h>

typedef struct pkv__groups {
    uint32_t num_groups;
    uint32_t slots;          /* layers (arenas) per group */
    uint32_t *layer_arena;   /* [num_layers] */
    uint32_t *layer_group;   /* [num_layers] */
    uint32_t *group_windows; /* [num_groups] */
    uint32_t num_layers;
    /* The groups with a window follow the others: the first of them
     * (num_groups when none has one). */
    uint32_t first_windowed;
} pkv__groups;

/* Layers per group for params whose geometry and windows are checked:
 * num_layers unless hybrid memory groups them. Pure, so the pool can be
 * sized before anything exists. */
uint32_t pkv__groups_slots(const pkv_engine_params *params);

/* The groups of validated params, whose layer windows are set (the
 * engine's copy). Full layers (window 0) form the first groups, then the
 * windows in increasing order, each window's layers in layer order in
 * groups of pkv__groups_slots. PKV_ERR_OUT_OF_MEMORY. */
pkv_status pkv__groups_init(pkv__groups *groups, const pkv__allocator *alloc,
                            const pkv_engine_params *params);
void pkv__groups_release(pkv__groups *groups, const pkv__allocator *alloc);

/* Whether the layers are in the plain layout: one group of every
 * layer, each layer its own arena, as before groups existed (the layout
 * pkv's file formats write without a layer table). */
static inline int pkv__groups_plain(const pkv__groups *groups)
{
    return groups->num_groups == 1;
}

/* Group g's window (0: the layers see every token). */
static inline uint32_t pkv__groups_window(const pkv__groups *groups,
                                          uint32_t g)
{
    return groups->group_windows[g];
}

/* The first block that group g's row at token `next` sees (0 without a
 * window): the blocks before it lie wholly behind the window. */
uint32_t pkv__groups_first_seen(const pkv__groups *groups, uint32_t g,
                                uint32_t block_size, uint32_t next);

#endif
