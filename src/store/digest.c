/* SPDX-License-Identifier: MIT */
/* SHA-256 through libcrypto and the block key chain of a KV store
 * (digest.h). */
#include "store/digest.h"

#include "wire.h"

#include <openssl/evp.h>
#include <string.h>

void pkv__sha256_begin(pkv__sha256 *h, const EVP_MD *md)
{
    h->ctx = EVP_MD_CTX_new();
    h->ok = h->ctx != NULL && EVP_DigestInit_ex2(h->ctx, md, NULL) == 1;
}

void pkv__sha256_add(pkv__sha256 *h, const void *data, size_t n)
{
    h->ok = h->ok && EVP_DigestUpdate(h->ctx, data, n) == 1;
}

pkv_status pkv__sha256_end(pkv__sha256 *h, uint8_t out[PKV__DIGEST_BYTES])
{
    h->ok = h->ok && EVP_DigestFinal_ex(h->ctx, out, NULL) == 1;
    EVP_MD_CTX_free(h->ctx);
    h->ctx = NULL;
    return h->ok ? PKV_OK : PKV_ERR_OUT_OF_MEMORY;
}

pkv_status pkv__digest_fetch(EVP_MD **out)
{
    *out = EVP_MD_fetch(NULL, "SHA256", NULL);
    return *out != NULL ? PKV_OK : PKV_ERR_OUT_OF_MEMORY;
}

/* Bumped with the value format (value.h): keys of another format never
 * meet this one's, so values an older pkv saved are misses. */
static const char ROOT_TAG[16] = "pkv-store-key-2";

pkv_status pkv__digest_model(const EVP_MD *md, const char *name,
                             uint8_t out[PKV__DIGEST_BYTES])
{
    pkv__sha256 h;
    pkv__sha256_begin(&h, md);
    if (name != NULL)
        pkv__sha256_add(&h, name, strlen(name));
    return pkv__sha256_end(&h, out);
}

pkv_status pkv__digest_root(const EVP_MD *md,
                            const uint8_t model[PKV__DIGEST_BYTES],
                            const pkv__backend_config *c,
                            const pkv__groups *g, uint64_t salt,
                            uint8_t out[PKV__DIGEST_BYTES])
{
    static const uint8_t magic[8] = {0};
    uint8_t words[PKV__AT_FORMAT_FIELDS];
    uint8_t salt_bytes[8];
    pkv__wire_put_header(words, sizeof words, magic, 0, c);
    pkv__put_u64(salt_bytes, salt);
    pkv__sha256 h;
    pkv__sha256_begin(&h, md);
    pkv__sha256_add(&h, ROOT_TAG, sizeof ROOT_TAG);
    pkv__sha256_add(&h, model, PKV__DIGEST_BYTES);
    pkv__sha256_add(&h, words + PKV__AT_KV_DTYPE,
                    PKV__AT_FORMAT_FIELDS - PKV__AT_KV_DTYPE);
    pkv__sha256_add(&h, salt_bytes, sizeof salt_bytes);
    /* Hybrid memory: a block holds one group's layers, so engines grouped
     * otherwise name other values (and miss, rather than count the values
     * damaged). Each layer's group and arena; nothing in the plain
     * layout, whose names are those of an engine before groups. */
    for (uint32_t l = 0; !pkv__groups_plain(g) && l < g->num_layers; l++) {
        uint8_t place[8];
        pkv__put_u32(place, g->layer_group[l]);
        pkv__put_u32(place + 4, g->layer_arena[l]);
        pkv__sha256_add(&h, place, sizeof place);
    }
    return pkv__sha256_end(&h, out);
}

pkv_status pkv__digest_block(const EVP_MD *md,
                             const uint8_t parent[PKV__DIGEST_BYTES],
                             const int32_t *tokens, uint32_t block_size,
                             uint8_t out[PKV__DIGEST_BYTES])
{
    pkv__sha256 h;
    pkv__sha256_begin(&h, md);
    pkv__sha256_add(&h, parent, PKV__DIGEST_BYTES);
    /* The ids little-endian, 64 to a call: a call per id would cost
     * more than the hash. */
    uint8_t t[256];
    for (uint32_t i = 0; i < block_size; i += sizeof t / 4) {
        uint32_t n = block_size - i < sizeof t / 4 ? block_size - i
                                                   : (uint32_t)(sizeof t / 4);
        for (uint32_t k = 0; k < n; k++)
            pkv__put_u32(t + 4 * k, (uint32_t)tokens[i + k]);
        pkv__sha256_add(&h, t, 4 * (size_t)n);
    }
    return pkv__sha256_end(&h, out);
}

void pkv__digest_hex(const uint8_t *bytes, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * n] = '\0';
}
