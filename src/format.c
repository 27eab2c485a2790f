/* SPDX-License-Identifier: MIT */
/* What pkv's file formats share (format.h). */
#include "format.h"

#include "seal.h"
#include "wire.h"

#include <stdio.h>
#include <string.h>

uint32_t pkv__format_header_bytes(const pkv__format *f, const pkv__groups *g)
{
    return pkv__groups_plain(g) ? f->header_bytes
                                : f->header_bytes + f->layer_bytes *
                                                        g->num_layers;
}

size_t pkv__format_seal_bytes(const pkv__seal *seal)
{
    return seal != NULL ? PKV__SEAL_HEADER_BYTES : 0;
}

/* Layer l's place in a layer table of f (group, arena, window). */
static void put_layer(const pkv__format *f, uint8_t *at, const pkv__groups *g,
                      uint32_t l)
{
    pkv__put_u32(at, g->layer_group[l]);
    pkv__put_u32(at + 4, g->layer_arena[l]);
    if (f->layer_bytes == 12)
        pkv__put_u32(at + 8, pkv__groups_window(g, g->layer_group[l]));
}

void pkv__format_begin(const pkv__format *f, uint8_t *out,
                       const pkv__backend_config *c, const pkv__groups *g)
{
    int plain = pkv__groups_plain(g);
    pkv__wire_put_header(out, pkv__format_header_bytes(f, g), f->magic,
                         plain ? f->version : f->version + 1, c);
    for (uint32_t l = 0; !plain && l < g->num_layers; l++)
        put_layer(f, out + f->header_bytes + (size_t)l * f->layer_bytes, g,
                  l);
}

pkv_status pkv__format_finish(const pkv__format *f, pkv__seal *seal,
                              uint8_t *buffer, size_t content)
{
    uint8_t *out = buffer + pkv__format_seal_bytes(seal);
    pkv__put_u64(out + f->at_checksum,
                 pkv__checksum(out, content, f->at_checksum));
    return seal != NULL ? pkv__seal_close(seal, buffer, content, NULL, 0)
                        : PKV_OK;
}

pkv_status pkv__format_open(const pkv__format *f, pkv__seal *seal,
                            const pkv__allocator *alloc, const void *data,
                            size_t size, uint32_t num_layers,
                            uint64_t (*length)(const uint8_t *d,
                                               uint32_t header_bytes),
                            pkv__format_view *v, char *why, size_t why_size)
{
    memset(v, 0, sizeof *v);
    pkv_status st = pkv__seal_unwrap(seal, alloc, data, size, f->magic,
                                     &v->d, &v->size, &v->owned, why,
                                     why_size);
    if (st != PKV_OK)
        return st;
    /* The plain version, or the next one with its layer table (of as
     * many layers as this engine has: another count fails a geometry
     * check). */
    const uint8_t *d = v->d;
    v->layered = v->size >= f->header_bytes && memcmp(d, f->magic, 8) == 0 &&
                 pkv__get_u32(d + PKV__AT_VERSION) == f->version + 1;
    v->header_bytes =
        f->header_bytes + (v->layered ? f->layer_bytes * num_layers : 0);
    st = pkv__wire_check_opening(d, v->size, f->magic,
                                 f->version + (uint32_t)v->layered,
                                 v->header_bytes, f->what, why, why_size);
    uint64_t total = st == PKV_OK ? length(d, v->header_bytes) : 0;
    if (st == PKV_OK && total != v->size) {
        snprintf(why, why_size,
                 "the header says %llu bytes; %zu given (truncated?)",
                 (unsigned long long)total, v->size);
        st = PKV_ERR_INVALID_ARGUMENT;
    }
    if (st == PKV_OK && pkv__checksum(d, v->size, f->at_checksum) !=
                            pkv__get_u64(d + f->at_checksum)) {
        snprintf(why, why_size,
                 "checksum mismatch: the bytes were changed or damaged");
        st = PKV_ERR_INVALID_ARGUMENT;
    }
    if (st != PKV_OK)
        pkv__format_release(v, alloc);
    return st;
}

void pkv__format_release(pkv__format_view *v, const pkv__allocator *alloc)
{
    pkv__free(alloc, v->owned, v->size, 1);
    memset(v, 0, sizeof *v);
}

int pkv__format_same_layout(const pkv__format *f, const pkv__format_view *v,
                            const pkv__groups *g, uint32_t *layer)
{
    *layer = g->num_layers;
    if (v->layered == pkv__groups_plain(g))
        return 0;
    uint8_t mine[12];
    for (uint32_t l = 0; v->layered && l < g->num_layers; l++) {
        put_layer(f, mine, g, l);
        if (memcmp(v->d + f->header_bytes + (size_t)l * f->layer_bytes,
                   mine, f->layer_bytes) != 0) {
            *layer = l;
            return 0;
        }
    }
    return 1;
}

int pkv__format_same_geometry(const pkv__format_view *v,
                              const pkv__backend_config *c, int layout,
                              char *why, size_t why_size)
{
    uint8_t mine[PKV__AT_FORMAT_FIELDS];
    static const uint8_t none[8] = {0};
    pkv__wire_put_header(mine, sizeof mine, none, 0, c);
    const uint8_t *d = v->d;
    int same =
        layout ? memcmp(d + PKV__AT_KV_DTYPE, mine + PKV__AT_KV_DTYPE,
                        PKV__AT_FORMAT_FIELDS - PKV__AT_KV_DTYPE) == 0
               : memcmp(d + PKV__AT_KV_DTYPE, mine + PKV__AT_KV_DTYPE, 4) ==
                         0 &&
                     memcmp(d + PKV__AT_NUM_LAYERS, mine + PKV__AT_NUM_LAYERS,
                            PKV__AT_BLOCK_SIZE - PKV__AT_NUM_LAYERS) == 0;
    if (!same) {
        /* kv_dtype, quant words, layers, kv heads, head_dim, block size */
        unsigned f[2][7];
        for (int i = 0; i < 7; i++) {
            f[0][i] = (unsigned)pkv__get_u32(d + PKV__AT_KV_DTYPE + 4 * i);
            f[1][i] = (unsigned)pkv__get_u32(mine + PKV__AT_KV_DTYPE + 4 * i);
        }
        snprintf(why, why_size,
                 "made with kv_dtype %u, quant %#x/%#x, %u layers, %u kv "
                 "heads, head_dim %u, block_size %u; this engine has %u, "
                 "%#x/%#x, %u, %u, %u, %u",
                 f[0][0], f[0][1], f[0][2], f[0][3], f[0][4], f[0][5],
                 f[0][6], f[1][0], f[1][1], f[1][2], f[1][3], f[1][4],
                 f[1][5], f[1][6]);
    }
    return same;
}
