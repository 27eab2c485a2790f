/* SPDX-License-Identifier: MIT */
/*
 * The seal of a deployment key (pkv_engine_params.seal_key): what pkv
 * writes for other processes (KV store values, the saved prefix cache,
 * sequence exports) encrypted and authenticated with AES-256-GCM, and the
 * names of store values made with HMAC-SHA-256, so that without the key
 * no one can read, forge, move or replay them under another name
 * (docs/design.md, "Sealing with a deployment key", has the format and
 * the trust model).
 *
 * Sealed bytes are an envelope around the unsealed format, byte for byte:
 * a header of PKV__SEAL_HEADER_BYTES, then the content encrypted in place.
 * So every parser of the unsealed formats runs, unchanged, on what a seal
 * opens to. AES-GCM and HMAC come from OpenSSL's libcrypto.
 */
#ifndef PKV_SEAL_H
#define PKV_SEAL_H

#include "alloc.h"

#include <openssl/types.h>
#include <stddef.h>
#include <stdint.h>

#define PKV__SEAL_KEY_BYTES 32u
#define PKV__SEAL_HEADER_BYTES 64u
#define PKV__SEAL_NAME_BYTES 32u

typedef struct pkv__seal pkv__seal;

/* An HMAC-SHA-256 (RFC 2104) context keyed with key_n bytes of key, *out
 * (EVP_MAC_CTX_free releases it): keyed once, it hashes any number of
 * messages under that key. PKV_ERR_OUT_OF_MEMORY when libcrypto fails. */
pkv_status pkv__hmac_key(const uint8_t *key, size_t key_n,
                         EVP_MAC_CTX **out);

/* HMAC-SHA-256 of n bytes of data under mac's key (pkv__hmac_key).
 * PKV_ERR_OUT_OF_MEMORY when libcrypto fails. Not for two threads at
 * once on one mac. */
pkv_status pkv__hmac_sha256(EVP_MAC_CTX *mac, const uint8_t *data, size_t n,
                            uint8_t out[32]);

/* Check the deployment key of an engine's params (pkv.h, seal_key and
 * seal_key_size): NULL with size 0 is no key; a key of size 0 is one of
 * PKV__SEAL_KEY_BYTES (*size set so); any other size, a size without a
 * key and an all-zero key are refused with PKV_ERR_INVALID_ARGUMENT and
 * this thread's message, the key read only once its size is known. */
pkv_status pkv__seal_check_key(const uint8_t *key, uint32_t *size);

/* The seal of a deployment key: its two derived keys (encryption,
 * naming) and a cipher context. PKV_ERR_OUT_OF_MEMORY (ours or
 * libcrypto's). */
pkv_status pkv__seal_create(const uint8_t key[PKV__SEAL_KEY_BYTES],
                            const pkv__allocator *a, pkv__seal **out);

/* Wipe and free; NULL is a no-op. */
void pkv__seal_destroy(pkv__seal *s, const pkv__allocator *a);

/* The name of n bytes under the naming key (HMAC-SHA-256): reveals
 * nothing of data to whoever lacks the key. PKV_ERR_OUT_OF_MEMORY when
 * libcrypto fails. */
pkv_status pkv__seal_name(pkv__seal *s, const uint8_t *data, size_t n,
                          uint8_t out[PKV__SEAL_NAME_BYTES]);

/* A copy of the naming key's context, *out (EVP_MAC_CTX_free releases
 * it), for names made on another thread than the seal's
 * (pkv__hmac_sha256 on it gives pkv__seal_name's names). Call it where
 * nothing else uses the seal. PKV_ERR_OUT_OF_MEMORY. */
pkv_status pkv__seal_name_context(const pkv__seal *s, EVP_MAC_CTX **out);

/* Whether size bytes at d start as sealed bytes (the envelope's magic):
 * for the message of a refusal, not a check. */
int pkv__seal_is_sealed(const uint8_t *d, size_t size);

/* Seal in place: buf holds PKV__SEAL_HEADER_BYTES (written here) then n
 * bytes of content starting with its own 8-byte magic (encrypted here).
 * ad (ad_n bytes, not stored) is bound to the seal: opening needs the
 * same. PKV_OK; PKV_ERR_UNSUPPORTED for content over AES-GCM's limit
 * (64 GB); PKV_ERR_INTERNAL when libcrypto fails (its random source). */
pkv_status pkv__seal_close(pkv__seal *s, uint8_t *buf, size_t n,
                           const uint8_t *ad, size_t ad_n);

/* Open size sealed bytes at in whose content is of format `magic`, under
 * ad: the content, size - PKV__SEAL_HEADER_BYTES bytes, decrypted into
 * out (in + PKV__SEAL_HEADER_BYTES, in place, or a buffer apart from in).
 * PKV_OK only when the seal holds: made under this key, for this ad,
 * nothing changed; else PKV_ERR_INVALID_ARGUMENT with why[] saying which
 * check failed (out's bytes are then meaningless). */
pkv_status pkv__seal_open(pkv__seal *s, const uint8_t *in, size_t size,
                          const uint8_t magic[8], const uint8_t *ad,
                          size_t ad_n, uint8_t *out, char *why,
                          size_t why_size);

/* The content a reader of a file format (magic) works on, given size
 * bytes at in: without a seal (s NULL) the bytes themselves, which must
 * not be sealed; with one, the bytes opened (no ad) into a copy,
 * *owned, that the caller frees (pkv__free(a, *owned, *content_size,
 * 1)). PKV_OK; PKV_ERR_UNSUPPORTED for sealed bytes and no seal;
 * PKV_ERR_INVALID_ARGUMENT for bytes that do not open (pkv__seal_open);
 * PKV_ERR_OUT_OF_MEMORY; why[] says which. */
pkv_status pkv__seal_unwrap(pkv__seal *s, const pkv__allocator *a,
                            const uint8_t *in, size_t size,
                            const uint8_t magic[8], const uint8_t **content,
                            size_t *content_size, uint8_t **owned,
                            char *why, size_t why_size);

#endif
