/* SPDX-License-Identifier: MIT */
/*
 * Portable bytes for pkv's export formats (seq_export.c, prefix_file.c):
 * little-endian fields whatever the host's order, and the checksum that
 * guards them.
 */
#ifndef PKV_WIRE_H
#define PKV_WIRE_H

#include "backend.h"

#include <stddef.h>
#include <stdint.h>

/* Both formats start alike: 8 bytes of magic, then u32 fields at these
 * offsets. Each format's own fields follow from PKV__AT_FORMAT_FIELDS. */
enum {
    PKV__AT_VERSION = 8,
    PKV__AT_HEADER_BYTES = 12,
    PKV__AT_KV_DTYPE = 16,
    PKV__AT_KEY_QUANT = 20,   /* pkv__wire_quant; 0 for f32 and f16 */
    PKV__AT_VALUE_QUANT = 24, /* pkv__wire_quant; 0 for f32 and f16 */
    PKV__AT_NUM_LAYERS = 28,
    PKV__AT_NUM_KV_HEADS = 32,
    PKV__AT_HEAD_DIM = 36,
    PKV__AT_BLOCK_SIZE = 40,
    PKV__AT_FORMAT_FIELDS = 44
};

/* Zero the header's bytes, then write the magic, version, header size and
 * the geometry of config c. */
void pkv__wire_put_header(uint8_t *h, size_t header_bytes,
                          const uint8_t magic[8], uint32_t version,
                          const pkv__backend_config *c);

/* The header word that names how config c groups its K (kv 0) or V (kv 1)
 * parts: 0 for f32 and f16; else the pkv_quant_group, with a U4 per-token
 * part's group width in bits 16..31 (so U8 words are what they were
 * before U4 existed, and two exports with equal words lay out their blocks
 * alike). */
uint32_t pkv__wire_quant(const pkv__backend_config *c, int kv);

/* Read the two words into c's key_quant, value_quant and u4_group (c's
 * dtype and head_dim given): 1, or 0 when they name no pkv layout. */
int pkv__wire_get_quant(pkv__backend_config *c, uint32_t key_word,
                        uint32_t value_word);

/* The opening of a file of either format, the first check of a load:
 * at least header_bytes, the magic, and this library's version and header
 * size. PKV_OK; else PKV_ERR_INVALID_ARGUMENT (not such a file: `what`
 * names it, e.g. "a pkv sequence export") or PKV_ERR_UNSUPPORTED (another
 * version; an older one is said to be made by an older pkv), with why[]
 * saying which. */
pkv_status pkv__wire_check_opening(const uint8_t *d, size_t size,
                                   const uint8_t magic[8], uint32_t version,
                                   uint32_t header_bytes, const char *what,
                                   char *why, size_t why_size);

void pkv__put_u32(uint8_t *p, uint32_t v);
void pkv__put_u64(uint8_t *p, uint64_t v);
uint32_t pkv__get_u32(const uint8_t *p);
uint64_t pkv__get_u64(const uint8_t *p);

/* A 64-bit checksum of n bytes but the 8 at byte `skip` (where the
 * checksum itself is stored; skip + 8 <= n): xxHash's XXH3, chained over
 * the bytes before and after them, with n. Against accidents only (a
 * deployment key's seal is what stands against a writer who means it);
 * XXH3 runs at about 15x the speed of the serial multiply chain older
 * pkv formats carried (docs/performance.md). */
uint64_t pkv__checksum(const uint8_t *p, size_t n, size_t skip);

#endif
