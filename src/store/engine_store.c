/* SPDX-License-Identifier: MIT */
/* The engine's side of a KV store (engine_store.h). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include "store/engine_store.h"
#include "store/store_params.h"

#include "check.h"
#include "engine.h"
#include "kv/prefix_groups.h"
#include "seal.h"
#include "store/value.h"
#include "struct_sizes.h"
#include "wire.h"

#include <openssl/evp.h>
#include <string.h>
#include <time.h>

#define SAVE_TIMEOUT_FACTOR 10u
#define POLL_BATCH 32u

static uint64_t now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

pkv_status pkv__store_init(pkv__engine_store **out,
                           const pkv__store_env *env, const pkv_store *store)
{
    pkv__engine_store *s = pkv__calloc(&env->alloc, 1, sizeof *s);
    if (s == NULL)
        return PKV_ERR_OUT_OF_MEMORY;
    *out = s;
    s->env = *env;
    if (store == NULL)
        return PKV_OK;
    s->sent = pkv__calloc(&env->alloc, pkv__kv_num_blocks(env->kv),
                          sizeof *s->sent);
    if (s->sent == NULL)
        return PKV_ERR_OUT_OF_MEMORY;
    /* The model's name is not kept: its digest is what keys use. The
     * fingerprint: the first 8 bytes of the root digest of salt 0 (with a
     * seal, of its name), so one model's keys can be listed. Before cb is
     * set: a store whose cb.load is set is detached at release. */
    uint8_t root[PKV__DIGEST_BYTES];
    pkv_status st = pkv__digest_fetch(&s->sha256);
    if (st == PKV_OK)
        st = pkv__digest_model(s->sha256, store->model, s->model);
    if (st == PKV_OK)
        st = pkv__digest_root(s->sha256, s->model, env->config,
                               &env->kv->groups, 0, root);
    if (st == PKV_OK && env->seal != NULL)
        st = pkv__seal_name(env->seal, root, sizeof root, root);
    if (st != PKV_OK)
        return st;
    pkv__digest_hex(root, 8, s->fingerprint);
    if (env->seal != NULL) {
        s->outside_lock = pkv__calloc(&env->alloc, 1, sizeof *s->outside_lock);
        if (s->outside_lock == NULL)
            return PKV_ERR_OUT_OF_MEMORY;
        if (pkv__lock_init(s->outside_lock) != 0) {
            pkv__free(&env->alloc, s->outside_lock, 1,
                      sizeof *s->outside_lock);
            s->outside_lock = NULL;
            return PKV_ERR_OUT_OF_MEMORY;
        }
        st = pkv__seal_name_context(env->seal, &s->outside_namer);
        if (st != PKV_OK)
            return st;
    }
    pkv__store_read(&s->cb, store); /* checked at create: cannot fail */
    s->cb.model = NULL;
    s->inner_at = env->seal != NULL ? PKV__SEAL_HEADER_BYTES : 0;
    s->value_bytes = s->inner_at + pkv__value_bytes(env->config);
    s->next_ticket = 1;
    /* Last, so that nothing here fails after it: every store that reaches
     * this line is released through pkv__store_release, which detaches. */
    if (s->cb.attach != NULL)
        s->cb.attach(s->cb.user);
    return PKV_OK;
}

/* The key of a block whose digest, or with a seal whose name, is d. */
static void format_key(const pkv__engine_store *s,
                       const uint8_t d[PKV__DIGEST_BYTES], char *out)
{
    /* Sealed and unsealed values never share a key, so engines with and
     * without a key on one store miss each other's values instead of
     * counting them damaged. */
    memcpy(out, s->env.seal != NULL ? "pkvs:" : "pkv1:", 5);
    memcpy(out + 5, s->fingerprint, 16);
    out[21] = ':';
    pkv__digest_hex(d, PKV__DIGEST_BYTES, out + 22);
}

pkv_status pkv__store_key(const pkv__engine_store *s,
                          const uint8_t digest[PKV__DIGEST_BYTES], char *out)
{
    uint8_t name[PKV__SEAL_NAME_BYTES];
    if (s->env.seal != NULL) {
        pkv_status st =
            pkv__seal_name(s->env.seal, digest, PKV__DIGEST_BYTES, name);
        if (st != PKV_OK)
            return st;
        digest = name;
    }
    format_key(s, digest, out);
    return PKV_OK;
}

pkv_status pkv__store_prompt_keys(const pkv__engine_store *s,
                                  const int32_t *tokens, uint32_t n,
                                  uint64_t salt, char *keys)
{
    uint32_t bs = pkv__kv_block_size(s->env.kv);
    uint8_t d[PKV__DIGEST_BYTES], name[PKV__SEAL_NAME_BYTES];
    pkv_status st = pkv__digest_root(s->sha256, s->model, s->env.config,
                                     &s->env.kv->groups, salt, d);
    for (uint32_t j = 0; st == PKV_OK && j < n; j++) {
        st = pkv__digest_block(s->sha256, d, tokens + (size_t)j * bs, bs, d);
        const uint8_t *named = d;
        if (st == PKV_OK && s->outside_namer != NULL) {
            pkv__lock_take(s->outside_lock);
            st = pkv__hmac_sha256(s->outside_namer, d, sizeof d, name);
            pkv__lock_give(s->outside_lock);
            named = name;
        }
        if (st == PKV_OK)
            format_key(s, named, keys + (size_t)j * PKV_STORE_KEY_MAX);
    }
    return st;
}

