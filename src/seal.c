/* SPDX-License-Identifier: MIT */
/* The seal of a deployment key: HMAC-SHA-256, key derivation, and the
 * AES-256-GCM envelope (seal.h), all from libcrypto. */
#include "seal.h"

#include "error.h"
#include "wire.h"

#include <stdio.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

pkv_status pkv__seal_check_key(const uint8_t *key, uint32_t *size)
{
    if (key == NULL && *size == 0)
        return PKV_OK;
    if (key == NULL)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->seal_key_size is %u but seal_key is NULL",
                         (unsigned)*size);
    if (*size == 0)
        *size = PKV__SEAL_KEY_BYTES; /* a host that sets seal_key alone */
    if (*size != PKV__SEAL_KEY_BYTES)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->seal_key_size is %u; the deployment key "
                         "is %u random bytes (AES-256 and HMAC-SHA-256 keys)",
                         (unsigned)*size, PKV__SEAL_KEY_BYTES);
    uint8_t any = 0;
    for (uint32_t i = 0; i < PKV__SEAL_KEY_BYTES; i++)
        any |= key[i];
    if (any == 0)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "params->seal_key is all zeros: a key anyone can "
                         "guess (fill it with %u random bytes)",
                         PKV__SEAL_KEY_BYTES);
    return PKV_OK;
}

pkv_status pkv__hmac_key(const uint8_t *key, size_t key_n,
                         EVP_MAC_CTX **out)
{
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(
                               OSSL_MAC_PARAM_DIGEST, digest, 0),
                           OSSL_PARAM_construct_end()};
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *ctx = mac != NULL ? EVP_MAC_CTX_new(mac) : NULL;
    EVP_MAC_free(mac); /* the context holds a reference of its own */
    if (ctx == NULL || EVP_MAC_init(ctx, key, key_n, params) != 1) {
        EVP_MAC_CTX_free(ctx);
        *out = NULL;
        return PKV_ERR_OUT_OF_MEMORY;
    }
    *out = ctx;
    return PKV_OK;
}

pkv_status pkv__hmac_sha256(EVP_MAC_CTX *mac, const uint8_t *data, size_t n,
                            uint8_t out[32])
{
    size_t len;
    /* No key: the context's own, hashed into its pads once when keyed. */
    return EVP_MAC_init(mac, NULL, 0, NULL) == 1 &&
                   EVP_MAC_update(mac, data, n) == 1 &&
                   EVP_MAC_final(mac, out, &len, 32) == 1
               ? PKV_OK
               : PKV_ERR_OUT_OF_MEMORY;
}

/* The envelope (docs/design.md, "Sealing with a deployment key"). */
#define SEAL_VERSION 1u
static const uint8_t MAGIC[8] = {'P', 'K', 'V', 'S', 'E', 'A', 'L', '\n'};
enum {
    AT_VERSION = 8,       /* u32 */
    AT_HEADER_BYTES = 12, /* u32 */
    AT_CONTENT = 16,      /* the content's own magic */
    AT_SALT = 24,         /* 12 random bytes: the content key's */
    AT_NONCE = 36,        /* 12 random bytes: the GCM nonce */
    AT_TAG = 48,          /* 16 bytes */
    SALT_BYTES = 12,
    NONCE_BYTES = 12,
    TAG_BYTES = 16
};

int pkv__seal_is_sealed(const uint8_t *d, size_t size)
{
    return size >= PKV__SEAL_HEADER_BYTES && memcmp(d, MAGIC, 8) == 0;
}

pkv_status pkv__seal_unwrap(pkv__seal *s, const pkv__allocator *a,
                            const uint8_t *in, size_t size,
                            const uint8_t magic[8], const uint8_t **content,
                            size_t *content_size, uint8_t **owned,
                            char *why, size_t why_size)
{
    *content = in;
    *content_size = size;
    *owned = NULL;
    if (s == NULL) {
        if (!pkv__seal_is_sealed(in, size))
            return PKV_OK;
        snprintf(why, why_size, "the bytes are sealed with a deployment "
                                "key; this engine has none "
                                "(pkv_engine_params.seal_key)");
        return PKV_ERR_UNSUPPORTED;
    }
    /* Bytes it refuses before it decrypts: no copy for them. */
    if (!pkv__seal_is_sealed(in, size) ||
        size - PKV__SEAL_HEADER_BYTES < 8)
        return pkv__seal_open(s, in, size, magic, NULL, 0, NULL, why,
                              why_size);
    size_t n = size - PKV__SEAL_HEADER_BYTES;
    uint8_t *copy = pkv__calloc(a, n, 1);
    if (copy == NULL) {
        snprintf(why, why_size, "%zu bytes to open the seal into", n);
        return PKV_ERR_OUT_OF_MEMORY;
    }
    pkv_status st = pkv__seal_open(s, in, size, magic, NULL, 0, copy, why,
                                   why_size);
    if (st != PKV_OK) {
        pkv__free(a, copy, n, 1);
        return st;
    }
    *content = copy;
    *content_size = n;
    *owned = copy;
    return PKV_OK;
}

