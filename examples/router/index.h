/* SPDX-License-Identifier: MIT */
/*
 * The router's block index: which backend holds which KV block, as the
 * backends' KV events say. It does not know any engine's hash function:
 * a stored block is kept under its link (its parent block's hash and its
 * own token ids) and under its own hash, so that a prompt's blocks are
 * walked from the root through the events' token ids, and a removal
 * (which names only hashes) finds the link to drop.
 *
 * Hashes are opaque: vLLM's events carry an integer or a byte string;
 * both are kept as bytes (an integer as its 8 big-endian bytes) with
 * their kind, so that 1 and b"\x00...\x01" stay different.
 *
 * Thread-safety: every function takes the index's lock; any thread.
 */
#ifndef PKV_ROUTER_INDEX_H
#define PKV_ROUTER_INDEX_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* The longest block hash kept (vLLM's are 32-byte SHA-256 digests). */
#define RT_HASH_MAX 32

enum { RT_HASH_NONE, RT_HASH_INT, RT_HASH_BYTES };

typedef struct rt_hash {
    uint8_t kind; /* RT_HASH_*: NONE is a root block's parent */
    uint8_t len;
    uint8_t bytes[RT_HASH_MAX];
} rt_hash;

typedef struct rt_node rt_node;

/* One backend's blocks: two chained hash tables over the same nodes. */
typedef struct rt_table {
    rt_node **by_hash, **by_link;
    size_t num_slots; /* a power of two */
    size_t count;
    uint32_t block_size; /* of the first stored block; 0: none yet */
} rt_table;

typedef struct rt_index {
    pthread_mutex_t lock;
    rt_table *tables; /* one per backend */
    uint32_t num_backends;
    size_t max_blocks; /* per backend; stores beyond it are not kept */
    uint64_t seed;     /* of the tables' hash function */
} rt_index;

/* 0, or -1 out of memory. */
int rt_index_init(rt_index *x, uint32_t num_backends, size_t max_blocks);
void rt_index_free(rt_index *x);

/* Backend b stored n blocks, each of block_size tokens, hashes[i]
 * chained on hashes[i - 1] (the first on parent), tokens[i * block_size
 * ...] each one's ids. A block whose hash is kept already is refreshed.
 * 0; -1 when block_size differs from the backend's earlier blocks (the
 * event is not kept) or out of memory (the blocks after it are not
 * kept). */
int rt_index_store(rt_index *x, uint32_t b, const rt_hash *parent,
                   const rt_hash *hashes, uint32_t n, const int32_t *tokens,
                   uint32_t block_size);

/* Backend b removed the block of hash h (nothing when it is not kept). */
void rt_index_remove(rt_index *x, uint32_t b, const rt_hash *h);

/* Backend b's blocks are all gone. */
void rt_index_clear(rt_index *x, uint32_t b);

/* Blocks kept for backend b. */
size_t rt_index_count(rt_index *x, uint32_t b);

/* The tokens of tokens[0, n) that backend b holds as a chain of whole
 * blocks from the root: blocks walked times its block size. */
uint32_t rt_index_match(rt_index *x, uint32_t b, const int32_t *tokens,
                        uint32_t n);

#endif
