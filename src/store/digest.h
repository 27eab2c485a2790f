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

#include <stddef.h>
#include <stdint.h>

#define PKV__DIGEST_BYTES 32u

typedef struct pkv__sha256 {
    uint32_t state[8];
    uint64_t bytes;
    uint8_t buffer[64];
} pkv__sha256;

void pkv__sha256_init(pkv__sha256 *h);
void pkv__sha256_update(pkv__sha256 *h, const void *data, size_t n);
void pkv__sha256_final(pkv__sha256 *h, uint8_t out[PKV__DIGEST_BYTES]);

/* The digest of a model's name (pkv_store.model; NULL is ""). */
void pkv__digest_model(const char *name, uint8_t out[PKV__DIGEST_BYTES]);

/* The digest a prompt's chain starts from: the model's, the geometry and
 * KV format of config c (the export header's words) and the salt. */
void pkv__digest_root(const uint8_t model[PKV__DIGEST_BYTES],
                      const pkv__backend_config *c, uint64_t salt,
                      uint8_t out[PKV__DIGEST_BYTES]);

/* The digest of a block: its parent's (the root for the first block) and
 * its block_size token ids. */
void pkv__digest_block(const uint8_t parent[PKV__DIGEST_BYTES],
                       const int32_t *tokens, uint32_t block_size,
                       uint8_t out[PKV__DIGEST_BYTES]);

/* n bytes as 2n lowercase hex digits and a NUL. */
void pkv__digest_hex(const uint8_t *bytes, size_t n, char *out);

#endif
