/* SPDX-License-Identifier: MIT */
/*
 * The KV-cache manager: one object that owns the blocks. It holds the
 * block pool, the prefix cache and its chained hashes, the groups of
 * layers, the staging tails of quantized caches with their rollback
 * window, and each sequence's KV: its block table in every group, its
 * chain of registered blocks, its tail, and its KV as host bytes while it
 * is swapped out. The rest of the engine asks it to look up a prompt's
 * cached prefix, reserve and give a step's rows their slots, register
 * the blocks a step filled and slide the windowed groups, fork, cut,
 * release, swap out and in, and reads a sequence's tables group by group.
 * One group of every layer is the case N = 1 of the same code
 * (docs/design.md, "The KV-cache manager"; vLLM's KVCacheManager and
 * KVCacheCoordinator, llama.cpp's llama_kv_cache_iswa play this part in
 * their engines).
 *
 * Every group's table of a sequence holds the same tokens; a windowed
 * group holds only the blocks from the first one its next row (during a
 * step, the step's first row) sees, the others being the null block. The
 * manager counts blocks per group, never per tenant: a caller that
 * changes a sequence's blocks counts what it holds (pkv__kv_held) against
 * the sequence's tenant.
 *
 * It moves KV bytes only through the backend's ops (device copies of
 * tails, swap buffers), never attends: the step's attention is the
 * engine's call on the backend.
 */
#ifndef PKV_KV_KV_H
#define PKV_KV_KV_H

#include "backend.h"
#include "kv/events.h"
#include "kv/groups.h"
#include "kv/pool.h"
#include "kv/prefix.h"
#include "kv/rollback.h"
#include "kv/table.h"
#include "lock.h"
#include "prefetch.h"

typedef struct pkv__kv {
    pkv__groups groups;
    pkv__pool pool;
    pkv__prefix prefix;
    /* The backend whose arenas hold the blocks' KV (the engine's). */
    const pkv__device *device;
    size_t swap_block_bytes; /* one block over every arena, as host bytes */
    size_t stage_bytes;      /* one staging tail; 0: the cache has none */
    /* Quantized caches: the staging tails no running sequence holds
     * (max_stages of them, one per running sequence at most), and the
     * rollback window over them. */
    uint32_t *free_stages;
    uint32_t num_free_stages;
    uint32_t max_stages;
    pkv__rollback rollback;
    uint64_t swap_used; /* host bytes of swapped-out sequences' KV, those
                           imported aside (pkv__kv_seq.swap_imported) */
    /* The prefix lock: held by the stepping thread inside every call that
     * changes the pool or the prefix index (pkv__kv_lock), and by lookups
     * from other threads (pkv__kv_probe), which only read. */
    pkv__lock *lock;
    /* The host's KV events (events.h), off without its callback. */
    pkv__kv_events events;
} pkv__kv;

/* What the manager keeps of a sequence that a step does not read: its
 * prefix-cache salt and prompt hashes, its KV as host bytes while it is
 * swapped out, and its tables, allocated with it. */
typedef struct pkv__kv_record {
    uint64_t salt; /* the tenant's prefix-cache salt */
    /* The chained hashes of the prompt's full blocks that a prefix lookup
     * may use ((prompt_len - 1) / block_size), computed once when the
     * sequence is made, on the host's thread; none for a fork. A
     * truncation keeps those of blocks it left whole (num_prompt_hashes),
     * of prompt_hashes_size allocated. */
    uint64_t *prompt_hashes;
    uint32_t num_prompt_hashes;
    uint32_t prompt_hashes_size;
    /* Swapped out: each group's blocks from the first its next row sees,
     * group after group (pkv__kv_swap_bytes), then the staging tail of a
     * quantized cache; swap_blocks are the blocks to copy out until the
     * copy ran. swap_imported: made by pkv_seq_import, not counted in
     * swap_used, which bounds what preemption takes. */
    uint8_t *swap;
    size_t swap_size;
    uint32_t *swap_blocks;
    uint32_t swap_num_blocks;
    uint32_t swap_stage; /* the tail to copy out with them */
    uint8_t swap_imported;
    uint32_t groups;
    pkv__table tables[]; /* [groups] */
} pkv__kv_record;

