/* SPDX-License-Identifier: MIT */
/*
 * The KV-cache manager: one object that owns the blocks. It holds the
 * block pool, the prefix cache and its chained hashes, the groups of
 * layers, and through each sequence's pkv__kv_seq that sequence's block
 * tables, one per group; the rest of the engine asks it to look up a
 * prompt's cached prefix, give a step's rows their slots, register and
 * slide, fork, cut, release and swap, and reads a sequence's tables per
 * group. One group of every layer is the case N = 1 of the same code.
 * (docs/design.md, "The KV-cache manager"; vLLM's KVCacheManager and
 * KVCacheCoordinator, llama.cpp's llama_kv_cache_iswa play this part in
 * their engines.)
 *
 * Every group's table of a sequence holds the same tokens; a windowed
 * group holds only the blocks from the first one its next row (or the
 * current step's first row) sees, the others being the null block. A
 * change to a sequence's blocks counts against nobody: its caller counts
 * the blocks held (pkv__kv_held) against the sequence's tenant.
 */
#ifndef PKV_KV_KV_H
#define PKV_KV_KV_H

#include "kv/groups.h"
#include "kv/pool.h"
#include "kv/prefix.h"
#include "kv/table.h"

typedef struct pkv__kv {
    pkv__groups groups;
    pkv__pool pool;
    pkv__prefix prefix;
} pkv__kv;

/* A sequence's KV state, which only the manager's functions change (it is
 * embedded in pkv__seq, seq.h, so that a step reads it with the
 * sequence). */
typedef struct pkv__kv_seq {
    /* Its registered full blocks, group 0's: the prefix cache's chain
     * (first: step_end reads its length). */
    pkv__prefix_chain chain;
    pkv__table *tables; /* [groups]: group g's block table */
    uint64_t salt; /* the tenant's prefix-cache salt */
    /* The chained hashes of the prompt's full blocks that a prefix lookup
     * may use ((prompt_len - 1) / block_size), computed once when the
     * sequence is made, on the host's thread; none for a fork. A
     * truncation keeps those of blocks it left whole (num_prompt_hashes),
     * of prompt_hashes_size allocated. */
    uint64_t *prompt_hashes;
    uint32_t num_prompt_hashes;
    uint32_t prompt_hashes_size;
    uint32_t groups;
} pkv__kv_seq;

/* The groups of validated params (their layer windows set): the layout,
 * which the backend's arenas follow, and nothing proportional to the
 * blocks yet. PKV_ERR_OUT_OF_MEMORY. */
pkv_status pkv__kv_init(pkv__kv *kv, const pkv__allocator *alloc,
                        const pkv_engine_params *params);

/* The pool of num_blocks blocks of block_size tokens and its prefix
 * index: once the backend holds the arenas, so that a cache too large for
 * the machine fails before this host memory is spent. */
pkv_status pkv__kv_init_pool(pkv__kv *kv, const pkv__allocator *alloc,
                             uint32_t num_blocks, uint32_t block_size);

/* Release what the inits made (any of it). */
void pkv__kv_release(pkv__kv *kv, const pkv__allocator *alloc);

/* ------------------------------------------------------ a sequence's KV */

/* A new sequence's KV (on any thread: it reads only what create fixed):
 * an empty table per group, the salt, and the chained hashes of the full
 * blocks of its prompt's first `prompt_len` tokens (0: none) that a
 * lookup may use. PKV_ERR_OUT_OF_MEMORY leaves s empty. */
pkv_status pkv__kv_seq_init(const pkv__kv *kv, pkv__kv_seq *s,
                            const pkv__allocator *alloc,
                            const int32_t *prompt, uint32_t prompt_len,
                            uint64_t salt);

/* Free its memory; its blocks must be released (pkv__kv_drop). */
void pkv__kv_seq_free(pkv__kv_seq *s, const pkv__allocator *alloc);

/* Group g's table (g < the groups). */
static inline const pkv__table *pkv__kv_table(const pkv__kv_seq *s,
                                              uint32_t g)
{
    return &s->tables[g];
}

/* Tokens that have slots (the same in every group). */
static inline uint32_t pkv__kv_tokens(const pkv__kv_seq *s)
{
    return s->tables[0].num_tokens;
}

/* Logical blocks of its tables (the same in every group). */
static inline uint32_t pkv__kv_blocks(const pkv__kv_seq *s)
{
    return s->tables[0].num_blocks;
}

/* Blocks it holds references on, over every group. */
uint32_t pkv__kv_held(const pkv__kv_seq *s);

/* Blocks giving n_new more tokens slots takes, over every group, the
 * copies of shared or cached last blocks included, with references read
 * by refs(context, block) (refs NULL: the pool's). Pure. */
uint32_t pkv__kv_needed(const pkv__kv *kv, const pkv__kv_seq *s,
                        uint32_t n_new, pkv__ref_reader refs,
                        const void *context);

/* Room for n blocks in every table and `links` links in the chain, so
 * that what follows cannot fail for memory. */
