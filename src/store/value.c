/* SPDX-License-Identifier: MIT */
/* A KV store's value for one block: its checksum and its checks (value.h). */
#include "store/value.h"

#include "kv_layout.h"
#include "wire.h"

#include <string.h>

#define HEADER_BYTES 128u
/* Version 2: an XXH3 checksum (wire.h). Bumped with digest.c's ROOT_TAG,
 * so that an older pkv's values are never asked for: misses. */
#define FORMAT_VERSION 2u
const uint8_t pkv__value_magic[8] = {'P', 'K', 'V', 'B', 'L', 'O', 'C', 'K'};

/* Header fields after the common ones (wire.h). */
enum {
    AT_INDEX = PKV__AT_FORMAT_FIELDS, /* u32: the block's place */
    AT_DIGEST = 48,                   /* its key digest */
    AT_PARENT = 80,                   /* its parent's */
    AT_VALUE_BYTES = 112,             /* u64: the whole value */
    AT_CHECKSUM = 120                 /* u64 */
};

size_t pkv__value_kv_offset(const pkv__backend_config *c)
{
    return HEADER_BYTES + (size_t)4 * c->block_size;
}

size_t pkv__value_bytes(const pkv__backend_config *c)
{
    return pkv__value_kv_offset(c) + pkv__backend_swap_block_bytes(c);
}

/* The header a value of these fields has, into h (HEADER_BYTES); its
 * checksum word left zero. */
static void put_header(uint8_t *h, const pkv__backend_config *c,
                       uint32_t index, const uint8_t *digest,
                       const uint8_t *parent)
{
    pkv__wire_put_header(h, HEADER_BYTES, pkv__value_magic, FORMAT_VERSION,
                         c);
    pkv__put_u32(h + AT_INDEX, index);
    memcpy(h + AT_DIGEST, digest, PKV__DIGEST_BYTES);
    memcpy(h + AT_PARENT, parent, PKV__DIGEST_BYTES);
    pkv__put_u64(h + AT_VALUE_BYTES, pkv__value_bytes(c));
}

void pkv__value_begin(uint8_t *value, const pkv__backend_config *c,
                      uint32_t index, const uint8_t digest[PKV__DIGEST_BYTES],
                      const uint8_t parent[PKV__DIGEST_BYTES],
                      const int32_t *tokens)
{
    put_header(value, c, index, digest, parent);
    for (uint32_t t = 0; t < c->block_size; t++)
        pkv__put_u32(value + HEADER_BYTES + 4 * t, (uint32_t)tokens[t]);
}

void pkv__value_put_checksum(uint8_t *value, const pkv__backend_config *c)
{
    pkv__put_u64(value + AT_CHECKSUM,
                 pkv__checksum(value, pkv__value_bytes(c), AT_CHECKSUM));
}

/* Whether n binary16 numbers at p (little-endian) are all finite: four
 * at a time, a lane whose exponent bits are all ones found as a zero lane
 * of (x & exponents) ^ exponents (the haszero trick), no early exit: the
 * scan is on every load's path. */
static int f16_finite(const uint8_t *p, size_t n)
{
    const uint64_t exponents = 0x7c007c007c007c00ull;
    const uint64_t ones = 0x0001000100010001ull;
    const uint64_t highs = 0x8000800080008000ull;
    uint64_t bad = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        uint64_t x;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        memcpy(&x, p + 2 * i, 8);
#else
        x = pkv__get_u64(p + 2 * i); /* little-endian on any host */
#endif
        uint64_t t = (x & exponents) ^ exponents;
        bad |= (t - ones) & ~t & highs;
    }
    for (; i < n; i++)
        bad |= (p[2 * i + 1] & 0x7cu) == 0x7cu;
    return bad == 0;
}

/* Whether n binary32 numbers at p (little-endian) are all finite. */
static int f32_finite(const uint8_t *p, size_t n)
{
    unsigned bad = 0;
    for (size_t i = 0; i < n; i++)
        bad |= (p[4 * i + 3] & 0x7fu) == 0x7fu && (p[4 * i + 2] & 0x80u);
    return !bad;
}

/* Whether a value's KV (every layer's block, as swapped: kv_layout.h) holds
 * only finite numbers: f32/f16 elements, and the f16 lo and scale of
 * every quantized part (any code is a number in range). A host's tensors
 * get the same check before they are appended; a stored value must not
 * get around it. */
static int kv_finite(const uint8_t *kv, const pkv__backend_config *c)
{
    uint32_t bs = c->block_size, d = c->head_dim;
    /* Every arena's: a block holds one group's layers with hybrid
     * memory (backend.h). */
    uint32_t parts = 2 * pkv__backend_num_arenas(c) * c->num_kv_heads;
    for (uint32_t part = 0; part < parts; part++) {
        int value_part = part % 2;
        int pd = value_part ? PKV_LAYOUT_VALUE_DTYPE(c->kv_dtype)
                            : PKV_LAYOUT_KEY_DTYPE(c->kv_dtype);
        int group = value_part ? c->value_quant : c->key_quant;
        uint32_t u4g = c->u4_group != 0 ? c->u4_group : d;
        int ok = pd == PKV_LAYOUT_F32   ? f32_finite(kv, (size_t)bs * d)
                 : pd == PKV_LAYOUT_F16 ? f16_finite(kv, (size_t)bs * d)
                                        : f16_finite(
                                  kv + PKV_LAYOUT_Q_LO_OFFSET(pd, bs, d),
                                  2 * (size_t)PKV_LAYOUT_Q_GROUPS(
                                          pd, group, u4g, bs, d));
        if (!ok)
            return 0;
        kv += PKV_LAYOUT_PART_BYTES(pd, group, u4g, bs, d);
    }
    return 1;
}

enum pkv__value_verdict pkv__value_check(
    const uint8_t *value, uint64_t size, const pkv__backend_config *c,
    uint32_t index, const uint8_t digest[PKV__DIGEST_BYTES],
    const uint8_t parent[PKV__DIGEST_BYTES], const int32_t *tokens,
    int authenticated)
{
    size_t n = pkv__value_bytes(c);
    if (size != n ||
        (!authenticated && pkv__checksum(value, n, AT_CHECKSUM) !=
                               pkv__get_u64(value + AT_CHECKSUM)))
        return PKV__VALUE_DAMAGED;
    /* Everything before the KV but the checksum, as this block's would
     * be: magic, version, geometry, place, names, then the tokens. */
    uint8_t head[HEADER_BYTES];
    put_header(head, c, index, digest, parent);
    if (memcmp(value, head, AT_CHECKSUM) != 0)
        return PKV__VALUE_MISMATCHED;
    for (uint32_t t = 0; t < c->block_size; t++)
        if (pkv__get_u32(value + HEADER_BYTES + 4 * t) != (uint32_t)tokens[t])
            return PKV__VALUE_MISMATCHED;
    if (!kv_finite(value + pkv__value_kv_offset(c), c))
        return PKV__VALUE_DAMAGED;
    return PKV__VALUE_GOOD;
}