/* A sequence's KV: embedded in pkv__seq (seq.h) so that a step reads what
 * it needs with the sequence, the chain in step_end's first line, the
 * tables and the tail in step_begin's; the rest is the manager's record.
 * Only the manager's functions change it. */
typedef struct pkv__kv_seq {
    /* Its registered full blocks, group 0's: the prefix cache's chain. */
    pkv__prefix_chain chain;
    pkv__table *tables;      /* [groups]: group g's block table */
    pkv__kv_record *record; /* holds the tables */
    uint32_t stage;          /* its staging tail while it runs (quantized
                                caches), else PKV__NO_STAGE */
} pkv__kv_seq;

/* The groups of validated params (their layer windows set): the layout,
 * which the backend's arenas follow, and nothing proportional to the
 * blocks yet; and the staging tails and rollback window of a quantized
 * cache. PKV_ERR_OUT_OF_MEMORY. */
pkv_status pkv__kv_init(pkv__kv *kv, const pkv__allocator *alloc,
                        const pkv_engine_params *params);

/* The pool of num_blocks blocks of block_size tokens and its prefix
 * index, over the backend that holds the arenas (made first, so that a
 * cache too large for the machine fails before this host memory is
 * spent) and whose config says the host copies' sizes; and the KV events
 * of params (kv_events NULL: none). */
pkv_status pkv__kv_init_pool(pkv__kv *kv, const pkv__allocator *alloc,
                             const pkv__device *device,
                             const pkv__backend_config *config,
                             const pkv_engine_params *params);

/* Release what the inits made (any of it). */
void pkv__kv_release(pkv__kv *kv, const pkv__allocator *alloc);

/* ------------------------------------------------ the prefix lock, events */

/* Take and give the prefix lock: the stepping thread around a call that
 * may change the pool or the prefix index, never around a delivery of
 * events (the host's callback may look up). */
static inline void pkv__kv_lock(const pkv__kv *kv)
{
    pkv__lock_take(kv->lock);
}

static inline void pkv__kv_unlock(const pkv__kv *kv)
{
    pkv__lock_give(kv->lock);
}

/* The tokens' longest run of cached leading blocks, as pkv__kv_lookup
 * would find for a sequence of tokens[0 .. n) and salt (at most (n - 1) /
 * block_size), into *blocks: from any thread, under the prefix lock
 * (taken here), nothing changed. PKV_ERR_OUT_OF_MEMORY for scratch
 * (alloc's, on the calling thread). */
pkv_status pkv__kv_probe(const pkv__kv *kv, const pkv__allocator *alloc,
                         const int32_t *tokens, uint32_t n, uint64_t salt,
                         uint32_t *blocks);

/* Deliver the KV events since the last delivery to the host (events.h),
 * on the stepping thread, without the prefix lock. */
void pkv__kv_deliver_events(pkv__kv *kv);

/* Whether any block is held (by a sequence, a fork, a swap-out in
 * flight): the prefix cache can then not be emptied. */
static inline int pkv__kv_in_use(const pkv__kv *kv)
{
    return kv->pool.num_used > 1; /* the null block is always used */
}

/* Empty the prefix cache (no block held: pkv__kv_in_use is 0): every
 * cached block becomes free; the events announce ALL_CLEARED. */
void pkv__kv_clear(pkv__kv *kv);

/* ------------------------------------------------------ a sequence's KV */

/* A new sequence's KV (on any thread: it reads only what create fixed):
 * an empty table per group, no tail, the salt, and the chained hashes of
 * the full blocks of its prompt's first `prompt_len` tokens (0: none)
 * that a lookup may use. PKV_ERR_OUT_OF_MEMORY leaves s empty. */
pkv_status pkv__kv_seq_init(const pkv__kv *kv, pkv__kv_seq *s,
                            const pkv__allocator *alloc,
                            const int32_t *prompt, uint32_t prompt_len,
                            uint64_t salt);