/* What a sealed value is bound to besides its bytes: the key it is
 * stored under, its place in its prompt, its parent's digest and its
 * own. So a value opens only where it was saved: not under another key,
 * not as another block, not after another parent (another prompt). */
enum { AD_MAX = PKV_STORE_KEY_MAX + 4 + 2 * PKV__DIGEST_BYTES };

static size_t value_ad(const char *key, uint32_t index,
                       const uint8_t digests[2 * PKV__DIGEST_BYTES],
                       uint8_t ad[AD_MAX])
{
    size_t n = strlen(key);
    memcpy(ad, key, n);
    pkv__put_u32(ad + n, index);
    memcpy(ad + n + 4, digests, 2 * PKV__DIGEST_BYTES);
    return n + 4 + 2 * PKV__DIGEST_BYTES;
}

/* ------------------------------------------------------------ operations */

/* Free what an op holds and give its bytes back to its budget. A load's
 * values buffer is kept for the next load when it is the largest yet:
 * a fresh one would cost the connector a page fault every 4 KiB while it
 * copies the values in (a tenth of a load's time at 1 MiB). */
static void free_op(pkv__engine_store *s, pkv__store_op *op)
{
    const pkv__allocator *a = &s->env.alloc;
    size_t n = op->seq != NULL ? op->num_keys : 1;
    if (op->seq != NULL && op->values != NULL &&
        op->values_bytes > s->spare_bytes) {
        pkv__free(a, s->spare, s->spare_bytes, 1);
        s->spare = op->values;
        s->spare_bytes = op->values_bytes;
    } else {
        pkv__free(a, op->values,
                  op->seq != NULL ? op->values_bytes : s->value_bytes, 1);
    }
    pkv__free(a, op->keys, n * PKV_STORE_KEY_MAX, 1);
    if (op->seq != NULL) {
        pkv__free(a, op->sizes, n, sizeof *op->sizes);
        s->load_bytes -= n * s->value_bytes;
    } else {
        s->save_bytes -= s->value_bytes;
    }
    memset(op, 0, sizeof *op);
}

/* Take ops[i] out of the list (order does not matter). */
static void remove_op(pkv__engine_store *s, uint32_t i)
{
    s->ops[i] = s->ops[--s->num_ops];
}

/* A sequence's load ends (landed, failed, timed out or cancelled). */
static void end_wait(pkv__engine_store *s, pkv__seq *seq, uint64_t started)
{
    seq->store.state = PKV__STORE_ASKED;
    s->num_loading--;
    s->env.totals->store_wait_us += now_us() - started;
}

void pkv__store_release(pkv__engine_store *s)
{
    if (s == NULL)
        return;
    const pkv__allocator a = s->env.alloc;
    for (uint32_t i = 0; i < s->num_ops; i++) {
        s->cb.cancel(s->cb.user, s->ops[i].ticket);
        free_op(s, &s->ops[i]);
    }
    for (uint32_t i = 0; i < s->num_pending; i++)
        free_op(s, &s->pending[i]);
    /* After the last cancel: the connector may be freed by it. cb.load is
     * set only once pkv__store_init got as far as attach. */
    if (s->cb.load != NULL && s->cb.detach != NULL)
        s->cb.detach(s->cb.user);
    pkv__free(&a, s->ops, s->ops_capacity, sizeof *s->ops);
    pkv__free(&a, s->pending, s->pending_capacity, sizeof *s->pending);
    pkv__free(&a, s->pending_blocks, s->pending_capacity,
              sizeof *s->pending_blocks);
    pkv__free(&a, s->scratch, s->scratch_capacity, 1);
    pkv__free(&a, s->spare, s->spare_bytes, 1);
    pkv__free(&a, s->links, s->links_capacity, sizeof *s->links);
    if (s->sent != NULL)
        pkv__free(&a, s->sent, pkv__kv_num_blocks(s->env.kv),
                  sizeof *s->sent);
    EVP_MD_free(s->sha256);
    EVP_MAC_CTX_free(s->outside_namer);
    if (s->outside_lock != NULL) {
        pkv__lock_destroy(s->outside_lock);
        pkv__free(&a, s->outside_lock, 1, sizeof *s->outside_lock);
    }
    pkv__free(&a, s, 1, sizeof *s);
}

/* Room for one more op in flight. */
static pkv_status reserve_op(pkv__engine_store *s)
{
    size_t capacity = s->ops_capacity;
    void *ops;
    pkv_status st = pkv__grow(&s->env.alloc, s->ops, &capacity, s->num_ops,
                              (size_t)s->num_ops + 1, sizeof *s->ops, &ops);
    s->ops = ops;
    s->ops_capacity = (uint32_t)capacity;
    return st;
}

/* Scratch of at least n bytes; NULL when memory runs out. */
static uint8_t *scratch(pkv__engine_store *s, size_t n)
{
    void *p;
    if (pkv__grow(&s->env.alloc, s->scratch, &s->scratch_capacity, 0, n, 1,
                  &p) != PKV_OK)
        return NULL;
    s->scratch = p;
    return s->scratch;
}

