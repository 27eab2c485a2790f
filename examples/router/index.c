/* SPDX-License-Identifier: MIT */
/* The router's block index (index.h). */
#include "index.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

struct rt_node {
    rt_hash hash, parent;
    rt_node *next_hash, *next_link; /* in each table's chain */
    int32_t tokens[];               /* the table's block_size */
};

#define FNV_PRIME 0x100000001b3ull

static uint64_t mix(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * FNV_PRIME;
    return h;
}

static uint64_t hash_of(uint64_t seed, const rt_hash *h)
{
    return mix(mix(seed, &h->kind, 1), h->bytes, h->len);
}

static uint64_t link_of(uint64_t seed, const rt_hash *parent,
                        const int32_t *tokens, uint32_t block_size)
{
    return mix(hash_of(seed, parent), tokens,
               (size_t)block_size * sizeof *tokens);
}

static int same_hash(const rt_hash *a, const rt_hash *b)
{
    return a->kind == b->kind && a->len == b->len &&
           memcmp(a->bytes, b->bytes, a->len) == 0;
}

int rt_index_init(rt_index *x, uint32_t num_backends, size_t max_blocks)
{
    memset(x, 0, sizeof *x);
    x->tables = calloc(num_backends, sizeof *x->tables);
    if (x->tables == NULL || pthread_mutex_init(&x->lock, NULL) != 0) {
        free(x->tables);
        return -1;
    }
    x->num_backends = num_backends;
    x->max_blocks = max_blocks;
    /* A seed per run: the events' bytes come from the network. */
    x->seed = mix(0xcbf29ce484222325ull, &x, sizeof x) ^
              (uint64_t)time(NULL) * FNV_PRIME;
    return 0;
}

static void table_clear(rt_table *t)
{
    for (size_t s = 0; s < t->num_slots; s++) {
        rt_node *n = t->by_hash[s];
        while (n != NULL) {
            rt_node *next = n->next_hash;
            free(n);
            n = next;
        }
    }
    free(t->by_hash);
    free(t->by_link);
    memset(t, 0, sizeof *t);
}

void rt_index_free(rt_index *x)
{
    for (uint32_t b = 0; b < x->num_backends; b++)
        table_clear(&x->tables[b]);
    free(x->tables);
    pthread_mutex_destroy(&x->lock);
    memset(x, 0, sizeof *x);
}

/* Twice the slots (at least 1024), the nodes rechained. -1 out of memory,
 * the table unchanged. */
static int grow(rt_table *t, uint64_t seed)
{
    size_t slots = t->num_slots ? t->num_slots * 2 : 1024;
    rt_node **by_hash = calloc(slots, sizeof *by_hash);
    rt_node **by_link = calloc(slots, sizeof *by_link);
    if (by_hash == NULL || by_link == NULL) {
        free(by_hash);
        free(by_link);
        return -1;
    }
    for (size_t s = 0; s < t->num_slots; s++) {
        rt_node *n = t->by_hash[s];
        while (n != NULL) {
            rt_node *next = n->next_hash;
            size_t h = hash_of(seed, &n->hash) & (slots - 1);
            size_t l = link_of(seed, &n->parent, n->tokens, t->block_size) &
                       (slots - 1);
            n->next_hash = by_hash[h];
            by_hash[h] = n;
            n->next_link = by_link[l];
            by_link[l] = n;
            n = next;
        }
    }
    free(t->by_hash);
    free(t->by_link);
    t->by_hash = by_hash;
    t->by_link = by_link;
    t->num_slots = slots;
    return 0;
}

/* Unchain and free the node of hash h, if kept. */
static void drop(rt_table *t, uint64_t seed, const rt_hash *h)
{
    if (t->num_slots == 0)
        return;
    rt_node **p = &t->by_hash[hash_of(seed, h) & (t->num_slots - 1)];
    while (*p != NULL && !same_hash(&(*p)->hash, h))
        p = &(*p)->next_hash;
    rt_node *n = *p;
    if (n == NULL)
        return;
    *p = n->next_hash;
    rt_node **q = &t->by_link[link_of(seed, &n->parent, n->tokens,
                                      t->block_size) &
                              (t->num_slots - 1)];
    while (*q != n)
        q = &(*q)->next_link;
    *q = n->next_link;
    free(n);
    t->count--;
}

