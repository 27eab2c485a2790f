/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target for the host-side memory manager (pool, block tables, prefix
 * cache). The input picks a small pool and then a sequence of operations on
 * up to MAX_SEQS sequences: add (prefix lookup, adopt the hits, append the
 * rest), append, fork, truncate, free, lookup. Every invariant of pool.h,
 * table.h and prefix.h is checked after every operation.
 *
 * KV contents are modelled exactly: a trie interns every (salt, token
 * history), and content[] holds, for every cache slot, the trie node of the
 * history whose last token was computed into it (GARBAGE when no one has
 * written it). A table's token at position p must find its own history in
 * its slot; a prefix hit must hand out blocks whose slots hold exactly the
 * prompt's histories. That is the property that matters: a hit never gives
 * a sequence KV computed from other tokens or under another salt.
 */
#include "fuzz_blocks.h"
#include "fuzz_check.h"

#include "kv/prefix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    MAX_POOL = 64,
    MAX_BS = 16,
    MAX_SEQS = 16,
    MAX_TOK = 1024,
    NUM_SALTS = 4,
    ALPHABET = 4,
    RING = 8,
    GARBAGE = -2
};

static const uint64_t salts[NUM_SALTS] = {0, 1, 0x8000000000000000ull,
                                          UINT64_MAX};
static const int32_t alphabet[ALPHABET] = {7, -1, 0, INT32_MAX};

uint64_t pkv_fuzz_ops;

/* ------------------------------------------------------------ history trie */

typedef struct node {
    int32_t parent; /* -1 for a root */
    uint32_t depth; /* tokens in the history */
    int32_t child[ALPHABET];
    uint8_t sym;  /* index into alphabet of the last token */
    uint8_t salt; /* index into salts */
} node;

static node *trie;
static uint32_t trie_len;
static uint32_t trie_cap;

static int32_t trie_add(int32_t parent, uint8_t sym, uint8_t salt)
{
    if (trie_len == trie_cap) {
        uint32_t cap = trie_cap ? trie_cap * 2 : 4096;
        node *grown = realloc(trie, cap * sizeof *grown);
        CHECK(grown != NULL);
        trie = grown;
        trie_cap = cap;
    }
    node *n = &trie[trie_len];
    n->parent = parent;
    n->depth = parent < 0 ? 0 : trie[parent].depth + 1;
    for (int i = 0; i < ALPHABET; i++)
        n->child[i] = -1;
    n->sym = sym;
    n->salt = salt;
    return (int32_t)trie_len++;
}

static void trie_reset(void)
{
    trie_len = 0;
    for (uint8_t s = 0; s < NUM_SALTS; s++)
        trie_add(-1, 0, s);
}

/* The history `at` followed by sym. Nodes 0..NUM_SALTS-1 are the empty
 * histories of each salt. */
static int32_t trie_child(int32_t at, uint8_t sym)
{
    int32_t c = trie[at].child[sym];
    if (c < 0) {
        c = trie_add(at, sym, trie[at].salt);
        trie[at].child[sym] = c;
    }
    return c;
}

/* ------------------------------------------------------------------ state */

typedef struct seq {
    int live;
    uint8_t salt;
    pkv__table table;
    pkv__prefix_chain chain;
    uint8_t sym[MAX_TOK];
    int32_t tok[MAX_TOK];
    int32_t node[MAX_TOK];
} seq;

/* A token list with its histories: a prompt being built or a past one. */
typedef struct prompt {
    uint32_t n;
    uint8_t salt;
    uint8_t sym[MAX_TOK];
    int32_t tok[MAX_TOK];
    int32_t node[MAX_TOK];
} prompt;

typedef struct reader {
    const uint8_t *data;
    size_t size;
    size_t pos;
} reader;