/* --------------------------------------------------------------- digests */

/* The digests of seq's root and first n blocks: digests[0] the root,
 * digests[j + 1] block j's. NULL when memory runs out (ours, or
 * libcrypto's: those computed are kept). */
static const uint8_t *digests(pkv__engine_store *s, pkv__seq *seq,
                              uint32_t n)
{
    uint32_t have = seq->store.num_digests;
    if (n + 1 <= have)
        return seq->store.digests;
    size_t capacity = seq->store.digests_capacity;
    void *grown;
    if (pkv__grow(&s->env.alloc, seq->store.digests, &capacity,
                  (size_t)have * PKV__DIGEST_BYTES,
                  ((size_t)n + 1) * PKV__DIGEST_BYTES, 1, &grown) != PKV_OK)
        return NULL;
    seq->store.digests = grown;
    seq->store.digests_capacity = (uint32_t)capacity;
    uint8_t *d = seq->store.digests;
    uint32_t bs = pkv__kv_block_size(s->env.kv);
    if (have == 0) {
        if (pkv__digest_root(s->sha256, s->model, s->env.config,
                             &s->env.kv->groups, pkv__kv_salt(&seq->kv),
                             d) != PKV_OK)
            return NULL;
        seq->store.num_digests = have = 1;
    }
    for (uint32_t j = have - 1; j < n; j++) {
        if (pkv__digest_block(s->sha256, d + (size_t)j * PKV__DIGEST_BYTES,
                              seq->tokens + (size_t)j * bs, bs,
                              d + ((size_t)j + 1) * PKV__DIGEST_BYTES) !=
            PKV_OK)
            return NULL;
        seq->store.num_digests = j + 2;
    }
    return d;
}

/* Hybrid memory: the digest of group g's block (g > 0) whose group-0
 * block has digest `block`: that one chained with the group as a token
 * no prompt has (a negative id), so no two groups' values share a name
 * and each names the group-0 block of its tokens, its parent. */
static pkv_status group_digest(const pkv__engine_store *s,
                               const uint8_t block[PKV__DIGEST_BYTES],
                               uint32_t g, uint8_t out[PKV__DIGEST_BYTES])
{
    int32_t tag = -(int32_t)g;
    return pkv__digest_block(s->sha256, block, &tag, 1, out);
}

void pkv__store_forget(pkv__engine_store *s, pkv__seq *seq,
                       uint32_t keep_blocks)
{
    if (seq->store.num_digests > keep_blocks + 1)
        seq->store.num_digests = keep_blocks + 1;
    if (seq->store.state == PKV__STORE_LOADING)
        for (uint32_t i = 0; i < s->num_ops; i++)
            if (s->ops[i].seq == seq) {
                s->cb.cancel(s->cb.user, s->ops[i].ticket);
                end_wait(s, seq, s->ops[i].started_us);
                free_op(s, &s->ops[i]);
                remove_op(s, i);
                break;
            }
    seq->store.state = PKV__STORE_NOT_ASKED;
}

/* ----------------------------------------------------------------- loads */

/* Ask the store for the blocks of seq's prompt that its prefix cache
 * lacks, as many as the load budget holds. Returns 0 when the budget is
 * full (the next sequences wait too), else 1. */
/* Hybrid memory: the other groups' keys a load of group-0 blocks up to
 * block `end` (excluded) asks for: the blocks the row at token end *
 * block_size sees in each windowed group (every block in a full one). */
static uint32_t group_keys(const pkv__engine_store *s, uint32_t end)
{
    const pkv__kv *kv = s->env.kv;
    uint32_t n = 0, bs = pkv__kv_block_size(kv);
    for (uint32_t g = 1; g < pkv__kv_num_groups(kv); g++)
        n += end - pkv__kv_first_seen(kv, g, end * bs);
    return n;
}

/* Key i of a load op whose group-0 keys start at block `first`: its
 * block and group, into *j and *g (ask's order: group 0's, then each
 * other group's in turn). */
static void key_place(const pkv__engine_store *s, const pkv__store_op *op,
                      uint32_t first, uint32_t i, uint32_t *j, uint32_t *g)
{
    const pkv__kv *kv = s->env.kv;
    uint32_t bs = pkv__kv_block_size(kv), end = first + op->group0_keys;
    if (i < op->group0_keys) {
        *j = first + i;
        *g = 0;
        return;
    }
    i -= op->group0_keys;
    for (uint32_t k = 1;; k++) {
        uint32_t lo = pkv__kv_first_seen(kv, k, end * bs);
        if (i < end - lo) {
            *j = lo + i;
            *g = k;
            return;
        }
        i -= end - lo;
    }
}

/* Key i's value's parent and own digests into pair (as a save's
 * pkv__store_op.digests): group 0's block after its parent, another
 * group's after the group-0 block of its tokens (group_digest's
 * status). */