/* Free its memory (NULL record: nothing). Its blocks, tail and swap
 * bytes are released first (pkv__kv_drop, pkv__kv_drop_swap). */
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

/* Its staging tail (PKV__NO_STAGE: none). */
static inline uint32_t pkv__kv_stage(const pkv__kv_seq *s)
{
    return s->stage;
}

/* The step's window tails (pkv__step.windows), NULL without a window. */
static inline const uint32_t *pkv__kv_step_windows(const pkv__kv *kv)
{
    return kv->rollback.window_blocks != NULL ? kv->rollback.row_windows
                                              : NULL;
}

/* Its chain's length: its first blocks registered in the prefix cache
 * (group 0's). */
static inline uint32_t pkv__kv_registered(const pkv__kv_seq *s)
{
    return s->chain.num_links;
}

/* Its prefix-cache salt. */
static inline uint64_t pkv__kv_salt(const pkv__kv_seq *s)
{
    return s->record->salt;
}

/* A block's references (pool.h). */
static inline uint32_t pkv__kv_refs(const pkv__kv *kv, uint32_t block)
{
    return kv->pool.blocks[block].ref_count;
}

/* Whether the cache is quantized: its sequences' partly filled blocks
 * are in staging tails. */
static inline int pkv__kv_quantized(const pkv__kv *kv)
{
    return kv->max_stages > 0;
}

/* The cache slot of the token at `position` in table t (one of a
 * sequence's, pkv__kv_table). */
static inline uint64_t pkv__kv_slot(const pkv__kv *kv, const pkv__table *t,
                                    uint32_t position)
{
    return pkv__table_slot(t, &kv->pool, position);
}

/* Host bytes swapped-out sequences hold (those imported aside). */
static inline uint64_t pkv__kv_swap_used(const pkv__kv *kv)
{
    return kv->swap_used;
}

/* Prefetch the pool entry of s's first table's last block (prefetch.h):
 * the last link of the planner's chain per sequence. */
static inline void pkv__kv_prefetch_tail(const pkv__kv *kv,
                                         const pkv__kv_seq *s)
{
    const pkv__table *t = &s->tables[0];
    if (t->num_blocks > 0)
        PKV__PREFETCH(&kv->pool.blocks[t->blocks[t->num_blocks - 1]]);
}

/* Blocks an allocation can take now: free, and cached and unreferenced. */
static inline uint32_t pkv__kv_available(const pkv__kv *kv)
{
    return pkv__pool_available(&kv->pool);
}

/* Blocks it holds references on, over every group. */
static inline uint32_t pkv__kv_held(const pkv__kv *kv, const pkv__kv_seq *s)
{
    uint32_t n = 0;
    for (uint32_t g = 0; g < kv->groups.num_groups; g++)
        n += pkv__table_held(&s->tables[g]);
    return n;
}

/* Blocks giving n_new more tokens slots takes, over every group, the
 * copies of shared or cached last blocks included, with references read
 * by refs(context, block) (refs NULL: the pool's). Pure. */
uint32_t pkv__kv_needed(const pkv__kv *kv, const pkv__kv_seq *s,
                        uint32_t n_new, pkv__ref_reader refs,
                        const void *context);

/* The blocks giving n_new more tokens slots copies (copy-on-write: a
 * shared or cached, partly filled last block), references read as
 * pkv__kv_needed reads them, into blocks (room for a block per group);
 * returns how many. Pure. */
uint32_t pkv__kv_copied(const pkv__kv *kv, const pkv__kv_seq *s,
                        uint32_t n_new, pkv__ref_reader refs,
                        const void *context, uint32_t *blocks);

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

/* Group 0's part of a lookup: the longest run of the prompt's first
 * blocks the prefix cache holds there (its chain), into links (room for
 * n / block_size), with s's salt and prompt hashes; returns its length.
 * Pure. */
