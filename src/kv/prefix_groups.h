/* SPDX-License-Identifier: MIT */
/*
 * The prefix cache with hybrid memory's groups (groups.h). Group 0's
 * blocks form the verified chain of prefix.h; a block of another group
 * is indexed under its own hash (the chain's hash and the group) with the
 * group-0 block of the same tokens as its parent, so it is found only
 * while that block still holds them (its generation), and it holds the
 * same prompt's KV by the chain's induction. A hit of h blocks needs, in
 * each group, only the blocks the first computed row (token h *
 * block_size) can see: all h in a group without a window, the window's
 * last few in a windowed one (as vLLM's sliding-window manager does).
 */
#ifndef PKV_PREFIX_GROUPS_H
#define PKV_PREFIX_GROUPS_H

#include "kv/kv.h"

/* Group g's hash of a block whose group-0 block has chained hash `hash`:
 * the chain's, mixed with a multiple of the golden ratio per group, so
 * that no two groups share one. */
uint64_t pkv__prefix_group_hash(uint64_t hash, uint32_t g);

/* Of a lookup's n group-0 links (prefix.h), the most, h, that the other
 * groups can follow: each holds every block from its first seen one to
 * h cached. Their block ids go to ids, group after group (groups 1 ..),
 * *n_ids in all; ids has room for n * (num_groups - 1). Pure. */
uint32_t pkv__prefix_group_hits(const pkv__prefix *prefix,
                                const pkv__groups *groups,
                                const pkv__chain_link *links, uint32_t n,
                                const int32_t *tokens, uint64_t salt,
                                uint32_t *ids, uint32_t *n_ids);

/* Register the full blocks that groups 1 .. of s hold for its chain's
 * links [from, num_links) (what pkv__prefix_register just added), whose
 * tokens are tokens[]: a block not cached yet, where no equal one is,
 * joins the index. */
void pkv__prefix_register_groups(pkv__prefix *prefix,
                                 const pkv__groups *groups,
                                 const pkv__kv_seq *s, const int32_t *tokens,
                                 uint32_t from);

#endif