typedef struct world {
    reader in;
    pkv__pool pool;
    pkv__prefix prefix;
    uint32_t bs;
    uint8_t alpha;
    seq seqs[MAX_SEQS];
    prompt ring[RING]; /* recent prompts and freed sequences, for hits */
    uint32_t ring_n;
    uint32_t ring_next;
    int32_t content[MAX_POOL * MAX_BS];
    pkv__block before[MAX_POOL];
    uint32_t holders[MAX_POOL];
    uint32_t stamp[MAX_POOL];
    uint8_t seen[MAX_POOL];
    pkv__chain_link links[MAX_TOK];
    uint32_t hit_blocks[MAX_TOK];
    prompt scratch;
} world;

static world W;

static uint8_t next_byte(reader *r)
{
    return r->pos < r->size ? r->data[r->pos++] : 0;
}

static uint32_t xorshift32(uint32_t *s)
{
    uint32_t x = *s;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    *s = x;
    return x;
}

/* Fill sym[0..n) for positions start.. of a sequence, from one or two
 * input bytes: a constant, a seeded stream, or a past prompt's tokens. */
static void gen_syms(world *w, uint8_t *sym, uint32_t start, uint32_t n)
{
    uint8_t mode = next_byte(&w->in);
    uint8_t alpha = w->alpha;
    if (mode % 4 == 2 && w->ring_n > 0) {
        const prompt *p = &w->ring[(uint32_t)(mode >> 2) % w->ring_n];
        for (uint32_t i = 0; i < n; i++) {
            uint32_t at = start + i;
            sym[i] = (uint8_t)(at < p->n ? p->sym[at] : at % alpha);
        }
    } else if (mode % 4 == 0) {
        for (uint32_t i = 0; i < n; i++)
            sym[i] = (uint8_t)((mode >> 2) % alpha);
    } else {
        uint32_t s = 0x9e3779b9u * ((uint32_t)next_byte(&w->in) + 1u);
        for (uint32_t i = 0; i < n; i++)
            sym[i] = (uint8_t)((xorshift32(&s) >> 16) % alpha);
    }
}

static void set_histories(const uint8_t *sym, int32_t *tok, int32_t *nodes,
                          uint32_t from, uint32_t to, uint8_t salt)
{
    for (uint32_t p = from; p < to; p++) {
        tok[p] = alphabet[sym[p]];
        nodes[p] = trie_child(p ? nodes[p - 1] : (int32_t)salt, sym[p]);
    }
}

/* A prompt: often a prefix of a past one (same salt, mostly) plus new
 * tokens, so that lookups hit. */
static void build_prompt(world *w, prompt *out)
{
    uint8_t how = next_byte(&w->in);
    uint8_t len = next_byte(&w->in);
    uint32_t n = 0;
    out->salt = (uint8_t)(how % NUM_SALTS);
    if ((how >> 2) % 4 != 0 && w->ring_n > 0) {
        const prompt *p = &w->ring[(uint32_t)(how >> 4) % w->ring_n];
        if ((how >> 2) % 4 != 3)
            out->salt = p->salt;
        n = (uint32_t)((uint64_t)p->n * len / 255u);
        memcpy(out->sym, p->sym, n);
        len = next_byte(&w->in);
    }
    uint32_t extra = 1u + (uint32_t)(len % (3u * w->bs));
    if (n + extra > MAX_TOK)
        extra = MAX_TOK - n;
    gen_syms(w, out->sym + n, n, extra);
    out->n = n + extra;
    set_histories(out->sym, out->tok, out->node, 0, out->n, out->salt);
}

static void ring_push(world *w, const uint8_t *sym, uint32_t n, uint8_t salt)
{
    if (n == 0)
        return;
    prompt *p = &w->ring[w->ring_next];
    w->ring_next = (w->ring_next + 1) % RING;
    if (w->ring_n < RING)
        w->ring_n++;
    p->n = n;
    p->salt = salt;
    memcpy(p->sym, sym, n);
}

/* ------------------------------------------------------------- invariants */