uint32_t pkv__kv_chain_lookup(const pkv__kv *kv, const pkv__kv_seq *s,
                              const int32_t *tokens, uint32_t n,
                              pkv__chain_link *links);

/* The chained hash of s's block j, tokens block_tokens, after the block
 * whose hash is parent_hash: its prompt hash when it has one. */
uint64_t pkv__kv_chain_hash(const pkv__kv *kv, const pkv__kv_seq *s,
                            uint32_t j, uint64_t parent_hash,
                            const int32_t *block_tokens);

/* Admit the empty s with a lookup's hit of `blocks` blocks: its tables
 * take a reference on each of ids (as the lookup wrote them), its chain
 * the links. Reserved (pkv__kv_reserve), it fails only for a pkv bug. */
pkv_status pkv__kv_adopt(pkv__kv *kv, pkv__kv_seq *s,
                         const pkv__chain_link *links, const uint32_t *ids,
                         uint32_t blocks);

/* Give n_new more tokens slots in every table; copies[g] is group g's
 * copy-on-write (table.h) for the backend to make, none with a quantized
 * cache (a partly filled block's rows are in the tail). All or nothing
 * for the pool. */
pkv_status pkv__kv_append(pkv__kv *kv, pkv__kv_seq *s, uint32_t n_new,
                          pkv__block_copy *copies);

/* Keep the first n_tokens tokens' slots in every table. */
void pkv__kv_truncate(pkv__kv *kv, pkv__kv_seq *s, uint32_t n_tokens);

/* Cut a running sequence's KV, `computed` tokens of it written, back to
 * its first `keep` tokens as stored. A cut inside a frozen U8 block
 * (its rows exist only quantised) falls back to that block's start
 * unless the rollback window holds its rows, which come back to the
 * tail; a cut behind a window a group slid past keeps nothing (a step
 * computes every layer: nothing short of the whole sequence can be
 * computed again). A block others hold stays as it is (the next append
 * copies it). Returns the tokens kept. */
uint32_t pkv__kv_cut(pkv__kv *kv, pkv__kv_seq *s, uint32_t computed,
                     uint32_t keep);

/* The sequence's tokens from n_tokens on changed (a truncation): forget
 * the prompt hashes of blocks it did not keep whole. */
void pkv__kv_forget_tokens(pkv__kv *kv, pkv__kv_seq *s, uint32_t n_tokens);

/* Release every block, the chain and the tail (tail first: the tail's
 * windows, then the blocks tail first); s stays usable. */
void pkv__kv_drop(pkv__kv *kv, pkv__kv_seq *s);

/* Give a sequence that starts running a staging tail (quantized caches;
 * there is one for every sequence that may run). */
void pkv__kv_take_stage(pkv__kv *kv, pkv__kv_seq *s);

/* Make the empty dst share every block of the running src and its chain,
 * and give it a staging tail holding a copy of src's (a device copy).
 * All or nothing: a failed copy leaves dst empty (its status). */
pkv_status pkv__kv_fork(pkv__kv *kv, pkv__kv_seq *dst,
                        const pkv__kv_seq *src);

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

/* In each windowed group, drop the blocks that lie wholly behind the
 * window of the row at token `next` (the sequence's next row): no later
 * row can see them. Returns the blocks dropped. After every sequence's
 * step: without a windowed group, no call. */
uint32_t pkv__kv_slide_windows(pkv__kv *kv, pkv__kv_seq *s, uint32_t next);
static inline uint32_t pkv__kv_slide(pkv__kv *kv, pkv__kv_seq *s,
                                     uint32_t next)
{
    return kv->groups.first_windowed < kv->groups.num_groups
               ? pkv__kv_slide_windows(kv, s, next)
               : 0;
}

/* The rollback window around a step (quantized caches with a window;
 * nothing otherwise): rows [first_row, first_row + rows) of the step
 * being built compute tokens from `computed` on, and a row that freezes one
 * of the last blocks the step freezes gets a window tail (the step's
 * windows, kv->rollback.row_windows); once the step ran, those windows
 * hold their blocks. */