static pkv_status key_digests(const pkv__engine_store *s,
                              const pkv__store_op *op, uint32_t first,
                              const uint8_t *d, uint32_t i,
                              uint8_t pair[2 * PKV__DIGEST_BYTES])
{
    uint32_t j, g;
    key_place(s, op, first, i, &j, &g);
    if (g == 0) {
        memcpy(pair, d + (size_t)j * PKV__DIGEST_BYTES,
               2 * PKV__DIGEST_BYTES);
        return PKV_OK;
    }
    memcpy(pair, d + ((size_t)j + 1) * PKV__DIGEST_BYTES, PKV__DIGEST_BYTES);
    return group_digest(s, pair, g, pair + PKV__DIGEST_BYTES);
}

/* The keys of a load's values, from block `first` on (d: the sequence's
 * digests), into op's keys buffer, keys[i] pointing at each. */
static pkv_status name_keys(const pkv__engine_store *s, pkv__store_op *op,
                            uint32_t first, const uint8_t *d,
                            const char **keys)
{
    for (uint32_t i = 0; i < op->num_keys; i++) {
        char *key = op->keys + (size_t)i * PKV_STORE_KEY_MAX;
        uint8_t pair[2 * PKV__DIGEST_BYTES];
        pkv_status st = key_digests(s, op, first, d, i, pair);
        if (st == PKV_OK)
            st = pkv__store_key(s, pair + PKV__DIGEST_BYTES, key);
        if (st != PKV_OK)
            return st;
        keys[i] = key;
    }
    return PKV_OK;
}

static int ask(pkv__engine_store *s, pkv__seq *seq, pkv__chain_link *links)
{
    uint32_t bs = pkv__kv_block_size(s->env.kv);
    uint32_t n_max = seq->num_tokens ? (seq->num_tokens - 1) / bs : 0;
    uint32_t hits = 0;
    hits = pkv__kv_chain_lookup(s->env.kv, &seq->kv, seq->tokens,
                                 seq->num_tokens, links);
    seq->store.state = PKV__STORE_ASKED;
    if (hits >= n_max)
        return 1;
    size_t vb = s->value_bytes;
    uint64_t room = s->cb.max_load_bytes > s->load_bytes
                        ? s->cb.max_load_bytes - s->load_bytes
                        : 0;
    uint32_t n = n_max - hits;
    if (room / vb < n)
        n = (uint32_t)(room / vb);
    /* Hybrid memory: each other group's blocks that the row after the
     * last one asked sees; all in the budget, fewer group-0 ones if not. */
    uint32_t all = n + group_keys(s, hits + n);
    while (n > 0 && room / vb < all) {
        n--;
        all = n + group_keys(s, hits + n);
    }
    if (n == 0) {
        if (s->load_bytes == 0)
            return 1; /* one block is over the budget: never asks */
        seq->store.state = PKV__STORE_NOT_ASKED;
        return 0;
    }
    const uint8_t *d = digests(s, seq, hits + n);
    pkv__store_op op;
    memset(&op, 0, sizeof op);
    op.group0_keys = n;
    n = all;
    op.values_bytes = (size_t)n * vb;
    if (d != NULL && s->spare_bytes >= op.values_bytes) {
        op.values = s->spare;
        op.values_bytes = s->spare_bytes;
        s->spare = NULL;
        s->spare_bytes = 0;
    } else if (d != NULL) {
        op.values = pkv__calloc(&s->env.alloc, op.values_bytes, 1);
    }
    op.sizes =
        op.values ? pkv__calloc(&s->env.alloc, n, sizeof *op.sizes) : NULL;
    op.keys = op.sizes
                  ? pkv__calloc(&s->env.alloc, (size_t)n * PKV_STORE_KEY_MAX, 1)
                  : NULL;
    const char **keys = op.keys ? pkv__calloc(&s->env.alloc, n, sizeof *keys)
                                : NULL;
    op.seq = seq;
    op.num_keys = n;
    s->load_bytes += (uint64_t)n * vb; /* free_op takes it back */
    if (keys == NULL || reserve_op(s) != PKV_OK ||
        name_keys(s, &op, hits, d, keys) != PKV_OK) {
        pkv__free(&s->env.alloc, keys, n, sizeof *keys);
        free_op(s, &op);
        pkv__engine_log(s->env.message, PKV_LOG_LEVEL_DEBUG,
                        "seq %llu: not asked of the store (memory)",
                        (unsigned long long)seq->id);
        return 1;
    }
    op.first = hits;
    op.ticket = s->next_ticket++;
    op.started_us = now_us();
    op.deadline_us = op.started_us + 1000u * (uint64_t)s->cb.timeout_ms;
    s->env.totals->store_lookups++;
    s->env.totals->store_query_blocks += n;
    pkv_status st = s->cb.load(s->cb.user, op.ticket,
                               (const char *const *)keys, n, op.values, vb,
                               op.sizes);
    pkv__free(&s->env.alloc, keys, n, sizeof *keys);
    if (st != PKV_OK) {
        s->env.totals->store_load_failures++;
        free_op(s, &op);
        pkv__engine_log(s->env.message, PKV_LOG_LEVEL_DEBUG,
                        "seq %llu: the store refused a load: %s",
                        (unsigned long long)seq->id, pkv_status_name(st));
        return 1;
    }
    seq->store.state = PKV__STORE_LOADING;
    s->num_loading++;
    s->ops[s->num_ops++] = op;
    return 1;
}