struct pkv__seal {
    EVP_MAC_CTX *encrypt; /* HMAC keyed to derive each content's key */
    EVP_MAC_CTX *name;    /* HMAC keyed to name store values */
    EVP_CIPHER_CTX *ctx;  /* AES-256-GCM, reused for every content */
};

/* AES-GCM's limit on one message: 2^32 - 2 blocks of 16 bytes. */
#define MAX_CONTENT ((1ull << 36) - 32)
/* EVP's updates take an int: a content goes through in pieces. */
#define PIECE ((size_t)1 << 30)

/* HKDF-Expand (RFC 5869) of one block, keyed by the deployment key itself
 * (uniformly random, so the extract step adds nothing): the info label
 * then the counter byte 1. Distinct labels, independent keys; each
 * becomes an HMAC context keyed with it, *out. */
static pkv_status derive(EVP_MAC_CTX *key, const char *label,
                         EVP_MAC_CTX **out)
{
    uint8_t info[64], derived[32];
    size_t n = strlen(label);
    memcpy(info, label, n);
    info[n] = 1;
    pkv_status st = pkv__hmac_sha256(key, info, n + 1, derived);
    if (st == PKV_OK)
        st = pkv__hmac_key(derived, sizeof derived, out);
    OPENSSL_cleanse(derived, sizeof derived);
    return st;
}

pkv_status pkv__seal_create(const uint8_t key[PKV__SEAL_KEY_BYTES],
                            const pkv__allocator *a, pkv__seal **out)
{
    *out = NULL;
    pkv__seal *s = pkv__calloc(a, 1, sizeof *s);
    if (s == NULL)
        return PKV_ERR_OUT_OF_MEMORY;
    EVP_MAC_CTX *deployment = NULL;
    s->ctx = EVP_CIPHER_CTX_new();
    pkv_status st =
        s->ctx != NULL && EVP_CipherInit_ex(s->ctx, EVP_aes_256_gcm(), NULL,
                                            NULL, NULL, 1) == 1
            ? pkv__hmac_key(key, PKV__SEAL_KEY_BYTES, &deployment)
            : PKV_ERR_OUT_OF_MEMORY;
    if (st == PKV_OK)
        st = derive(deployment, "pkv-seal-1 encryption", &s->encrypt);
    if (st == PKV_OK)
        st = derive(deployment, "pkv-seal-1 names", &s->name);
    EVP_MAC_CTX_free(deployment);
    if (st != PKV_OK) {
        pkv__seal_destroy(s, a);
        return st;
    }
    *out = s;
    return PKV_OK;
}

void pkv__seal_destroy(pkv__seal *s, const pkv__allocator *a)
{
    if (s == NULL)
        return;
    /* libcrypto wipes the keys its contexts hold as it frees them. */
    EVP_CIPHER_CTX_free(s->ctx);
    EVP_MAC_CTX_free(s->encrypt);
    EVP_MAC_CTX_free(s->name);
    pkv__free(a, s, 1, sizeof *s);
}

pkv_status pkv__seal_name(pkv__seal *s, const uint8_t *data, size_t n,
                          uint8_t out[PKV__SEAL_NAME_BYTES])
{
    return pkv__hmac_sha256(s->name, data, n, out);
}

pkv_status pkv__seal_name_context(const pkv__seal *s, EVP_MAC_CTX **out)
{
    *out = EVP_MAC_CTX_dup(s->name);
    return *out != NULL ? PKV_OK : PKV_ERR_OUT_OF_MEMORY;
}

/* Start the cipher (enc 1: encrypt, 0: decrypt) for the content whose
 * envelope header is h: the content's own key, HMAC of the encryption key
 * over the header's salt, so that a content key never serves two
 * contents even if a nonce repeats; then the header before the tag and
 * ad as associated data. 1 when libcrypto did it all. */