static int same_block(const pkv__block *a, const pkv__block *b)
{
    return a->ref_count == b->ref_count && a->prev == b->prev &&
           a->next == b->next && a->fill == b->fill &&
           a->generation == b->generation && a->state == b->state &&
           a->cached == b->cached;
}

static void save_blocks(world *w)
{
    memcpy(w->before, w->pool.blocks, w->pool.num_blocks * sizeof *w->before);
}

static void check_blocks_unchanged(const world *w)
{
    for (uint32_t b = 0; b < w->pool.num_blocks; b++)
        CHECK(same_block(&w->before[b], &w->pool.blocks[b]));
}

/* Walk one queue: the expected state of its members, consistent links,
 * and the length. */
static uint32_t walk_queue(world *w, const pkv__queue *q, uint8_t state,
                           uint8_t cached)
{
    const pkv__pool *pool = &w->pool;
    uint32_t count = 0;
    uint32_t prev = PKV__NO_BLOCK;
    for (uint32_t b = q->head; b != PKV__NO_BLOCK; b = pool->blocks[b].next) {
        CHECK(b > PKV__NULL_BLOCK && b < pool->num_blocks);
        CHECK(!w->seen[b]);
        w->seen[b] = 1;
        const pkv__block *blk = &pool->blocks[b];
        CHECK(blk->prev == prev);
        CHECK(blk->state == state);
        CHECK(blk->ref_count == 0);
        CHECK(blk->cached == cached);
        prev = b;
        count++;
    }
    CHECK(q->tail == prev);
    return count;
}

static void check_pool(world *w)
{
    const pkv__pool *pool = &w->pool;
    uint32_t nb = pool->num_blocks;
    CHECK(pool->num_free + pool->num_cached_free + pool->num_used == nb);
    const pkv__block *null_blk = &pool->blocks[PKV__NULL_BLOCK];
    CHECK(null_blk->state == PKV__BLOCK_RESERVED && null_blk->ref_count == 0 &&
          !null_blk->cached && null_blk->fill == 0 &&
          null_blk->generation == 0);
    memset(w->seen, 0, sizeof w->seen);
    CHECK(walk_queue(w, &pool->free_queue, PKV__BLOCK_FREE, 0) ==
          pool->num_free);
    CHECK(walk_queue(w, &pool->lru_queue, PKV__BLOCK_CACHED_FREE, 1) ==
          pool->num_cached_free);

    uint32_t used = 1;
    uint64_t stored = 0;
    for (uint32_t b = 1; b < nb; b++) {
        const pkv__block *blk = &pool->blocks[b];
        CHECK(blk->ref_count == w->holders[b]);
        if (blk->state == PKV__BLOCK_USED) {
            CHECK(!w->seen[b] && blk->ref_count > 0);
            CHECK(blk->fill <= w->bs);
            used++;
            stored += blk->fill;
        } else {
            CHECK(blk->state == PKV__BLOCK_FREE ||
                  blk->state == PKV__BLOCK_CACHED_FREE);
            CHECK(w->seen[b]); /* so in the queue of its state */
        }
    }
    CHECK(used == pool->num_used);
    CHECK(stored == pool->tokens_stored);
}

/* Every cached block is in its bucket and nothing else is; its stored
 * tokens and its KV agree; it follows its recorded parent while the parent
 * is unchanged (same generation). */