/* Whether the value of op's key i (size bytes at v, as stored) is the
 * one this engine would have saved: a sealed one must open, in place,
 * under this key, for its key, place and parent, then its content passes
 * pkv__value_check. UNCHECKED when its digests cannot be computed. */
static enum pkv__value_verdict check_value(pkv__engine_store *s,
                                           const pkv__store_op *op,
                                           uint32_t i, uint8_t *v,
                                           uint64_t size)
{
    const pkv__seq *seq = op->seq;
    uint32_t j, g;
    key_place(s, op, op->first, i, &j, &g);
    uint8_t parent[2 * PKV__DIGEST_BYTES];
    if (key_digests(s, op, op->first, seq->store.digests, i, parent) !=
        PKV_OK)
        return PKV__VALUE_UNCHECKED;
    if (s->env.seal != NULL) {
        uint8_t ad[AD_MAX];
        char why[128];
        size_t ad_n = value_ad(op->keys + (size_t)i * PKV_STORE_KEY_MAX, j,
                               parent, ad);
        if (size != s->value_bytes ||
            pkv__seal_open(s->env.seal, v, s->value_bytes, pkv__value_magic, ad,
                           ad_n, v + s->inner_at, why,
                           sizeof why) != PKV_OK)
            return PKV__VALUE_DAMAGED;
    }
    return pkv__value_check(v + s->inner_at, size - s->inner_at, s->env.config,
                            j, parent + PKV__DIGEST_BYTES, parent,
                            seq->tokens +
                                (size_t)j * pkv__kv_block_size(s->env.kv),
                            s->env.seal != NULL);
}

/* The run of op's values, from block `from` on, that pass verification:
 * its length. Counts the values that arrived and those rejected. */
static uint32_t verified_run(pkv__engine_store *s, const pkv__store_op *op,
                             uint32_t from)
{
    const pkv__seq *seq = op->seq;
    size_t vb = s->value_bytes;
    for (uint32_t i = 0; i < op->num_keys; i++)
        s->env.totals->store_load_bytes +=
            op->sizes[i] < vb ? op->sizes[i] : vb;
    uint32_t j = from;
    for (; j < op->first + op->group0_keys; j++) {
        uint32_t i = j - op->first;
        if (op->sizes[i] == 0)
            break; /* not held: a miss */
        enum pkv__value_verdict v =
            check_value(s, op, i, op->values + (size_t)i * vb, op->sizes[i]);
        if (v == PKV__VALUE_GOOD)
            continue;
        if (v == PKV__VALUE_UNCHECKED)
            break;
        if (v == PKV__VALUE_DAMAGED)
            s->env.totals->store_damaged++;
        else
            s->env.totals->store_mismatched++;
        pkv__engine_log(s->env.message, PKV_LOG_LEVEL_WARN,
                        "seq %llu: the store's block %u is %s: computed "
                        "instead",
                        (unsigned long long)seq->id, (unsigned)j,
                        v == PKV__VALUE_DAMAGED ? "damaged"
                                                : "another block's");
        break;
    }
    return j - from;
}

/* Hybrid memory: a landed load's other groups' values, when the prefix
 * cache now holds group 0's blocks up to where the load asked (the rows
 * their windows serve start there): each verified value becomes a cached
 * block of its group after the group-0 block of its tokens, as a
 * registration makes them (prefix_groups.h). Admission's lookup takes
 * them from there. */
static void install_groups(pkv__engine_store *s, const pkv__store_op *op,
                           pkv__chain_link *links)
{
    pkv__seq *seq = op->seq;
    pkv__kv *kv = s->env.kv;
    uint32_t end = op->first + op->group0_keys;
    if (op->num_keys == op->group0_keys) /* no other group's values */
        return;
    uint32_t hits = pkv__kv_chain_lookup(kv, &seq->kv, seq->tokens,
                                         seq->num_tokens, links);
    if (hits < end || op->group0_keys == 0)
        return;
    size_t vb = s->value_bytes;
    size_t block_bytes = pkv__backend_swap_block_bytes(s->env.config);
    size_t kv_at = s->inner_at + pkv__value_kv_offset(s->env.config);
    for (uint32_t i = op->group0_keys; i < op->num_keys; i++) {
        uint32_t j, g;
        key_place(s, op, op->first, i, &j, &g);
        if (op->sizes[i] == 0 ||
            pkv__kv_group_cached(kv, &seq->kv, seq->tokens, &links[j], j, g))
            continue; /* a miss, or cached already */
        enum pkv__value_verdict v =
            check_value(s, op, i, op->values + (size_t)i * vb, op->sizes[i]);
        if (v != PKV__VALUE_GOOD) {
            if (v == PKV__VALUE_DAMAGED)
                s->env.totals->store_damaged++;
            else if (v == PKV__VALUE_MISMATCHED)
                s->env.totals->store_mismatched++;
            continue;
        }
        uint8_t *bytes = scratch(s, block_bytes);
        uint32_t b;
        pkv_status st = PKV_ERR_OUT_OF_MEMORY;
        if (bytes != NULL) {
            memcpy(bytes, op->values + (size_t)i * vb + kv_at, block_bytes);
            st = pkv__kv_install_group(kv, &seq->kv, seq->tokens, links,
                                       j, g, bytes, &b);
        }
        if (st == PKV_OK) {
            s->sent[b] = 1 + (uint64_t)pkv__kv_generation(kv, b);
            s->env.totals->store_hit_blocks++;
        } else if (st != PKV_ERR_NO_BLOCKS) {
            s->env.totals->store_load_failures++;
        }
    }
}

