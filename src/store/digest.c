/* SPDX-License-Identifier: MIT */
/* SHA-256 (FIPS 180-4) and the block key chain of a KV store
 * (digest.h). */
#include "store/digest.h"

#include "wire.h"

#include <string.h>

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
    0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t rotr(uint32_t x, unsigned n)
{
    return (x >> n) | (x << (32 - n));
}

static void compress(uint32_t state[8], const uint8_t block[64])
{
    uint32_t w[64];
    for (unsigned i = 0; i < 16; i++)
        w[i] = (uint32_t)block[4 * i] << 24 |
               (uint32_t)block[4 * i + 1] << 16 |
               (uint32_t)block[4 * i + 2] << 8 | (uint32_t)block[4 * i + 3];
    for (unsigned i = 16; i < 64; i++) {
        uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^
                      (w[i - 15] >> 3);
        uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^
                      (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
    uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
    for (unsigned i = 0; i < 64; i++) {
        uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) +
                      ((e & f) ^ (~e & g)) + K[i] + w[i];
        uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) +
                      ((a & b) ^ (a & c) ^ (b & c));
        h = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
    state[4] += e;
    state[5] += f;
    state[6] += g;
    state[7] += h;
}

void pkv__sha256_init(pkv__sha256 *h)
{
    static const uint32_t IV[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372,
                                   0xa54ff53a, 0x510e527f, 0x9b05688c,
                                   0x1f83d9ab, 0x5be0cd19};
    memcpy(h->state, IV, sizeof IV);
    h->bytes = 0;
}

void pkv__sha256_update(pkv__sha256 *h, const void *data, size_t n)
{
    const uint8_t *p = data;
    size_t used = (size_t)(h->bytes % 64);
    h->bytes += n;
    if (used) {
        size_t take = 64 - used < n ? 64 - used : n;
        memcpy(h->buffer + used, p, take);
        p += take;
        n -= take;
        if (used + take < 64)
            return;
        compress(h->state, h->buffer);
    }
    for (; n >= 64; p += 64, n -= 64)
        compress(h->state, p);
    memcpy(h->buffer, p, n);
}

void pkv__sha256_final(pkv__sha256 *h, uint8_t out[PKV__DIGEST_BYTES])
{
    uint64_t bits = h->bytes * 8;
    size_t used = (size_t)(h->bytes % 64);
    h->buffer[used++] = 0x80;
    if (used > 56) {
        memset(h->buffer + used, 0, 64 - used);
        compress(h->state, h->buffer);
        used = 0;
    }
    memset(h->buffer + used, 0, 56 - used);
    for (unsigned i = 0; i < 8; i++)
        h->buffer[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
    compress(h->state, h->buffer);
    for (unsigned i = 0; i < 8; i++)
        for (unsigned j = 0; j < 4; j++)
            out[4 * i + j] = (uint8_t)(h->state[i] >> (24 - 8 * j));
}

/* Bumped with the value format (value.h): keys of another format never
 * meet this one's. */
static const char ROOT_TAG[16] = "pkv-store-key-1";

void pkv__digest_model(const char *name, uint8_t out[PKV__DIGEST_BYTES])
{
    pkv__sha256 h;
    pkv__sha256_init(&h);
    if (name != NULL)
        pkv__sha256_update(&h, name, strlen(name));
    pkv__sha256_final(&h, out);
}

void pkv__digest_root(const uint8_t model[PKV__DIGEST_BYTES],
                      const pkv__backend_config *c, uint64_t salt,
                      uint8_t out[PKV__DIGEST_BYTES])
{
    static const uint8_t magic[8] = {0};
    uint8_t words[PKV__AT_FORMAT_FIELDS];
    uint8_t salt_bytes[8];
    pkv__wire_put_header(words, sizeof words, magic, 0, c);
    pkv__put_u64(salt_bytes, salt);
    pkv__sha256 h;
    pkv__sha256_init(&h);
    pkv__sha256_update(&h, ROOT_TAG, sizeof ROOT_TAG);
    pkv__sha256_update(&h, model, PKV__DIGEST_BYTES);
    pkv__sha256_update(&h, words + PKV__AT_KV_DTYPE,
                       PKV__AT_FORMAT_FIELDS - PKV__AT_KV_DTYPE);
    pkv__sha256_update(&h, salt_bytes, sizeof salt_bytes);
    /* Hybrid memory: a block holds one group's layers, so engines grouped
     * otherwise name other values (and miss, rather than count the values
     * damaged). Each layer's group and arena; nothing without groups. */
    for (uint32_t l = 0; c->layer_group != NULL && l < c->num_layers; l++) {
        uint8_t place[8];
        pkv__put_u32(place, c->layer_group[l]);
        pkv__put_u32(place + 4, c->layer_arena[l]);
        pkv__sha256_update(&h, place, sizeof place);
    }
    pkv__sha256_final(&h, out);
}

void pkv__digest_block(const uint8_t parent[PKV__DIGEST_BYTES],
                       const int32_t *tokens, uint32_t block_size,
                       uint8_t out[PKV__DIGEST_BYTES])
{
    pkv__sha256 h;
    pkv__sha256_init(&h);
    pkv__sha256_update(&h, parent, PKV__DIGEST_BYTES);
    for (uint32_t i = 0; i < block_size; i++) {
        uint8_t t[4];
        pkv__put_u32(t, (uint32_t)tokens[i]);
        pkv__sha256_update(&h, t, sizeof t);
    }
    pkv__sha256_final(&h, out);
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
