/* SPDX-License-Identifier: MIT */
/* Little-endian fields and the checksum of the export formats (wire.h). */
#include "wire.h"

#include <stdio.h>
#include <string.h>
#include <xxhash.h>

pkv_status pkv__wire_check_opening(const uint8_t *d, size_t size,
                                   const uint8_t magic[8], uint32_t version,
                                   uint32_t header_bytes, const char *what,
                                   char *why, size_t why_size)
{
    if (size < header_bytes || memcmp(d, magic, 8) != 0) {
        snprintf(why, why_size, "%zu bytes are not %s", size, what);
        return PKV_ERR_INVALID_ARGUMENT;
    }
    uint32_t v = pkv__get_u32(d + PKV__AT_VERSION);
    if (v != version ||
        pkv__get_u32(d + PKV__AT_HEADER_BYTES) != header_bytes) {
        snprintf(why, why_size,
                 "format version %u%s; this library reads version %u",
                 (unsigned)v, v < version ? ", made by an older pkv" : "",
                 (unsigned)version);
        return PKV_ERR_UNSUPPORTED;
    }
    return PKV_OK;
}

void pkv__put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

void pkv__put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

uint32_t pkv__get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

uint64_t pkv__get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

uint64_t pkv__checksum(const uint8_t *p, size_t n, size_t skip)
{
    /* The bytes before the field, seeded with the length; then those
     * after it, seeded with that hash: each part changes the result, and
     * neither needs a copy or a streaming state. */
    XXH64_hash_t head = XXH3_64bits_withSeed(p, skip, (XXH64_hash_t)n);
    return XXH3_64bits_withSeed(p + skip + 8, n - skip - 8, head);
}

uint32_t pkv__wire_quant(const pkv__backend_config *c, int kv)
{
    if (!pkv__backend_quantized(c))
        return 0;
    pkv__qformat f = pkv__backend_qformat(c, kv);
    if (f.dtype == PKV_KV_DTYPE_U4 && f.group == PKV_QUANT_GROUP_PER_TOKEN)
        return (uint32_t)f.group | f.u4_group << 16;
    return (uint32_t)f.group;
}

/* Whether word w names a grouping of a part of dtype `dtype`; its U4
 * width in *width (0 when it has none). */
static int quant_word_ok(uint32_t w, int32_t dtype, uint32_t head_dim,
                         uint32_t *width)
{
    uint32_t group = w & 0xffffu;
    *width = w >> 16;
    if (group != PKV_QUANT_GROUP_PER_CHANNEL &&
        group != PKV_QUANT_GROUP_PER_TOKEN)
        return 0;
    if (dtype != PKV_KV_DTYPE_U4 || group != PKV_QUANT_GROUP_PER_TOKEN)
        return *width == 0;
    return pkv__u4_group_ok(*width, head_dim);
}

int pkv__wire_get_quant(pkv__backend_config *c, uint32_t key_word,
                        uint32_t value_word)
{
    uint32_t kw, vw;
    if (!quant_word_ok(key_word, pkv__backend_part_dtype(c, 0), c->head_dim,
                       &kw) ||
        !quant_word_ok(value_word, pkv__backend_part_dtype(c, 1),
                       c->head_dim, &vw) ||
        (kw != 0 && vw != 0 && kw != vw))
        return 0;
    c->key_quant = (int32_t)(key_word & 0xffffu);
    c->value_quant = (int32_t)(value_word & 0xffffu);
    if (kw != 0 || vw != 0)
        c->u4_group = kw != 0 ? kw : vw;
    return 1;
}

void pkv__wire_put_header(uint8_t *h, size_t header_bytes,
                          const uint8_t magic[8], uint32_t version,
                          const pkv__backend_config *c)
{
    memset(h, 0, header_bytes);
    memcpy(h, magic, 8);
    pkv__put_u32(h + PKV__AT_VERSION, version);
    pkv__put_u32(h + PKV__AT_HEADER_BYTES, (uint32_t)header_bytes);
    pkv__put_u32(h + PKV__AT_KV_DTYPE, (uint32_t)c->kv_dtype);
    pkv__put_u32(h + PKV__AT_KEY_QUANT, pkv__wire_quant(c, 0));
    pkv__put_u32(h + PKV__AT_VALUE_QUANT, pkv__wire_quant(c, 1));
    pkv__put_u32(h + PKV__AT_NUM_LAYERS, c->num_layers);
    pkv__put_u32(h + PKV__AT_NUM_KV_HEADS, c->num_kv_heads);
    pkv__put_u32(h + PKV__AT_HEAD_DIM, c->head_dim);
    pkv__put_u32(h + PKV__AT_BLOCK_SIZE, c->block_size);
}