pkv_status pkv__kv_reserve(const pkv__kv *kv, pkv__kv_seq *s, uint32_t n,
                           uint32_t links);

/* A prefix lookup's hit (pkv__kv_lookup). */
typedef struct pkv__kv_hit {
    uint32_t blocks; /* the prompt's first blocks whose KV every group
                        holds, as a cache */
    uint32_t held;   /* the block ids an admission of it takes, over every
                        group */
} pkv__kv_hit;

/* Room a lookup of n tokens' prompt needs in its links and in its ids. */
static inline uint32_t pkv__kv_lookup_room(const pkv__kv *kv, uint32_t n)
{
    return (n / kv->pool.block_size + 1) * kv->groups.num_groups;
}

/* The longest run of the prompt's first blocks, tokens[0 .. n) (at most
 * (n - 1) / block_size blocks, so the last token is computed again),
 * whose KV the cache holds in every group: in a windowed group only the
 * blocks the first row computed after the hit sees. Writes group 0's
 * chain links to links and the block ids an admission holds to ids,
 * group after group, each from the first block that row sees. Pure:
 * takes no references; uses s's salt and prompt hashes. */
pkv__kv_hit pkv__kv_lookup(const pkv__kv *kv, const pkv__kv_seq *s,
                           const int32_t *tokens, uint32_t n,
                           pkv__chain_link *links, uint32_t *ids);

/* Admit the empty s with a lookup's hit of `blocks` blocks: its tables
 * take a reference on each of ids (as the lookup wrote them), its chain
 * the links. Reserved (pkv__kv_reserve), it fails only for a pkv bug. */
pkv_status pkv__kv_adopt(pkv__kv *kv, pkv__kv_seq *s,
                         const pkv__chain_link *links, const uint32_t *ids,
                         uint32_t blocks);

/* Give n_new more tokens slots in every table; copies[g] is group g's
 * copy-on-write (table.h). All or nothing for the pool. */
pkv_status pkv__kv_append(pkv__kv *kv, pkv__kv_seq *s, uint32_t n_new,
                          pkv__block_copy *copies);

/* Keep the first n_tokens tokens' slots in every table. */
void pkv__kv_truncate(pkv__kv *kv, pkv__kv_seq *s, uint32_t n_tokens);

/* Release every block and the chain (tail first); s stays usable. */
void pkv__kv_drop(pkv__kv *kv, pkv__kv_seq *s);

/* Make the empty dst share every block of src, and its chain. All or
 * nothing. */
pkv_status pkv__kv_fork(pkv__kv *kv, pkv__kv_seq *dst,
                        const pkv__kv_seq *src);

/* In each windowed group, drop the blocks that lie wholly behind the
 * window of the row at token `next` (the sequence's next row): no later
 * row can see them. Returns the blocks dropped. */
uint32_t pkv__kv_slide(pkv__kv *kv, pkv__kv_seq *s, uint32_t next);

/* Whether its first `computed` tokens fill blocks past its chain: then
 * pkv__kv_register has blocks to register. */
static inline int pkv__kv_behind(const pkv__kv *kv, const pkv__kv_seq *s,
                                 uint32_t computed)
{
    return pkv__prefix_chain_behind(&s->chain, computed, kv->pool.block_size);
}

/* Its full blocks past its chain, whose KV is written and whose tokens
 * are tokens[] (every token its tables hold), join the prefix cache: group
 * 0's extend the chain (a block equal to one cached links to that one),
 * the other groups' hang off it (prefix_groups.h). *first_new: the
 * chain's first link registered now. PKV_ERR_OUT_OF_MEMORY when the chain
 * could not grow (a cache: later prompts miss). */
pkv_status pkv__kv_register(pkv__kv *kv, pkv__kv_seq *s,
                            const int32_t *tokens, uint32_t *first_new);

/* Whether a row at token `next` would see a block a windowed group has
 * dropped (a cut back to `next` then needs the KV computed again). */
int pkv__kv_window_lost(const pkv__kv *kv, const pkv__kv_seq *s,
                        uint32_t next);

/* Blocks a sequence whose next row is at token `next` holds in all its
 * groups once its tables reach `tokens` tokens, each windowed group from
 * the first block that row sees (a swap's: out and back in). */
uint32_t pkv__kv_blocks_from(const pkv__kv *kv, uint32_t next,
                             uint32_t tokens);

/* Give the empty tables slots for `tokens` tokens, each windowed group's
 * from the first block the row at token `next` sees (the blocks before
 * are dropped): a swapped sequence coming back. All or nothing. */
pkv_status pkv__kv_swap_in(pkv__kv *kv, pkv__kv_seq *s, uint32_t next,
                           uint32_t tokens);

/* The most blocks a sequence of `tokens` tokens holds at once, over every
 * group, when it computes at most `chunk` rows a step: every block in a
 * group without a window, the window's and a chunk's in a windowed one. */
uint64_t pkv__kv_peak_blocks(const pkv__kv *kv, uint64_t tokens,
                             uint32_t chunk);

#endif