/* A load landed: its verified blocks join the prefix cache after the
 * blocks the cache holds now, unreferenced (most recently used), where
 * admission finds them. */
static void install(pkv__engine_store *s, const pkv__store_op *op,
                    pkv__chain_link *links)
{
    pkv__seq *seq = op->seq;
    pkv__kv *kv = s->env.kv;
    uint32_t hits = pkv__kv_chain_lookup(kv, &seq->kv, seq->tokens,
                                         seq->num_tokens, links);
    /* The cache lost the block before the first loaded one: they cannot
     * join it (their parent is gone). Every value is still checked. */
    uint32_t from = hits > op->first ? hits : op->first;
    uint32_t n = verified_run(s, op, from);
    if (hits < op->first || n == 0)
        return;
    size_t block_bytes = pkv__backend_swap_block_bytes(s->env.config);
    size_t kv_at = s->inner_at + pkv__value_kv_offset(s->env.config);
    uint8_t *bytes = scratch(s, (size_t)n * block_bytes);
    uint32_t *ids = bytes ? pkv__calloc(&s->env.alloc, n, sizeof *ids) : NULL;
    pkv_status st = ids != NULL ? PKV_OK : PKV_ERR_OUT_OF_MEMORY;
    uint32_t installed = 0;
    if (st == PKV_OK) {
        for (uint32_t i = 0; i < n; i++)
            memcpy(bytes + (size_t)i * block_bytes,
                   op->values + (size_t)(from - op->first + i) *
                                    s->value_bytes +
                       kv_at,
                   block_bytes);
        installed = pkv__kv_install(kv, &seq->kv, seq->tokens, links, from,
                                    n, bytes, ids, &st);
    }
    if (st != PKV_OK) {
        s->env.totals->store_load_failures++;
        pkv__engine_log(s->env.message, PKV_LOG_LEVEL_WARN,
                        "seq %llu: store blocks not installed: %s",
                        (unsigned long long)seq->id, pkv_status_name(st));
    }
    for (uint32_t i = 0; i < installed; i++)
        s->sent[ids[i]] = 1 + (uint64_t)pkv__kv_generation(kv, ids[i]);
    pkv__free(&s->env.alloc, ids, n, sizeof *ids);
    s->env.totals->store_hit_blocks += installed;
    s->env.totals->store_hit_tokens +=
        (uint64_t)installed * pkv__kv_block_size(kv);
    install_groups(s, op, links);
}

/* Links for a lookup of the longest sequence (longest_tokens), kept
 * between steps (a step_begin allocates nothing once they fit); NULL when
 * memory runs out. */
static pkv__chain_link *lookup_links(pkv__engine_store *s,
                                     uint32_t longest_tokens)
{
    size_t needed =
        (size_t)longest_tokens / pkv__kv_block_size(s->env.kv) + 1;
    void *links;
    if (pkv__grow(&s->env.alloc, s->links, &s->links_capacity, 0, needed,
                  sizeof *s->links, &links) != PKV_OK)
        return NULL;
    s->links = links;
    return s->links;
}

/* Tell has_work how many saves are in flight (it runs on any thread). */
static void count_saves(pkv__engine_store *s)
{
    uint32_t saves = 0;
    for (uint32_t i = 0; i < s->num_ops; i++)
        saves += s->ops[i].seq == NULL;
    if (saves != s->num_saving) {
        s->num_saving = saves;
        pkv__inbox_set_saving(s->env.inbox, saves);
    }
}

/* One finished operation. */
static void finish(pkv__engine_store *s, uint32_t index, pkv_status status,
                   pkv__chain_link *links)
{
    pkv__store_op *op = &s->ops[index];
    if (op->seq != NULL) {
        end_wait(s, op->seq, op->started_us);
        if (status != PKV_OK)
            s->env.totals->store_load_failures++;
        else if (links != NULL)
            install(s, op, links);
    } else if (status == PKV_OK) {
        s->env.totals->store_saves++;
        s->env.totals->store_save_bytes += s->value_bytes;
    } else {
        s->env.totals->store_save_failures++;
    }
    free_op(s, op);
    remove_op(s, index);
}

static uint32_t find_op(const pkv__engine_store *s, uint64_t ticket)
{
    for (uint32_t i = 0; i < s->num_ops; i++)
        if (s->ops[i].ticket == ticket)
            return i;
    return UINT32_MAX;
}

