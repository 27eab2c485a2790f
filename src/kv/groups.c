/* SPDX-License-Identifier: MIT */
/* Layers grouped by window (groups.h). */
#include "groups.h"

#include <string.h>

/* Layer l's window as the cache sees it: one that reaches past
 * max_model_len drops nothing, so it is a full layer's (0). */
static uint32_t window_seen(const pkv_engine_params *p, uint32_t layer)
{
    uint32_t w = p->layer_windows != NULL ? p->layer_windows[layer]
                                          : p->sliding_window;
    return w >= p->max_model_len ? 0 : w;
}

/* Whether the layers are grouped by window: hybrid memory (kv_memory)
 * and windows that differ. Otherwise every layer is placed as a full one,
 * in one group that keeps every token (a window then masks attention
 * only), each layer its own arena. */
static int by_window(const pkv_engine_params *p)
{
    int hybrid = p->kv_memory == PKV_KV_MEMORY_HYBRID;
    for (uint32_t l = 1; hybrid && l < p->num_layers; l++)
        if (window_seen(p, l) != window_seen(p, 0))
            return 1;
    return 0;
}

/* Layer l's window for grouping, with `grouped` by_window's answer. */
static uint32_t window_of(const pkv_engine_params *p, int grouped,
                          uint32_t layer)
{
    return grouped ? window_seen(p, layer) : 0;
}

static uint32_t gcd(uint32_t a, uint32_t b)
{
    while (b != 0) {
        uint32_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Layers with window w. */
static uint32_t count_window(const pkv_engine_params *p, int grouped,
                             uint32_t w)
{
    uint32_t n = 0;
    for (uint32_t l = 0; l < p->num_layers; l++)
        n += window_of(p, grouped, l) == w;
    return n;
}

/* Whether a layer before l has l's window (so l's window was counted). */
static int seen_before(const pkv_engine_params *p, int grouped, uint32_t l)
{
    for (uint32_t k = 0; k < l; k++)
        if (window_of(p, grouped, k) == window_of(p, grouped, l))
            return 1;
    return 0;
}

uint32_t pkv__groups_slots(const pkv_engine_params *p)
{
    /* The greatest common divisor of the layer counts of the windows:
     * every window's layers then fill whole groups. Quadratic in layers,
     * once at create. */
    int grouped = by_window(p);
    uint32_t slots = 0;
    for (uint32_t l = 0; l < p->num_layers; l++)
        if (!seen_before(p, grouped, l))
            slots = gcd(slots,
                        count_window(p, grouped, window_of(p, grouped, l)));
    return slots;
}

/* The smallest window above `above` among the layers (UINT32_MAX: none);
 * above UINT32_MAX asks for the smallest of all. */
static uint32_t next_window(const pkv_engine_params *p, int grouped,
                            uint64_t above)
{
    uint32_t best = UINT32_MAX;
    for (uint32_t l = 0; l < p->num_layers; l++) {
        uint32_t w = window_of(p, grouped, l);
        if ((above == UINT64_MAX || w > above) && w < best)
            best = w;
    }
    return best;
}

pkv_status pkv__groups_init(pkv__groups *g, const pkv__allocator *a,
                            const pkv_engine_params *p)
{
    memset(g, 0, sizeof *g);
    g->num_layers = p->num_layers;
    g->slots = pkv__groups_slots(p);
    g->num_groups = p->num_layers / g->slots;
    g->layer_arena = pkv__calloc(a, p->num_layers, sizeof *g->layer_arena);
    g->layer_group = pkv__calloc(a, p->num_layers, sizeof *g->layer_group);
    g->group_windows =
        pkv__calloc(a, g->num_groups, sizeof *g->group_windows);
    if (g->layer_arena == NULL || g->layer_group == NULL ||
        g->group_windows == NULL)
        return PKV_ERR_OUT_OF_MEMORY;
    /* Window 0 (every token) sorts first as the smallest value; one
     * group holds every layer in layer order. */
    int grouped = by_window(p);
    uint32_t placed = 0;
    for (uint64_t w = next_window(p, grouped, UINT64_MAX); w != UINT32_MAX;
         w = next_window(p, grouped, w))
        for (uint32_t l = 0; l < p->num_layers; l++) {
            if (window_of(p, grouped, l) != w)
                continue;
            uint32_t group = placed / g->slots;
            g->layer_group[l] = group;
            g->layer_arena[l] = placed % g->slots;
            g->group_windows[group] = (uint32_t)w;
            placed++;
        }
    g->first_windowed = g->num_groups;
    while (g->first_windowed > 0 && g->group_windows[g->first_windowed - 1])
        g->first_windowed--;
    return PKV_OK;
}

uint32_t pkv__groups_first_seen(const pkv__groups *groups, uint32_t g,
                                uint32_t block_size, uint32_t next)
{
    uint32_t w = pkv__groups_window(groups, g);
    if (w == 0 || next + 1 <= w)
        return 0;
    return (next + 1 - w) / block_size;
}

void pkv__groups_release(pkv__groups *g, const pkv__allocator *a)
{
    pkv__free(a, g->layer_arena, g->num_layers, sizeof *g->layer_arena);
    pkv__free(a, g->layer_group, g->num_layers, sizeof *g->layer_group);
    pkv__free(a, g->group_windows, g->num_groups, sizeof *g->group_windows);
    memset(g, 0, sizeof *g);
}
