/* SPDX-License-Identifier: MIT */
/*
 * The names of blocks in a KV store: SHA-256 chained over a prompt's
 * blocks, so that a block's key stands for the model geometry, KV format,
 * cache_salt and every token up to the block's end, and a value found
 * under it can be checked against all of them (docs/design.md, "KV
 * store"). SHA-256 rather than the prefix cache's 64-bit hash: the
 * prefix cache proves its hits by block identity, a store only by names,
 * so its names must not collide.
 */
#ifndef PKV_STORE_DIGEST_H
#define PKV_STORE_DIGEST_H

#include "backend.h"
#include "kv/groups.h"

#include <openssl/types.h>
#include <stddef.h>
#include <stdint.h>

#define PKV__DIGEST_BYTES 32u

/* SHA-256 from libcrypto (SHA-NI where the processor has it), in pieces:
 * begin, add, end. md is EVP_MD_fetch(NULL, "SHA256", NULL), fetched once
 * by its owner (pkv__digest_fetch): fetching by name at every hash would
 * cost more than hashing a block's name. libcrypto allocates a context
 * at begin, which may fail: the error is kept, end reports it
 * (PKV_ERR_OUT_OF_MEMORY) and frees the context in any case. */
typedef struct pkv__sha256 {
    EVP_MD_CTX *ctx;
    int ok;
} pkv__sha256;

void pkv__sha256_begin(pkv__sha256 *h, const EVP_MD *md);
void pkv__sha256_add(pkv__sha256 *h, const void *data, size_t n);
pkv_status pkv__sha256_end(pkv__sha256 *h, uint8_t out[PKV__DIGEST_BYTES]);

/* libcrypto's SHA-256, for pkv__sha256_begin: *out, released with
 * EVP_MD_free; PKV_ERR_OUT_OF_MEMORY when libcrypto has none. */
pkv_status pkv__digest_fetch(EVP_MD **out);

/* The digests below: PKV_OK, or PKV_ERR_OUT_OF_MEMORY (libcrypto's
 * context). */

/* The digest of a model's name (pkv_store.model; NULL is ""). */
pkv_status pkv__digest_model(const EVP_MD *md, const char *name,
                             uint8_t out[PKV__DIGEST_BYTES]);

/* The digest a prompt's chain starts from: the model's, the geometry and
 * KV format of config c (the export header's words), the layers' groups
 * g unless plain, and the salt. */
pkv_status pkv__digest_root(const EVP_MD *md,
                            const uint8_t model[PKV__DIGEST_BYTES],
                            const pkv__backend_config *c,
                            const pkv__groups *g, uint64_t salt,
                            uint8_t out[PKV__DIGEST_BYTES]);

/* The digest of a block: its parent's (the root for the first block) and
 * its block_size token ids. */
pkv_status pkv__digest_block(const EVP_MD *md,
                             const uint8_t parent[PKV__DIGEST_BYTES],
                             const int32_t *tokens, uint32_t block_size,
                             uint8_t out[PKV__DIGEST_BYTES]);

/* n bytes as 2n lowercase hex digits and a NUL. */
void pkv__digest_hex(const uint8_t *bytes, size_t n, char *out);

#endif