static int insert(rt_table *t, uint64_t seed, const rt_hash *parent,
                  const rt_hash *hash, const int32_t *tokens)
{
    drop(t, seed, hash);
    if (t->count >= t->num_slots && grow(t, seed) != 0)
        return -1;
    size_t bytes = (size_t)t->block_size * sizeof *tokens;
    rt_node *n = malloc(sizeof *n + bytes);
    if (n == NULL)
        return -1;
    n->hash = *hash;
    n->parent = *parent;
    memcpy(n->tokens, tokens, bytes);
    size_t h = hash_of(seed, hash) & (t->num_slots - 1);
    size_t l = link_of(seed, parent, tokens, t->block_size) &
               (t->num_slots - 1);
    n->next_hash = t->by_hash[h];
    t->by_hash[h] = n;
    n->next_link = t->by_link[l];
    t->by_link[l] = n;
    t->count++;
    return 0;
}

int rt_index_store(rt_index *x, uint32_t b, const rt_hash *parent,
                   const rt_hash *hashes, uint32_t n, const int32_t *tokens,
                   uint32_t block_size)
{
    int rc = 0;
    pthread_mutex_lock(&x->lock);
    rt_table *t = &x->tables[b];
    if (t->count == 0)
        t->block_size = block_size;
    if (block_size == 0 || block_size != t->block_size) {
        rc = -1;
    } else {
        for (uint32_t i = 0; i < n && t->count < x->max_blocks; i++) {
            if ((rc = insert(t, x->seed, i ? &hashes[i - 1] : parent,
                             &hashes[i],
                             tokens + (size_t)i * block_size)) != 0)
                break;
        }
    }
    pthread_mutex_unlock(&x->lock);
    return rc;
}

void rt_index_remove(rt_index *x, uint32_t b, const rt_hash *h)
{
    pthread_mutex_lock(&x->lock);
    drop(&x->tables[b], x->seed, h);
    pthread_mutex_unlock(&x->lock);
}

void rt_index_clear(rt_index *x, uint32_t b)
{
    pthread_mutex_lock(&x->lock);
    table_clear(&x->tables[b]);
    pthread_mutex_unlock(&x->lock);
}

size_t rt_index_count(rt_index *x, uint32_t b)
{
    pthread_mutex_lock(&x->lock);
    size_t n = x->tables[b].count;
    pthread_mutex_unlock(&x->lock);
    return n;
}

/* The node whose link is (parent, tokens), or NULL. */
static const rt_node *child(const rt_table *t, uint64_t seed,
                            const rt_hash *parent, const int32_t *tokens)
{
    size_t bytes = (size_t)t->block_size * sizeof *tokens;
    const rt_node *n =
        t->by_link[link_of(seed, parent, tokens, t->block_size) &
                   (t->num_slots - 1)];
    while (n != NULL && !(same_hash(&n->parent, parent) &&
                          memcmp(n->tokens, tokens, bytes) == 0))
        n = n->next_link;
    return n;
}

uint32_t rt_index_match(rt_index *x, uint32_t b, const int32_t *tokens,
                        uint32_t n)
{
    pthread_mutex_lock(&x->lock);
    const rt_table *t = &x->tables[b];
    uint32_t matched = 0;
    if (t->count > 0) {
        rt_hash root = {RT_HASH_NONE, 0, {0}};
        const rt_hash *parent = &root;
        while (n - matched >= t->block_size) {
            const rt_node *c = child(t, x->seed, parent, tokens + matched);
            if (c == NULL)
                break;
            parent = &c->hash;
            matched += t->block_size;
        }
    }
    pthread_mutex_unlock(&x->lock);
    return matched;
}