static void check_index(world *w)
{
    const pkv__pool *pool = &w->pool;
    const pkv__prefix *px = &w->prefix;
    uint32_t bs = w->bs;
    uint32_t cached = 0;
    for (uint32_t b = 1; b < pool->num_blocks; b++) {
        const pkv__block *blk = &pool->blocks[b];
        if (!blk->cached)
            continue;
        cached++;
        const pkv__prefix_entry *e = &px->entries[b];
        CHECK(blk->state == PKV__BLOCK_USED ||
              blk->state == PKV__BLOCK_CACHED_FREE);
        CHECK(blk->fill == bs);
        CHECK((e->hash & px->hash_mask) == e->hash);
        uint32_t steps = 0;
        uint32_t at = px->buckets[e->hash & px->bucket_mask];
        while (at != b) {
            CHECK(at != PKV__NO_BLOCK && steps++ < pool->num_blocks);
            at = px->entries[at].bucket_next;
        }
        for (uint32_t k = 0; k < bs; k++) {
            int32_t c = w->content[b * bs + k];
            CHECK(c >= 0);
            CHECK(alphabet[trie[c].sym] == px->tokens[(size_t)b * bs + k]);
            CHECK(salts[trie[c].salt] == e->salt);
            CHECK((trie[c].depth - 1) % bs == k);
            if (k > 0)
                CHECK(trie[c].parent == w->content[b * bs + k - 1]);
        }
        int32_t first = w->content[b * bs];
        if (e->parent == PKV__NULL_BLOCK) {
            CHECK(trie[first].depth == 1);
        } else if (pool->blocks[e->parent].generation ==
                   e->parent_generation) {
            CHECK(trie[first].parent ==
                  w->content[e->parent * bs + bs - 1]);
        }
    }
    uint32_t in_buckets = 0;
    for (uint32_t i = 0; i <= px->bucket_mask; i++) {
        for (uint32_t at = px->buckets[i]; at != PKV__NO_BLOCK;
             at = px->entries[at].bucket_next) {
            CHECK(at > PKV__NULL_BLOCK && at < pool->num_blocks);
            CHECK(pool->blocks[at].cached);
            CHECK((px->entries[at].hash & px->bucket_mask) == i);
            CHECK(in_buckets++ < pool->num_blocks);
        }
    }
    CHECK(in_buckets == cached);
}

static void check_seq(world *w, const seq *s, uint32_t id)
{
    const pkv__pool *pool = &w->pool;
    const pkv__table *t = &s->table;
    uint32_t bs = w->bs;
    CHECK(t->num_tokens <= MAX_TOK);
    /* Never more than one partly filled block. */
    CHECK(t->num_blocks == (t->num_tokens + bs - 1) / bs);
    CHECK(t->num_blocks <= t->capacity);
    for (uint32_t i = 0; i < t->num_blocks; i++) {
        uint32_t b = t->blocks[i];
        CHECK(b > PKV__NULL_BLOCK && b < pool->num_blocks);
        CHECK(w->stamp[b] != id); /* a block appears once per table */
        w->stamp[b] = id;
        w->holders[b]++;
        uint32_t mine = t->num_tokens - i * bs;
        CHECK(pool->blocks[b].fill >= (mine < bs ? mine : bs));
    }
    for (uint32_t p = 0; p < t->num_tokens; p++) {
        CHECK(pkv__table_slot(t, pool, p) ==
              (uint64_t)t->blocks[p / bs] * bs + p % bs);
        CHECK(w->content[t->blocks[p / bs] * bs + p % bs] == s->node[p]);
    }
    /* The chain: its hashes are this sequence's, and every link whose block
     * is unchanged since it was linked holds this sequence's KV. */
    const pkv__prefix_chain *c = &s->chain;
    CHECK(c->num_links <= t->num_tokens / bs);
    CHECK(c->num_links <= c->capacity);
    uint64_t h = 0;
    for (uint32_t j = 0; j < c->num_links; j++) {
        const pkv__chain_link *l = &c->links[j];
        h = pkv__prefix_hash(h, s->tok + (size_t)j * bs, bs, salts[s->salt]);
        CHECK(l->hash == h);
        CHECK(l->block > PKV__NULL_BLOCK && l->block < pool->num_blocks);
        if (pool->blocks[l->block].generation == l->generation)
            for (uint32_t k = 0; k < bs; k++)
                CHECK(w->content[l->block * bs + k] == s->node[j * bs + k]);
    }
}