static inline void pkv__kv_plan_windows(pkv__kv *kv, const pkv__kv_seq *s,
                                        uint32_t computed, uint32_t first_row,
                                        uint32_t rows)
{
    if (kv->rollback.window != 0)
        pkv__rollback_plan(&kv->rollback, s->stage, computed, first_row,
                           rows);
}

static inline void pkv__kv_commit_windows(pkv__kv *kv, const pkv__kv_seq *s,
                                          uint32_t computed,
                                          uint32_t first_row, uint32_t rows)
{
    if (kv->rollback.window != 0)
        pkv__rollback_commit(&kv->rollback, s->stage, computed, first_row,
                             rows);
}

/* Whether a row at token `next` would see a block a windowed group has
 * dropped (a cut back to `next` then needs the KV computed again). */
int pkv__kv_window_lost(const pkv__kv *kv, const pkv__kv_seq *s,
                        uint32_t next);

/* The most blocks a sequence of `tokens` tokens holds at once, over every
 * group, when it computes at most `chunk` rows a step: every block in a
 * group without a window, the window's and a chunk's in a windowed one. */
uint64_t pkv__kv_peak_blocks(const pkv__kv *kv, uint64_t tokens,
                             uint32_t chunk);

/* -------------------------------------------------------------- swapping */

/* Blocks a sequence whose next row is at token `next` holds in all its
 * groups once its tables reach `tokens` tokens, each windowed group from
 * the first block that row sees (a swap's: out and back in). */
uint32_t pkv__kv_blocks_from(const pkv__kv *kv, uint32_t next,
                             uint32_t tokens);

/* Host bytes of a sequence's KV swapped out (or exported) with its next
 * row at `computed`: pkv__kv_blocks_from(computed, computed) blocks over
 * every arena, then the staging tail of a quantized cache. */
size_t pkv__kv_swap_bytes(const pkv__kv *kv, uint32_t computed);

/* The host memory a swap-out of s (its next row at `computed`) needs:
 * 1, or 0 when there is none (nothing changed). */
int pkv__kv_swap_reserve(pkv__kv *kv, pkv__kv_seq *s,
                         const pkv__allocator *alloc, uint32_t computed);

/* Swap out the running s, whose swap is reserved: its windowed groups
 * drop what its next row cannot see, then its held blocks are listed for
 * the device copy (pkv__kv_swap_copy_out), counted in swap_used. Returns
 * the blocks the slide dropped. Its blocks and tail are released after
 * (pkv__kv_drop): their new owners write them only after the copy. */
uint32_t pkv__kv_swap_out(pkv__kv *kv, pkv__kv_seq *s, uint32_t computed);

/* The device copies of a swap-out (its blocks and the tail it had) and
 * of a swap-in, whose tables pkv__kv_swap_in made; the swap-in's frees
 * the host bytes. A failure changes no table: the swap-out's bytes are
 * then garbage, the swap-in's still intact. */
pkv_status pkv__kv_swap_copy_out(pkv__kv *kv, pkv__kv_seq *s,
                                 const pkv__allocator *alloc);
pkv_status pkv__kv_swap_copy_in(pkv__kv *kv, pkv__kv_seq *s,
                                const pkv__allocator *alloc,
                                uint32_t computed);

/* Give the empty tables slots for `tokens` tokens, each windowed group's
 * from the first block the row at token `next` sees (the blocks before
 * are dropped): a swapped sequence coming back (its tail:
 * pkv__kv_take_stage). All or nothing. */
pkv_status pkv__kv_swap_in(pkv__kv *kv, pkv__kv_seq *s, uint32_t next,
                           uint32_t tokens);

/* Read the running s's KV, `computed` tokens of it, into host as a
 * swap-out would write it (pkv__kv_swap_bytes): each group's blocks from
 * the first its next row sees, then the tail. Nothing changes. */
pkv_status pkv__kv_read(const pkv__kv *kv, const pkv__kv_seq *s,
                        uint32_t computed, uint8_t *host);

