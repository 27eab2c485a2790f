/* SPDX-License-Identifier: MIT */
/*
 * The value a KV store holds for one block: a header naming the geometry
 * and KV format, the block's place in its prompt, its key digest and its
 * parent's, a checksum; then its token ids and its KV, every layer, as
 * stored (the swap format of the backend). Little-endian, fixed size for
 * an engine. The layout is in docs/design.md, "KV store".
 */
#ifndef PKV_STORE_VALUE_H
#define PKV_STORE_VALUE_H

#include "store/digest.h"

/* What pkv__value_check found. */
enum pkv__value_verdict {
    PKV__VALUE_GOOD = 0,
    PKV__VALUE_DAMAGED = 1,   /* another size, or the checksum fails */
    PKV__VALUE_MISMATCHED = 2, /* intact, but another block's */
    /* Not checked: its digests could not be computed (libcrypto's
     * memory; engine_store.c); a miss, neither counted. */
    PKV__VALUE_UNCHECKED = 3
};

/* The magic a value starts with (what a seal around one must hold). */
extern const uint8_t pkv__value_magic[8];

/* Bytes of one value of config c. */
size_t pkv__value_bytes(const pkv__backend_config *c);

/* Where the KV starts in a value (the backend's swap bytes of one block
 * go there). */
size_t pkv__value_kv_offset(const pkv__backend_config *c);

/* Write a value's header and tokens: block `index` of its prompt, named
 * digest, after parent (the root digest for index 0). Its KV goes to
 * pkv__value_kv_offset, then pkv__value_put_checksum. */
void pkv__value_begin(uint8_t *value, const pkv__backend_config *c,
                      uint32_t index, const uint8_t digest[PKV__DIGEST_BYTES],
                      const uint8_t parent[PKV__DIGEST_BYTES],
                      const int32_t *tokens);

/* Write the checksum of a value whose header, tokens and KV are in
 * place. */
void pkv__value_put_checksum(uint8_t *value, const pkv__backend_config *c);

/* Whether `size` bytes at value are what pkv__value_put_checksum wrote for the
 * same config, index, digest, parent and tokens, with only finite numbers
 * in its KV (f32/f16 elements, quantized parts' lo and scale): a value
 * with another is DAMAGED, as a host tensor with one is refused.
 * authenticated: the value came out of a deployment key's seal, which
 * already proved every byte is what this key sealed, so the checksum is
 * neither written (pkv__value_put_checksum is not called) nor compared. */
enum pkv__value_verdict pkv__value_check(
    const uint8_t *value, uint64_t size, const pkv__backend_config *c,
    uint32_t index, const uint8_t digest[PKV__DIGEST_BYTES],
    const uint8_t parent[PKV__DIGEST_BYTES], const int32_t *tokens,
    int authenticated);

#endif
