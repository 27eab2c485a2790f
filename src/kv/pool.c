/* SPDX-License-Identifier: MIT */
/* The block pool (pool.h): allocation, reference counts, the free and LRU
 * queues. */
#include "pool.h"

#include <string.h>

static void queue_init(pkv__queue *q)
{
    q->head = PKV__NO_BLOCK;
    q->tail = PKV__NO_BLOCK;
}

static void queue_push_back(pkv__block *blocks, pkv__queue *q, uint32_t b)
{
    blocks[b].prev = q->tail;
    blocks[b].next = PKV__NO_BLOCK;
    if (q->tail == PKV__NO_BLOCK)
        q->head = b;
    else
        blocks[q->tail].next = b;
    q->tail = b;
}

static void queue_remove(pkv__block *blocks, pkv__queue *q, uint32_t b)
{
    uint32_t prev = blocks[b].prev;
    uint32_t next = blocks[b].next;
    if (prev == PKV__NO_BLOCK)
        q->head = next;
    else
        blocks[prev].next = next;
    if (next == PKV__NO_BLOCK)
        q->tail = prev;
    else
        blocks[next].prev = prev;
    blocks[b].prev = PKV__NO_BLOCK;
    blocks[b].next = PKV__NO_BLOCK;
}

pkv_status pkv__pool_init(pkv__pool *pool, const pkv__allocator *alloc,
                          uint32_t num_blocks, uint32_t block_size)
{
    if (num_blocks < 2 || num_blocks == PKV__NO_BLOCK || block_size == 0)
        return PKV_ERR_INVALID_ARGUMENT;
    pkv__block *blocks = pkv__calloc(alloc, num_blocks, sizeof *blocks);
    if (blocks == NULL)
        return PKV_ERR_OUT_OF_MEMORY;
    pool->alloc = *alloc;
    pool->blocks = blocks;
    pool->num_blocks = num_blocks;
    pool->block_size = block_size;
    pool->table_edits = 0;
    queue_init(&pool->free_queue);
    queue_init(&pool->lru_queue);
    pool->on_uncache = NULL;
    pool->on_uncache_ctx = NULL;
    blocks[PKV__NULL_BLOCK].state = PKV__BLOCK_RESERVED;
    blocks[PKV__NULL_BLOCK].prev = PKV__NO_BLOCK;
    blocks[PKV__NULL_BLOCK].next = PKV__NO_BLOCK;
    for (uint32_t b = 1; b < num_blocks; b++) {
        blocks[b].state = PKV__BLOCK_FREE;
        queue_push_back(blocks, &pool->free_queue, b);
    }
    pool->num_free = num_blocks - 1;
    pool->num_cached_free = 0;
    pool->num_used = 1;
    pool->tokens_stored = 0;
    memset(pool->group_used, 0, sizeof pool->group_used);
    memset(pool->group_tokens, 0, sizeof pool->group_tokens);
    return PKV_OK;
}

void pkv__pool_release(pkv__pool *pool)
{
    pkv__free(&pool->alloc, pool->blocks, pool->num_blocks,
              sizeof *pool->blocks);
    pool->blocks = NULL;
    pool->num_blocks = 0;
}

uint32_t pkv__pool_available(const pkv__pool *pool)
{
    return pool->num_free + pool->num_cached_free;
}

/* Take one block off a queue head and make it used and empty. */
static uint32_t take_block(pkv__pool *pool)
{
    pkv__block *blocks = pool->blocks;
    uint32_t b = pool->free_queue.head;
    if (b != PKV__NO_BLOCK) {
        queue_remove(blocks, &pool->free_queue, b);
        pool->num_free--;
    } else {
        b = pool->lru_queue.head;
        /* Evicting: the prefix index forgets the block first. uncache
         * moves it to the free queue, from which it is taken. */
        pkv__pool_uncache(pool, b);
        queue_remove(blocks, &pool->free_queue, b);
        pool->num_free--;
    }
    blocks[b].state = PKV__BLOCK_USED;
    blocks[b].ref_count = 1;
    blocks[b].fill = 0;
    blocks[b].group = 0;
    blocks[b].generation++;
    pool->num_used++;
    pool->group_used[0]++;
    return b;
}

pkv_status pkv__pool_alloc(pkv__pool *pool, uint32_t n, uint32_t *out)
{
    if (n > pkv__pool_available(pool))
        return PKV_ERR_NO_BLOCKS;
    for (uint32_t i = 0; i < n; i++)
        out[i] = take_block(pool);
    return PKV_OK;
}

void pkv__pool_incref(pkv__pool *pool, uint32_t block)
{
    pkv__block *blk = &pool->blocks[block];
    if (blk->state == PKV__BLOCK_CACHED_FREE) {
        queue_remove(pool->blocks, &pool->lru_queue, block);
        pool->num_cached_free--;
        pool->num_used++;
        pool->tokens_stored += blk->fill;
        pool->group_used[blk->group]++;
        pool->group_tokens[blk->group] += blk->fill;
        blk->state = PKV__BLOCK_USED;
    }
    blk->ref_count++;
}

void pkv__pool_decref(pkv__pool *pool, uint32_t block)
{
    pkv__block *blk = &pool->blocks[block];
    if (--blk->ref_count > 0)
        return;
    pool->num_used--;
    pool->tokens_stored -= blk->fill;
    pool->group_used[blk->group]--;
    pool->group_tokens[blk->group] -= blk->fill;
    if (blk->cached) {
        blk->state = PKV__BLOCK_CACHED_FREE;
        queue_push_back(pool->blocks, &pool->lru_queue, block);
        pool->num_cached_free++;
    } else {
        blk->state = PKV__BLOCK_FREE;
        queue_push_back(pool->blocks, &pool->free_queue, block);
        pool->num_free++;
    }
}

void pkv__pool_set_fill(pkv__pool *pool, uint32_t block, uint32_t fill)
{
    pkv__block *blk = &pool->blocks[block];
    pool->tokens_stored = pool->tokens_stored - blk->fill + fill;
    pool->group_tokens[blk->group] =
        pool->group_tokens[blk->group] - blk->fill + fill;
    blk->fill = fill;
}

void pkv__pool_set_group(pkv__pool *pool, uint32_t block, uint32_t group)
{
    pkv__block *blk = &pool->blocks[block];
    pool->group_used[blk->group]--;
    pool->group_tokens[blk->group] -= blk->fill;
    blk->group = (uint8_t)group;
    pool->group_used[group]++;
    pool->group_tokens[group] += blk->fill;
}

void pkv__pool_mark_cached(pkv__pool *pool, uint32_t block)
{
    pool->blocks[block].cached = 1;
}

void pkv__pool_uncache(pkv__pool *pool, uint32_t block)
{
    pkv__block *blk = &pool->blocks[block];
    if (!blk->cached)
        return;
    if (pool->on_uncache != NULL)
        pool->on_uncache(pool->on_uncache_ctx, block);
    blk->cached = 0;
    blk->generation++;
    if (blk->state == PKV__BLOCK_CACHED_FREE) {
        queue_remove(pool->blocks, &pool->lru_queue, block);
        pool->num_cached_free--;
        blk->state = PKV__BLOCK_FREE;
        /* Holding nothing worth keeping, it is reused before cached blocks. */
        queue_push_back(pool->blocks, &pool->free_queue, block);
        pool->num_free++;
    }
}