static void check_all(world *w)
{
    memset(w->holders, 0, sizeof w->holders);
    memset(w->stamp, 0, sizeof w->stamp);
    for (uint32_t i = 0; i < MAX_SEQS; i++) {
        const seq *s = &w->seqs[i];
        if (s->live) {
            check_seq(w, s, i + 1);
        } else {
            CHECK(s->table.num_blocks == 0 && s->table.num_tokens == 0);
            CHECK(s->chain.num_links == 0);
        }
    }
    check_pool(w);
    check_index(w);
}

/* A lookup result against the model: every hit holds the prompt's tokens
 * and exactly the prompt's KV, follows the previous hit, and the run stops
 * only where no cached block could continue it. */
static void check_lookup(world *w, const prompt *p,
                         const pkv__chain_link *links, uint32_t n_hit)
{
    const pkv__pool *pool = &w->pool;
    const pkv__prefix *px = &w->prefix;
    uint32_t bs = w->bs;
    uint64_t salt = salts[p->salt];
    uint32_t n_max = p->n ? (p->n - 1) / bs : 0;
    CHECK(n_hit <= n_max);
    uint64_t h = 0;
    uint32_t parent = PKV__NULL_BLOCK;
    uint32_t parent_gen = pool->blocks[PKV__NULL_BLOCK].generation;
    for (uint32_t j = 0; j <= n_hit && j < n_max; j++) {
        const int32_t *tok = p->tok + (size_t)j * bs;
        uint64_t hj = pkv__prefix_hash(h, tok, bs, salt);
        if (j == n_hit) {
            /* No cached block may continue the run. */
            for (uint32_t b = 1; b < pool->num_blocks; b++) {
                const pkv__prefix_entry *e = &px->entries[b];
                CHECK(!(pool->blocks[b].cached &&
                        e->hash == (hj & px->hash_mask) && e->salt == salt &&
                        e->parent == parent &&
                        e->parent_generation == parent_gen &&
                        memcmp(px->tokens + (size_t)b * bs, tok,
                               bs * sizeof *tok) == 0));
            }
            break;
        }
        const pkv__chain_link *l = &links[j];
        uint32_t b = l->block;
        CHECK(b > PKV__NULL_BLOCK && b < pool->num_blocks);
        CHECK(pool->blocks[b].cached);
        CHECK(l->generation == pool->blocks[b].generation);
        CHECK(l->hash == hj);
        const pkv__prefix_entry *e = &px->entries[b];
        CHECK(e->salt == salt && e->parent == parent &&
              e->parent_generation == parent_gen);
        for (uint32_t k = 0; k < bs; k++) {
            CHECK(px->tokens[(size_t)b * bs + k] == tok[k]);
            /* The check that matters: the KV is this prompt's. */
            CHECK(w->content[b * bs + k] == p->node[j * bs + k]);
        }
        h = hj;
        parent = b;
        parent_gen = l->generation;
    }
}

/* ------------------------------------------------------------- operations */

static void seq_free(world *w, seq *s)
{
    ring_push(w, s->sym, s->table.num_tokens, s->salt);
    pkv__table_release(&s->table, &w->pool);
    pkv__prefix_chain_release(&s->chain, &w->pool);
    CHECK(s->table.blocks == NULL && s->table.capacity == 0);
    s->live = 0;
}

/* Append n tokens to s, checking the copy-on-write report and the block
 * accounting, write their KV into the model, and register full blocks. */
