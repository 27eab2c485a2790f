/* SPDX-License-Identifier: MIT */
/*
 * The engine's side of a KV store (pkv_engine_params.store): asking the
 * store for a waiting prompt's blocks, installing those that arrive and
 * pass verification into the prefix cache, saving the blocks the engine
 * fills, and the operations in flight. Mechanism: docs/design.md, "KV
 * store".
 *
 * A sequence's store state: NOT_ASKED until step_begin asks the store
 * for the blocks its prefix cache lacks (or finds there is nothing to
 * ask); LOADING while that load is in flight; ASKED once the load is
 * polled, failed or timed out, or when nothing was asked. The scheduler
 * admits only ASKED sequences when a store is set. Loaded blocks join the
 * prefix cache, unreferenced, so admission finds them as it finds any
 * cached block: a hit through the store is a prefix-cache hit.
 */
#ifndef PKV_STORE_ENGINE_STORE_H
#define PKV_STORE_ENGINE_STORE_H

#include "engine_error.h"
#include "inbox.h"
#include "lock.h"
#include "seq.h"
#include "store/digest.h"

/* An operation in flight. */
typedef struct pkv__store_op {
    uint64_t ticket;
    pkv__seq *seq;   /* a load's sequence; NULL for a save */
    uint8_t *values; /* a load's num_keys values, or a save's one */
    size_t values_bytes; /* a load's values buffer (may be larger) */
    uint64_t *sizes; /* a load's */
    char *keys;      /* a load's, PKV_STORE_KEY_MAX bytes each */
    uint32_t first;  /* a load's first block (index in its prompt), a
                        save's block */
    /* A save's parent and block digests: a sealed value is bound to them
     * when it is sealed, at the send, when the sequence may be gone. */
    uint8_t digests[2 * PKV__DIGEST_BYTES];
    uint32_t num_keys;
    /* A load's group-0 values, num_keys of them without hybrid memory;
     * with it the other groups' follow (engine_store.c, ask). */
    uint32_t group0_keys;
    uint64_t started_us;
    uint64_t deadline_us;
} pkv__store_op;

/* What the store works with, the engine's: its KV-cache manager, whose
 * prefix cache loaded blocks join and whose blocks saves read; the
 * backend's layout (the values' geometry); the seal (NULL: values
 * unsealed); the counters it adds to; its messages; the inbox, told how
 * many saves are in flight; the allocator. */
typedef struct pkv__store_env {
    pkv__kv *kv;
    const pkv__backend_config *config;
    struct pkv__seal *seal;
    pkv_engine_stats *totals;
    const pkv__engine_message *message;
    pkv__inbox *inbox;
    pkv__allocator alloc;
} pkv__store_env;

typedef struct pkv__engine_store {
    pkv_store cb; /* the host's connector; cb.load NULL: no store */
    pkv__store_env env;
    size_t value_bytes;  /* as stored, sealed or not */
    size_t inner_at;     /* where the unsealed value starts in a value */
    EVP_MD *sha256; /* libcrypto's, fetched once for every digest */
    uint8_t model[PKV__DIGEST_BYTES]; /* cb.model's digest */
    char fingerprint[17];
    pkv__store_op *ops;
    uint32_t num_ops;
    uint32_t ops_capacity;
    uint64_t next_ticket;
    uint64_t load_bytes; /* host bytes of loads in flight */
    uint64_t save_bytes; /* of saves in flight */
    uint32_t num_loading;
    uint32_t num_saving; /* as told to the inbox */
    /* [num_blocks]: 1 + the generation at which the block was saved to or
     * loaded from the store (0: never), so a block goes out once. */
    uint64_t *sent;
    /* Saves collected by step_end, sent at its end. */
    pkv__store_op *pending;
    uint32_t num_pending;
    uint32_t pending_capacity;
    uint32_t *pending_blocks;
    uint8_t *scratch; /* KV of many blocks, gathered */
    size_t scratch_capacity;
    uint8_t *spare; /* the largest load's values buffer, kept for reuse */
    size_t spare_bytes;
    pkv__chain_link *links; /* a prefix lookup's, scratch */
    size_t links_capacity;
    /* Names made on other threads (pkv__store_prompt_keys): with a seal,
     * a copy of its naming context, used under outside_lock. */
    EVP_MAC_CTX *outside_namer;
    pkv__lock *outside_lock;
} pkv__engine_store;

/* Whether the engine has a store. */
static inline int pkv__store_enabled(const pkv__engine_store *s)
{
    return s->cb.load != NULL;
}

/* The store key of a block of this digest: "pkv1:<fingerprint>:<64 hex
 * digits of the digest>", or with a seal "pkvs:<fingerprint>:<64 hex
 * digits of its name>" (both fingerprint and name HMACs under the seal's
 * naming key), NUL terminated, PKV_STORE_KEY_MAX bytes. PKV_OK, or
 * PKV_ERR_OUT_OF_MEMORY when libcrypto fails (the name). */
pkv_status pkv__store_key(const pkv__engine_store *s,
                          const uint8_t digest[PKV__DIGEST_BYTES],
                          char *out);

/* The store keys of the first n blocks of a prompt, tokens (n * block
 * size of them), under salt: group 0's, as a load of them names them
 * (sealed names with a seal), into keys (PKV_STORE_KEY_MAX bytes each,
 * NUL terminated). From any thread: it reads only what create fixed, and
 * names under its own lock. PKV_OK, or PKV_ERR_OUT_OF_MEMORY when
 * libcrypto fails. */
pkv_status pkv__store_prompt_keys(const pkv__engine_store *s,
                                  const int32_t *tokens, uint32_t n,
                                  uint64_t salt, char *keys);

/* Make the engine's store state (*out), over env, for the host's
 * connector (store NULL: a state that says there is no store). On
 * failure *out holds what was made, for pkv__store_release. */
pkv_status pkv__store_init(pkv__engine_store **out,
                           const pkv__store_env *env, const pkv_store *store);

/* Cancel every operation in flight and free everything, s included
 * (destroy; NULL: nothing). */
void pkv__store_release(pkv__engine_store *s);

/* step_begin, before the plan: take what the connector finished, give up
 * on loads past their deadline, install verified blocks, and ask for the
 * blocks of waiting prompts not asked yet (the longest of every sequence
 * has longest_tokens tokens). Never fails: what cannot be done is a
 * miss. */
void pkv__store_step_begin(pkv__engine_store *s,
                           const pkv__seq_list *waiting,
                           uint32_t longest_tokens);

/* step_end, after seq registered its full blocks in the prefix cache:
 * collect the ones to save (links from first_new on). */
void pkv__store_collect(pkv__engine_store *s, pkv__seq *seq,
                        uint32_t first_new);

/* step_end's last act: read the collected blocks' KV and start saving
 * them. */
void pkv__store_send(pkv__engine_store *s);

/* A sequence leaves waiting (ends) or its tokens change (truncate): its
 * load, if any, is cancelled, it is asked again if it waits again, and
 * its block digests past keep_blocks are forgotten. */
void pkv__store_forget(pkv__engine_store *s, pkv__seq *seq,
                       uint32_t keep_blocks);

#endif