/* The host bytes of a swapped or imported sequence, NULL otherwise. */
static inline const uint8_t *pkv__kv_swapped(const pkv__kv_seq *s)
{
    return s->record->swap;
}

/* Take `size` host bytes (allocated by the engine's allocator, filled by
 * the caller in the swap layout: pkv_seq_import's) as the swapped-out KV
 * of the empty s, not counted in swap_used. */
void pkv__kv_swap_import(pkv__kv_seq *s, uint8_t *bytes, size_t size);

/* Free a swapped-out sequence's host bytes (nothing if it has none). */
void pkv__kv_drop_swap(pkv__kv *kv, pkv__kv_seq *s,
                       const pkv__allocator *alloc);

/* ------------------------------------------ the prefix cache's blocks */

/* Accessors of the manager's fixed layout. */
static inline uint32_t pkv__kv_block_size(const pkv__kv *kv)
{
    return kv->pool.block_size;
}

static inline uint32_t pkv__kv_num_groups(const pkv__kv *kv)
{
    return kv->groups.num_groups;
}

static inline uint32_t pkv__kv_num_blocks(const pkv__kv *kv)
{
    return kv->pool.num_blocks;
}

/* The first block group g's row at token `next` sees (0 without a
 * window). */
static inline uint32_t pkv__kv_first_seen(const pkv__kv *kv, uint32_t g,
                                          uint32_t next)
{
    return pkv__groups_first_seen(&kv->groups, g, kv->pool.block_size, next);
}

/* A block's generation (pool.h): it changes whenever the block's contents
 * may change or it leaves the prefix cache. */
static inline uint32_t pkv__kv_generation(const pkv__kv *kv, uint32_t block)
{
    return kv->pool.blocks[block].generation;
}

/* The block that holds s's chain link j's KV now: the link's, unless it
 * was evicted since (its generation moved on), then s's own group-0
 * block of those tokens, or PKV__NULL_BLOCK where a windowed group 0
 * dropped that. */
uint32_t pkv__kv_chain_block(const pkv__kv *kv, const pkv__kv_seq *s,
                             uint32_t j);

/* The copies of copy-on-write (pkv__kv_append's), on the backend, in
 * order. */
pkv_status pkv__kv_copy_blocks(const pkv__kv *kv, const pkv__block_copy *pairs,
                               uint32_t n);

/* Read n blocks' KV into host, each block's swap bytes after the one
 * before. */
pkv_status pkv__kv_read_blocks(const pkv__kv *kv, const uint32_t *blocks,
                               uint32_t n, uint8_t *host);

/* Blocks from outside the engine (a KV store's values): the KV of s's
 * prompt blocks [from, from + n), each block's swap bytes after the one
 * before at bytes, joins the prefix cache after links[0 .. from) (a
 * chain lookup's, all of them cached) as registrations of those tokens
 * would have put them: unreferenced, children first into the LRU queue,
 * never evicting the chain they follow; fewer when the pool has fewer
 * blocks to give. Returns how many joined, their ids in ids (room for
 * n); 0 with *status set when the device copy failed (nothing changed
 * then). */
uint32_t pkv__kv_install(pkv__kv *kv, const pkv__kv_seq *s,
                         const int32_t *tokens, const pkv__chain_link *links,
                         uint32_t from, uint32_t n, const uint8_t *bytes,
                         uint32_t *ids, pkv_status *status);

/* Whether the prefix cache holds group g's block of s's prompt block j
 * (tokens: the prompt's), after `link`, the cached group-0 block of
 * those tokens. */
int pkv__kv_group_cached(const pkv__kv *kv, const pkv__kv_seq *s,
                         const int32_t *tokens, const pkv__chain_link *link,
                         uint32_t j, uint32_t g);

/* The same as pkv__kv_install for one block of group g > 0, s's prompt
 * block j, whose KV is at bytes, after links[j] (prefix_groups.h), the
 * cached group-0 block of those tokens (links: a chain lookup's, up to
 * j): *id its block. PKV_ERR_NO_BLOCKS, or the device copy's status,
 * with nothing changed. */