static pkv_status seq_append(world *w, seq *s, const uint8_t *sym, uint32_t n)
{
    pkv__pool *pool = &w->pool;
    pkv__table *t = &s->table;
    uint32_t bs = w->bs;
    if (n > MAX_TOK - t->num_tokens)
        n = MAX_TOK - t->num_tokens;
    uint32_t old_tokens = t->num_tokens;
    uint32_t old_nb = t->num_blocks;
    uint32_t last = old_nb ? t->blocks[old_nb - 1] : PKV__NULL_BLOCK;
    int partial = old_tokens % bs != 0;
    save_blocks(w);
    uint32_t needed = pkv__table_blocks_needed(t, pool, n, NULL, NULL);
    uint32_t avail = pkv__pool_available(pool);
    uint32_t num_used = pool->num_used;
    uint64_t stored = pool->tokens_stored;
    pkv__block_copy copy = {99, 99};
    pkv_status st = pkv__table_append(t, pool, n, &copy);
    CHECK(copy.src == PKV__NULL_BLOCK || copy.dst != PKV__NULL_BLOCK);
    if (st == PKV_ERR_NO_BLOCKS) {
        /* A pure check: nothing changed. */
        CHECK(needed > avail);
        CHECK(copy.dst == PKV__NULL_BLOCK);
        CHECK(t->num_tokens == old_tokens && t->num_blocks == old_nb);
        CHECK(pkv__pool_available(pool) == avail);
        CHECK(pool->num_used == num_used && pool->tokens_stored == stored);
        check_blocks_unchanged(w);
        return st;
    }
    CHECK(st == PKV_OK);
    CHECK(needed <= avail);
    /* A copied block that only the prefix cache holds now becomes
     * available again (cached-free). */
    const pkv__block *before = w->before;
    uint32_t returned = copy.dst != PKV__NULL_BLOCK &&
                        before[last].ref_count == 1;
    CHECK(avail - pkv__pool_available(pool) == needed - returned);
    CHECK(t->num_tokens == old_tokens + n);
    if (copy.dst != PKV__NULL_BLOCK) {
        /* src was shared or cached, dst is fresh and now ours alone. */
        CHECK(partial && copy.src == last);
        CHECK(before[last].ref_count >= 2 || before[last].cached);
        CHECK(pool->blocks[last].ref_count == before[last].ref_count - 1);
        CHECK(before[copy.dst].state == PKV__BLOCK_FREE ||
              before[copy.dst].state == PKV__BLOCK_CACHED_FREE);
        CHECK(t->blocks[old_nb - 1] == copy.dst);
        CHECK(pool->blocks[copy.dst].ref_count == 1);
        CHECK(!pool->blocks[copy.dst].cached);
        memcpy(&w->content[copy.dst * bs], &w->content[last * bs],
               bs * sizeof *w->content);
    } else if (old_nb > 0) {
        CHECK(t->blocks[old_nb - 1] == last);
        if (partial) {
            /* Written in place: private, and not in the prefix cache. */
            CHECK(before[last].ref_count == 1 && !before[last].cached);
        }
    }
    for (uint32_t i = old_nb; i < t->num_blocks; i++) {
        uint32_t b = t->blocks[i];
        CHECK(before[b].state == PKV__BLOCK_FREE ||
              before[b].state == PKV__BLOCK_CACHED_FREE);
        CHECK(pool->blocks[b].ref_count == 1 && !pool->blocks[b].cached);
        for (uint32_t k = 0; k < bs; k++)
            w->content[b * bs + k] = GARBAGE;
    }
    memcpy(s->sym + old_tokens, sym, n);
    set_histories(s->sym, s->tok, s->node, old_tokens, old_tokens + n,
                  s->salt);
    for (uint32_t p = old_tokens; p < old_tokens + n; p++)
        w->content[pkv__table_slot(t, pool, p)] = s->node[p];

    uint32_t links_before = s->chain.num_links;
    st = pkv__prefix_register(&w->prefix, &s->chain, t, s->tok,
                              salts[s->salt]);
    CHECK(st == PKV_OK);
    CHECK(s->chain.num_links >= links_before);
    return PKV_OK;
}

static seq *pick(world *w, uint8_t byte, int live)
{
    for (uint32_t i = 0; i < MAX_SEQS; i++) {
        seq *s = &w->seqs[(byte + i) % MAX_SEQS];
        if (s->live == live)
            return s;
    }
    return NULL;
}