void pkv__store_step_begin(pkv__engine_store *s,
                           const pkv__seq_list *waiting,
                           uint32_t longest_tokens)
{
    if (!pkv__store_enabled(s))
        return;
    pkv__chain_link *links = lookup_links(s, longest_tokens);
    /* What the connector finished. It reports each operation once, so
     * the ops in flight bound the rounds: a connector whose poll never
     * stops filling the array cannot hold the step. */
    pkv_store_done done[POLL_BATCH];
    uint32_t n, rounds = s->num_ops / POLL_BATCH + 1;
    do {
        n = s->cb.poll(s->cb.user, done, POLL_BATCH);
        if (n > POLL_BATCH)
            n = POLL_BATCH; /* a connector bug: take what fits */
        for (uint32_t i = 0; i < n; i++) {
            uint32_t at = find_op(s, done[i].ticket);
            if (at != UINT32_MAX)
                finish(s, at, (pkv_status)done[i].status, links);
        }
    } while (n == POLL_BATCH && --rounds > 0);
    /* Loads past their deadline, saves long past theirs. */
    uint64_t now = now_us();
    for (uint32_t i = s->num_ops; i-- > 0;) {
        pkv__store_op *op = &s->ops[i];
        if (now < op->deadline_us)
            continue;
        s->cb.cancel(s->cb.user, op->ticket);
        if (op->seq != NULL) {
            end_wait(s, op->seq, op->started_us);
            s->env.totals->store_timeouts++;
        } else {
            s->env.totals->store_save_failures++;
        }
        free_op(s, op);
        remove_op(s, i);
    }
    /* Waiting prompts not asked yet, in order, while the budget lasts. */
    for (uint32_t i = 0; links != NULL && i < waiting->count; i++) {
        pkv__seq *seq = waiting->items[i];
        if (seq->store.state == PKV__STORE_NOT_ASKED && !ask(s, seq, links))
            break;
    }
    if (links == NULL) /* asked later; those waiting are admitted now */
        for (uint32_t i = 0; i < waiting->count; i++)
            if (waiting->items[i]->store.state == PKV__STORE_NOT_ASKED)
                waiting->items[i]->store.state = PKV__STORE_ASKED;
    count_saves(s);
}

/* ----------------------------------------------------------------- saves */

/* Room for one more pending save (pending and pending_blocks share a
 * capacity). */
static pkv_status reserve_pending(pkv__engine_store *s)
{
    if (s->num_pending < s->pending_capacity)
        return PKV_OK;
    size_t capacity = (size_t)s->pending_capacity * 2 + 8;
    pkv__store_op *ops = pkv__calloc(&s->env.alloc, capacity, sizeof *ops);
    uint32_t *blocks = pkv__calloc(&s->env.alloc, capacity, sizeof *blocks);
    if (ops == NULL || blocks == NULL) {
        pkv__free(&s->env.alloc, ops, capacity, sizeof *ops);
        pkv__free(&s->env.alloc, blocks, capacity, sizeof *blocks);
        return PKV_ERR_OUT_OF_MEMORY;
    }
    if (s->num_pending) {
        memcpy(ops, s->pending, s->num_pending * sizeof *ops);
        memcpy(blocks, s->pending_blocks, s->num_pending * sizeof *blocks);
    }
    pkv__free(&s->env.alloc, s->pending, s->pending_capacity,
              sizeof *s->pending);
    pkv__free(&s->env.alloc, s->pending_blocks, s->pending_capacity,
              sizeof *s->pending_blocks);
    s->pending = ops;
    s->pending_blocks = blocks;
    s->pending_capacity = (uint32_t)capacity;
    return PKV_OK;
}

/* Collect block b, block j of seq's prompt, for the send: named by
 * pair's second digest, after its first (its parent). Skipped when b's
 * contents were sent already (its stamp) or the budget or memory is
 * short. */
static void collect_block(pkv__engine_store *s, const pkv__seq *seq, uint32_t j,
                          uint32_t b,
                          const uint8_t pair[2 * PKV__DIGEST_BYTES])
{
    uint64_t stamp = 1 + (uint64_t)pkv__kv_generation(s->env.kv, b);
    if (s->sent[b] == stamp)
        return;
    pkv__store_op op;
    memset(&op, 0, sizeof op);
    if (s->save_bytes + s->value_bytes <= s->cb.max_save_bytes &&
        reserve_pending(s) == PKV_OK) {
        op.values = pkv__calloc(&s->env.alloc, s->value_bytes, 1);
        op.keys = pkv__calloc(&s->env.alloc, PKV_STORE_KEY_MAX, 1);
    }
    s->save_bytes += s->value_bytes; /* free_op takes it back */
    if (op.values == NULL || op.keys == NULL ||
        pkv__store_key(s, pair + PKV__DIGEST_BYTES, op.keys) != PKV_OK) {
        free_op(s, &op);
        s->env.totals->store_saves_skipped++;
        return;
    }
    /* The header and tokens now (the sequence may end before the send);
     * the KV and the checksum at the send. */
    pkv__value_begin(op.values + s->inner_at, s->env.config, j,
                     pair + PKV__DIGEST_BYTES, pair,
                     seq->tokens + (size_t)j * pkv__kv_block_size(s->env.kv));
    op.first = j;
    memcpy(op.digests, pair, sizeof op.digests);
    s->pending[s->num_pending] = op;
    s->pending_blocks[s->num_pending++] = b;
    s->sent[b] = stamp;
}

