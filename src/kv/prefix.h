/* SPDX-License-Identifier: MIT */
/*
 * Prefix cache: full blocks indexed by a chained 64-bit hash of
 * (parent hash, the block's token ids, salt), so that a new prompt can reuse
 * the KV of a prompt that started the same way.
 *
 * The hash only finds candidates. A hit is accepted when the candidate
 *   - holds exactly the prompt's token ids for that block (stored with it),
 *   - has the same salt (tenants never share), and
 *   - was computed after the block accepted one position earlier in the same
 *     lookup: it records its parent's (block id, generation), and the pool
 *     changes a block's generation whenever its contents may change.
 * By induction every accepted block's KV was computed from exactly the
 * prompt's tokens, so a hash collision can cost a hit but never hand one
 * prompt another prompt's KV.
 */
#ifndef PKV_PREFIX_H
#define PKV_PREFIX_H

#include "kv/events.h"
#include "table.h"

/* One accepted block of a sequence's chain: its hash and the block that holds
 * it (possibly another sequence's block with identical contents). */
typedef struct pkv__chain_link {
    uint64_t hash;
    uint32_t block;
    uint32_t generation;
} pkv__chain_link;

/* The registered leading full blocks of one sequence. */
typedef struct pkv__prefix_chain {
    pkv__chain_link *links;
    uint32_t num_links;
    uint32_t capacity; /* 16 bytes in all: pkv__seq's first 64 hold it */
} pkv__prefix_chain;

typedef struct pkv__prefix_entry {
    uint64_t hash;
    uint64_t salt;
    uint32_t bucket_next;
    uint32_t parent;
    uint32_t parent_generation;
} pkv__prefix_entry;

typedef struct pkv__prefix {
    pkv__pool *pool;
    pkv__prefix_entry *entries; /* one per block */
    int32_t *tokens;            /* block_size token ids per block */
    uint32_t *buckets;
    uint32_t bucket_mask;
    /* Bits of the hash used by the index: all ones, except in tests that
     * force collisions. */
    uint64_t hash_mask;
    /* Told of every block that joins or leaves (the host's KV events);
     * NULL: none asked for. */
    pkv__kv_events *events;
} pkv__prefix;

/* Attach an index to the pool (one per pool). */
pkv_status pkv__prefix_init(pkv__prefix *prefix, pkv__pool *pool);
void pkv__prefix_release(pkv__prefix *prefix);

/* The chained hash of one full block of tokens. */
uint64_t pkv__prefix_hash(uint64_t parent_hash, const int32_t *tokens,
                          uint32_t count, uint64_t salt);

/* Longest run of cached full blocks that start tokens[0..n_tokens), at most
 * (n_tokens - 1) / block_size of them so that the last token is always
 * computed again. hashes[0..num_hashes) are the chained hashes of the first
 * blocks when the caller has them (pkv__prefix_hashes), so that a prompt
 * that waits through many admission attempts is hashed once; the rest are
 * computed. Writes the run to links[0..*n_hit) (links has room for
 * n_tokens / block_size). Pure: takes no references. */
void pkv__prefix_lookup(const pkv__prefix *prefix, const int32_t *tokens,
                        uint32_t n_tokens, uint64_t salt,
                        const uint64_t *hashes, uint32_t num_hashes,
                        pkv__chain_link *links, uint32_t *n_hit);

/* The chained hashes of the n full blocks of block_size tokens that start
 * tokens, into hashes[0..n). */
void pkv__prefix_hashes(const int32_t *tokens, uint32_t n,
                        uint32_t block_size, uint64_t salt, uint64_t *hashes);

void pkv__prefix_chain_init(pkv__prefix_chain *chain);
void pkv__prefix_chain_release(pkv__prefix_chain *chain,
                               const pkv__pool *pool);

/* Room for n links, so that an adopt of n cannot fail. */
pkv_status pkv__prefix_chain_reserve(pkv__prefix_chain *chain,
                                     const pkv__pool *pool, uint32_t n);

/* Seed an empty chain with the links of a lookup (after the table adopted
 * their blocks). All or nothing. */
pkv_status pkv__prefix_chain_adopt(pkv__prefix_chain *chain,
                                   const pkv__pool *pool,
                                   const pkv__chain_link *links, uint32_t n);

/* The cached block of group 0 (pool.h) that holds `tokens` (one full
 * block) after `parent` (an accepted block with its generation; the null
 * block for the first block of a prompt) under chained hash `hash` and
 * salt, or PKV__NO_BLOCK. */
uint32_t pkv__prefix_find(const pkv__prefix *prefix, uint64_t hash,
                          const int32_t *tokens, uint64_t salt, uint32_t parent,
                          uint32_t parent_generation);

/* The same for a group of layers (prefix_groups.h): only a block that
 * holds that group's KV (pkv__block.group) is found, so that even a hash
 * collision never hands a group another group's layers. */
uint32_t pkv__prefix_find_group(const pkv__prefix *prefix, uint32_t group,
                                uint64_t hash, const int32_t *tokens,
                                uint64_t salt, uint32_t parent,
                                uint32_t parent_generation);

/* Register a block that is not cached, holding `tokens` (its KV written)
 * after parent, as pkv__prefix_find would find it. parent_hash: the hash
 * of the block before it in its prompt, in its group (NULL: the prompt's
 * first block), for the KV events. */
void pkv__prefix_insert(pkv__prefix *prefix, uint32_t block, uint64_t hash,
                        const int32_t *tokens, uint64_t salt, uint32_t parent,
                        uint32_t parent_generation,
                        const uint64_t *parent_hash);

/* Whether the first `tokens` tokens fill blocks past the chain: what
 * pkv__prefix_register would register. */
static inline int pkv__prefix_chain_behind(const pkv__prefix_chain *chain,
                                           uint32_t tokens,
                                           uint32_t block_size)
{
    return tokens / block_size > chain->num_links;
}

/* Register the table's full blocks past the chain, whose token ids are
 * tokens[0..table->num_tokens) and whose KV has been written. A block equal
 * to one already cached links to that one instead. All or nothing. */
pkv_status pkv__prefix_register(pkv__prefix *prefix, pkv__prefix_chain *chain,
                                const pkv__table *table, const int32_t *tokens,
                                uint64_t salt);

/* Forget links past the first n_full_blocks (after a truncate). */
void pkv__prefix_chain_truncate(pkv__prefix_chain *chain,
                                uint32_t n_full_blocks);

#endif