static void op_lookup(world *w)
{
    prompt *p = &w->scratch;
    build_prompt(w, p);
    uint32_t n_hit = 99;
    save_blocks(w);
    pkv__prefix_lookup(&w->prefix, p->tok, p->n, salts[p->salt], NULL, 0,
                       w->links, &n_hit);
    check_blocks_unchanged(w); /* pure */
    check_lookup(w, p, w->links, n_hit);
}

static void op_add(world *w, seq *s)
{
    pkv__pool *pool = &w->pool;
    prompt *p = &w->scratch;
    build_prompt(w, p);
    ring_push(w, p->sym, p->n, p->salt);
    uint32_t n_hit = 99;
    /* As the engine admits: with the prompt's hashes computed beforehand. */
    uint64_t hashes[MAX_TOK];
    uint32_t bs = w->pool.block_size, full = p->n ? (p->n - 1) / bs : 0;
    pkv__prefix_hashes(p->tok, full, bs, salts[p->salt], hashes);
    pkv__prefix_lookup(&w->prefix, p->tok, p->n, salts[p->salt], hashes, full,
                       w->links, &n_hit);
    check_lookup(w, p, w->links, n_hit);
    for (uint32_t j = 0; j < n_hit; j++)
        w->hit_blocks[j] = w->links[j].block;
    save_blocks(w);
    CHECK(pkv__table_adopt(&s->table, pool, w->hit_blocks, n_hit) == PKV_OK);
    for (uint32_t j = 0; j < n_hit; j++) {
        uint32_t b = w->hit_blocks[j];
        CHECK(pool->blocks[b].ref_count == w->before[b].ref_count + 1);
        CHECK(pool->blocks[b].state == PKV__BLOCK_USED);
        CHECK(pool->blocks[b].generation == w->before[b].generation);
    }
    CHECK(pkv__prefix_chain_adopt(&s->chain, pool, w->links, n_hit) ==
          PKV_OK);
    s->live = 1;
    s->salt = p->salt;
    uint32_t have = n_hit * w->bs;
    CHECK(s->table.num_tokens == have);
    memcpy(s->sym, p->sym, have);
    memcpy(s->tok, p->tok, have * sizeof *s->tok);
    memcpy(s->node, p->node, have * sizeof *s->node);
    /* Out of blocks, a scheduler would not admit it. */
    if (seq_append(w, s, p->sym + have, p->n - have) != PKV_OK)
        seq_free(w, s);
}

static void op_append(world *w, seq *s)
{
    uint8_t len = next_byte(&w->in);
    uint32_t n = len & 0x80 ? 1u + (len & 0x7fu) : 1u + len % (2u * w->bs);
    uint32_t start = s->table.num_tokens;
    if (n > MAX_TOK - start)
        n = MAX_TOK - start;
    uint8_t *sym = w->scratch.sym;
    gen_syms(w, sym, start, n);
    seq_append(w, s, sym, n);
}

static void op_fork(world *w, const seq *src, seq *dst)
{
    pkv__pool *pool = &w->pool;
    uint8_t how = next_byte(&w->in);
    save_blocks(w);
    CHECK(pkv__table_fork(&dst->table, &src->table, pool) == PKV_OK);
    for (uint32_t i = 0; i < src->table.num_blocks; i++) {
        uint32_t b = src->table.blocks[i];
        CHECK(dst->table.blocks[i] == b);
        CHECK(pool->blocks[b].ref_count == w->before[b].ref_count + 1);
    }
    if (how & 1)
        CHECK(pkv__prefix_chain_adopt(&dst->chain, pool, src->chain.links,
                                      src->chain.num_links) == PKV_OK);
    dst->live = 1;
    dst->salt = src->salt;
    uint32_t n = src->table.num_tokens;
    memcpy(dst->sym, src->sym, n);
    memcpy(dst->tok, src->tok, n * sizeof *dst->tok);
    memcpy(dst->node, src->node, n * sizeof *dst->node);
}