void pkv__store_collect(pkv__engine_store *s, pkv__seq *seq, uint32_t first_new)
{
    const pkv__kv *kv = s->env.kv;
    uint32_t bs = pkv__kv_block_size(kv);
    uint32_t end = pkv__kv_registered(&seq->kv);
    uint32_t prompt_blocks = seq->prompt_len / bs;
    /* A prompt's blocks wait until its last full block is computed, then
     * go together (the send writes them tail first): a store that evicts
     * the least recently written (Redis with allkeys-lru) then evicts a
     * chain from its end, as the prefix cache does, never its head first
     * (a chain without its head is never hit). Starting from the first
     * block costs nothing for those already saved or loaded: their stamp
     * skips them. Computed, not registered: a chain that stopped short
     * (a block cached under another parent) still saves what it has. */
    if (seq->num_computed < prompt_blocks * bs)
        return;
    uint32_t from = first_new < prompt_blocks ? 0 : first_new;
    if (!(s->cb.flags & PKV_STORE_SAVE_GENERATED) && end > prompt_blocks)
        end = prompt_blocks;
    for (uint32_t j = from; j < end; j++) {
        /* A link may name the prefix cache's block of these tokens
         * rather than the sequence's own, evicted since; and a windowed
         * group 0 may have dropped its own: then nobody holds them. */
        uint32_t b = pkv__kv_chain_block(kv, &seq->kv, j);
        if (b == PKV__NULL_BLOCK)
            continue;
        const uint8_t *d = digests(s, seq, j + 1);
        if (d != NULL)
            collect_block(s, seq, j, b, d + (size_t)j * PKV__DIGEST_BYTES);
        else
            s->env.totals->store_saves_skipped++;
    }
    /* Hybrid memory: the other groups' blocks the tables still hold, each
     * under its group's digest, after the group-0 block of its tokens. */
    for (uint32_t g = 1; g < pkv__kv_num_groups(kv); g++) {
        const pkv__table *t = pkv__kv_table(&seq->kv, g);
        for (uint32_t j = from > t->first_held ? from : t->first_held;
             j < end && j < seq->num_computed / bs; j++) {
            const uint8_t *d = digests(s, seq, j + 1);
            uint8_t pair[2 * PKV__DIGEST_BYTES];
            if (d != NULL)
                memcpy(pair, d + ((size_t)j + 1) * PKV__DIGEST_BYTES,
                       PKV__DIGEST_BYTES);
            if (d == NULL ||
                group_digest(s, pair, g, pair + PKV__DIGEST_BYTES) !=
                    PKV_OK) {
                s->env.totals->store_saves_skipped++;
                continue;
            }
            collect_block(s, seq, j, t->blocks[j], pair);
        }
    }
}

/* Seal a save's value, whose unsealed value is in place, for its key,
 * place and parent. */
static pkv_status seal_value(pkv__engine_store *s, pkv__store_op *op)
{
    uint8_t ad[AD_MAX];
    size_t ad_n = value_ad(op->keys, op->first, op->digests, ad);
    return pkv__seal_close(s->env.seal, op->values,
                           s->value_bytes - s->inner_at, ad, ad_n);
}

void pkv__store_send(pkv__engine_store *s)
{
    uint32_t n = s->num_pending;
    if (n == 0)
        return;
    s->num_pending = 0;
    size_t block_bytes = pkv__backend_swap_block_bytes(s->env.config);
    size_t kv_at = s->inner_at + pkv__value_kv_offset(s->env.config);
    uint8_t *kv = scratch(s, (size_t)n * block_bytes);
    pkv_status st =
        kv ? pkv__kv_read_blocks(s->env.kv, s->pending_blocks, n, kv)
           : PKV_ERR_OUT_OF_MEMORY;
    uint64_t now = now_us();
    /* Collected parents first (under the budget, a chain keeps its head);
     * saved children first, so each chain's head is written last. */
    for (uint32_t i = n; i-- > 0;) {
        pkv__store_op op = s->pending[i];
        if (st == PKV_OK && reserve_op(s) == PKV_OK) {
            memcpy(op.values + kv_at, kv + (size_t)i * block_bytes,
                   block_bytes);
            /* Under a seal the AEAD's tag is the check: no checksum. */
            if (s->env.seal == NULL)
                pkv__value_put_checksum(op.values + s->inner_at, s->env.config);
            if (s->env.seal != NULL && seal_value(s, &op) != PKV_OK) {
                s->env.totals->store_save_failures++;
                s->sent[s->pending_blocks[i]] = 0;
                free_op(s, &op);
                continue;
            }
            op.ticket = s->next_ticket++;
            op.started_us = now;
            op.deadline_us = now + 1000u * SAVE_TIMEOUT_FACTOR *
                                       (uint64_t)s->cb.timeout_ms;
            pkv_status sent = s->cb.save(s->cb.user, op.ticket, op.keys,
                                         op.values, s->value_bytes);
            if (sent == PKV_OK) {
                s->ops[s->num_ops++] = op;
                continue;
            }
            s->env.totals->store_save_failures++;
        } else {
            s->env.totals->store_saves_skipped++;
        }
        /* Not sent: a later prompt that fills the block tries again. */
        s->sent[s->pending_blocks[i]] = 0;
        free_op(s, &op);
    }
    count_saves(s);
}