static int start(pkv__seal *s, const uint8_t *h, int enc, const uint8_t *ad,
                 size_t ad_n)
{
    static const char label[] = "pkv-seal-1 content";
    uint8_t info[sizeof label - 1 + SALT_BYTES], key[32];
    memcpy(info, label, sizeof label - 1);
    memcpy(info + sizeof label - 1, h + AT_SALT, SALT_BYTES);
    int len, ok = pkv__hmac_sha256(s->encrypt, info, sizeof info, key) ==
                          PKV_OK &&
                  EVP_CipherInit_ex(s->ctx, NULL, NULL, key, h + AT_NONCE,
                                    enc) == 1 &&
                  EVP_CipherUpdate(s->ctx, NULL, &len, h, AT_TAG) == 1;
    for (size_t at = 0; ok && at < ad_n; at += PIECE) {
        size_t piece = ad_n - at < PIECE ? ad_n - at : PIECE;
        ok = EVP_CipherUpdate(s->ctx, NULL, &len, ad + at, (int)piece) == 1;
    }
    OPENSSL_cleanse(key, sizeof key);
    return ok;
}

/* The content through the cipher, n bytes from in to out. */
static int run(pkv__seal *s, const uint8_t *in, size_t n, uint8_t *out)
{
    int ok = 1, len;
    for (size_t at = 0; ok && at < n; at += PIECE) {
        size_t piece = n - at < PIECE ? n - at : PIECE;
        ok = EVP_CipherUpdate(s->ctx, out + at, &len, in + at, (int)piece) ==
             1;
    }
    return ok;
}

pkv_status pkv__seal_close(pkv__seal *s, uint8_t *buf, size_t n,
                           const uint8_t *ad, size_t ad_n)
{
    if ((uint64_t)n > MAX_CONTENT || n < 8)
        return PKV_ERR_UNSUPPORTED;
    uint8_t *content = buf + PKV__SEAL_HEADER_BYTES;
    memset(buf, 0, PKV__SEAL_HEADER_BYTES);
    memcpy(buf, MAGIC, 8);
    pkv__put_u32(buf + AT_VERSION, SEAL_VERSION);
    pkv__put_u32(buf + AT_HEADER_BYTES, PKV__SEAL_HEADER_BYTES);
    memcpy(buf + AT_CONTENT, content, 8);
    uint8_t none[16]; /* GCM's final step writes no bytes */
    int len;
    if (RAND_bytes(buf + AT_SALT, SALT_BYTES + NONCE_BYTES) != 1 ||
        !start(s, buf, 1, ad, ad_n) || !run(s, content, n, content) ||
        EVP_CipherFinal_ex(s->ctx, none, &len) != 1 ||
        EVP_CIPHER_CTX_ctrl(s->ctx, EVP_CTRL_GCM_GET_TAG, TAG_BYTES,
                            buf + AT_TAG) != 1)
        return PKV_ERR_INTERNAL;
    return PKV_OK;
}

pkv_status pkv__seal_open(pkv__seal *s, const uint8_t *in, size_t size,
                          const uint8_t magic[8], const uint8_t *ad,
                          size_t ad_n, uint8_t *out, char *why,
                          size_t why_size)
{
    if (!pkv__seal_is_sealed(in, size)) {
        snprintf(why, why_size, "not sealed (this engine has a seal key "
                                "and takes only sealed bytes)");
        return PKV_ERR_INVALID_ARGUMENT;
    }
    if (pkv__get_u32(in + AT_VERSION) != SEAL_VERSION ||
        pkv__get_u32(in + AT_HEADER_BYTES) != PKV__SEAL_HEADER_BYTES) {
        snprintf(why, why_size, "seal version %u; this library opens %u",
                 (unsigned)pkv__get_u32(in + AT_VERSION),
                 (unsigned)SEAL_VERSION);
        return PKV_ERR_INVALID_ARGUMENT;
    }
    size_t n = size - PKV__SEAL_HEADER_BYTES;
    if (memcmp(in + AT_CONTENT, magic, 8) != 0 || (uint64_t)n > MAX_CONTENT ||
        n < 8) {
        snprintf(why, why_size, "the sealed bytes hold another format");
        return PKV_ERR_INVALID_ARGUMENT;
    }
    /* EVP takes the tag through a pointer to non-const; GCM's final
     * step writes no bytes. */
    uint8_t tag[TAG_BYTES], none[16];
    memcpy(tag, in + AT_TAG, TAG_BYTES);
    int len;
    if (!start(s, in, 0, ad, ad_n) ||
        !run(s, in + PKV__SEAL_HEADER_BYTES, n, out) ||
        EVP_CIPHER_CTX_ctrl(s->ctx, EVP_CTRL_GCM_SET_TAG, TAG_BYTES, tag) !=
            1 ||
        EVP_CipherFinal_ex(s->ctx, none, &len) != 1) {
        snprintf(why, why_size, "the seal does not hold: sealed under "
                                "another key or for another place, or "
                                "changed since");
        return PKV_ERR_INVALID_ARGUMENT;
    }
    return PKV_OK;
}