static void op_truncate(world *w, seq *s)
{
    pkv__pool *pool = &w->pool;
    pkv__table *t = &s->table;
    uint32_t old = t->num_tokens;
    uint32_t n = (uint32_t)((uint64_t)old * next_byte(&w->in) / 255u);
    uint32_t last = n < old && n % w->bs != 0 ? t->blocks[n / w->bs]
                                              : PKV__NULL_BLOCK;
    pkv__block was = pool->blocks[last];
    pkv__table_truncate(t, pool, n);
    pkv__prefix_chain_truncate(&s->chain, n / w->bs);
    CHECK(t->num_tokens == n);
    /* A cut inside a block changes it only if it is ours alone and not
     * cached (it will be written in place); else the next append copies
     * it and it stays as it was. */
    if (last != PKV__NULL_BLOCK) {
        const pkv__block *now = &pool->blocks[last];
        CHECK(now->cached == was.cached);
        if (was.ref_count == 1 && !was.cached)
            CHECK(now->fill == n % w->bs);
        else
            CHECK(now->fill == was.fill);
    }
}

static void run(world *w)
{
    for (;;) {
        if (w->in.pos >= w->in.size)
            return;
        uint8_t op = next_byte(&w->in);
        uint8_t which = next_byte(&w->in);
        seq *s = pick(w, which, 1);
        seq *slot = pick(w, which, 0);
        switch (op % 16) {
        case 4: case 5: case 6: case 7: case 8:
            if (s != NULL) {
                op_append(w, s);
                break;
            }
            /* fallthrough */
        case 0: case 1: case 2: case 3:
            if (slot != NULL)
                op_add(w, slot);
            else
                seq_free(w, s);
            break;
        case 9: case 10:
            if (s != NULL && slot != NULL)
                op_fork(w, s, slot);
            else
                op_lookup(w);
            break;
        case 11: case 12:
            if (s != NULL)
                op_truncate(w, s);
            else
                op_lookup(w);
            break;
        case 13: case 14:
            if (s != NULL)
                seq_free(w, s);
            else
                op_lookup(w);
            break;
        default:
            op_lookup(w);
            break;
        }
        pkv_fuzz_ops++;
        check_all(w);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    world *w = &W;
    if (size < 3)
        return 0;
    w->in.data = data;
    w->in.size = size;
    w->in.pos = 0;
    uint32_t num_blocks = 2u + next_byte(&w->in) % (MAX_POOL - 1u);
    w->bs = 1u << (next_byte(&w->in) % 5u);
    uint8_t mode = next_byte(&w->in);
    w->alpha = (uint8_t)(1u + mode % ALPHABET);

    pkv_allocator defaults = {NULL, NULL, NULL};
    pkv__allocator a;
    CHECK(pkv__allocator_resolve(&defaults, &a) == PKV_OK);
    CHECK(pkv__pool_init(&w->pool, &a, num_blocks, w->bs) == PKV_OK);
    CHECK(pkv__prefix_init(&w->prefix, &w->pool) == PKV_OK);
    /* Force hash collisions: every block in one bucket, or in four. */
    if ((mode >> 2) % 4 == 2)
        w->prefix.hash_mask = 0;
    else if ((mode >> 2) % 4 == 3)
        w->prefix.hash_mask = 3;
    trie_reset();
    for (uint32_t i = 0; i < MAX_SEQS; i++) {
        seq *s = &w->seqs[i];
        s->live = 0;
        pkv__table_init(&s->table);
        pkv__prefix_chain_init(&s->chain);
    }
    w->ring_n = 0;
    w->ring_next = 0;
    for (uint32_t i = 0; i < MAX_POOL * MAX_BS; i++)
        w->content[i] = GARBAGE;
    check_all(w);

    run(w);

    for (uint32_t i = 0; i < MAX_SEQS; i++)
        if (w->seqs[i].live)
            seq_free(w, &w->seqs[i]);
    check_all(w);
    CHECK(w->pool.num_used == 1 && w->pool.tokens_stored == 0);
    pkv__prefix_release(&w->prefix);
    pkv__pool_release(&w->pool);
    return 0;
}