pkv_status pkv__kv_install_group(pkv__kv *kv, const pkv__kv_seq *s,
                                 const int32_t *tokens,
                                 const pkv__chain_link *links, uint32_t j,
                                 uint32_t g, const uint8_t *bytes,
                                 uint32_t *id);

/* A cached block as a saved prefix cache holds it (kv_saved.c): the index
 * of its parent among the blocks listed before it (PKV__KV_ROOT: it is a
 * prompt's first block; a block of group g > 0 has the group-0 block of
 * its tokens as its parent, prefix_groups.h), its group, its salt and
 * its block_size tokens. */
#define PKV__KV_ROOT UINT32_MAX
typedef struct pkv__kv_saved {
    uint32_t parent;
    uint32_t group;
    uint64_t salt;
    const int32_t *tokens;
} pkv__kv_saved;

/* The cached blocks a lookup can still reach (each with its parents
 * cached up to a prompt's first block), parents first: their ids into
 * blocks, what a saved cache keeps of each into saved (both with room for
 * pkv__kv_num_blocks), *n of them. PKV_ERR_OUT_OF_MEMORY (for scratch):
 * none. */
pkv_status pkv__kv_reachable(const pkv__kv *kv, const pkv__allocator *alloc,
                             uint32_t *blocks, pkv__kv_saved *saved,
                             uint32_t *n);

/* Saved blocks join the prefix cache: saved[0 .. n), parents first (each
 * parent in group 0, each group one of the manager's), their KV at bytes,
 * one block's swap bytes after another. Only free blocks take them, so
 * nothing cached is evicted; a block the cache holds already, or whose
 * parent did not join, is skipped. Each block that joins is cached and
 * unreferenced, children first into the LRU queue (evicted before their
 * parents); *loaded says how many. PKV_ERR_OUT_OF_MEMORY or the device
 * copy's failure change nothing. */
pkv_status pkv__kv_load_saved(pkv__kv *kv, const pkv__allocator *alloc,
                              const pkv__kv_saved *saved, uint32_t n,
                              const uint8_t *bytes, uint32_t *loaded);

/* ------------------------------------------------------------ invariants */

/* What the engine knows of a sequence whose KV it checks. */
typedef struct pkv__kv_seq_state {
    pkv_seq_id id;     /* for the messages */
    int running;       /* it holds blocks and a tail */
    int swapped;       /* it holds swap bytes */
    uint32_t computed; /* tokens whose KV is written */
    uint32_t covered;  /* tokens with slots: computed, and during a step
                          the step's rows */
} pkv__kv_seq_state;

/* What the sequences' checks count for pkv__kv_check. */
typedef struct pkv__kv_tally {
    uint32_t *refs;  /* [num_blocks]: references the tables hold; NULL:
                        not counted (no memory for it) */
    uint64_t swap;   /* swap bytes counted in swap_used */
    uint32_t stages; /* staging tails running sequences hold */
} pkv__kv_tally;

/* NULL when the sequence's KV is as its state says: a running one's
 * tables cover exactly its slots, hold exactly the blocks from the first
 * each group's next row sees, count in the blocks' groups and fills, and
 * it holds a tail with windows on blocks it froze; any other holds no
 * block nor tail, and swap bytes exactly when swapped out. Else what is
 * broken, in buf. Counts into tally. */
const char *pkv__kv_check_seq(const pkv__kv *kv, const pkv__kv_seq *s,
                              const pkv__kv_seq_state *state,
                              pkv__kv_tally *tally, char *buf, size_t size);

/* NULL when the pool holds (every block in one state, queues and counts,
 * fills and groups, the null block holding nobody's KV), the references
 * the sequences counted are the blocks', swap_used is their swap bytes
 * (within swap_bytes), the tails are held or free, and a free tail's
 * windows are empty. Else what is broken, in buf. */
const char *pkv__kv_check(const pkv__kv *kv, const pkv__kv_tally *tally,
                          uint64_t swap_bytes, char *buf, size_t size);

#endif
