/* SPDX-License-Identifier: MIT */
/*
 * What pkv's two file formats share (seq_export.c, prefix_file.c): the
 * common header (wire.h), a layer table when the layers are grouped, the
 * checksum and, with a deployment key, the seal's envelope (seal.h); a
 * load's first checks, cheapest first.
 */
#ifndef PKV_FORMAT_H
#define PKV_FORMAT_H

#include "alloc.h"
#include "backend.h"
#include "kv/groups.h"

#include <stddef.h>
#include <stdint.h>

struct pkv__seal;

/* One of pkv's file formats (a sequence export, a saved prefix cache):
 * what its writer and its reader share. A file starts with the common
 * header above; one from an engine whose layers are not in the plain
 * layout (hybrid memory's groups: pkv__groups_plain) has the next version
 * and, after the header, a layer table: layer_bytes a layer, its group,
 * its arena and, at 12 bytes, its window. A checksum (pkv__checksum) at
 * at_checksum covers the rest; with a deployment key the whole file sits
 * in the seal's envelope (seal.h). */
typedef struct pkv__format {
    const uint8_t *magic;  /* 8 bytes */
    const char *what;      /* for messages: "a pkv sequence export" */
    uint32_t version;      /* the plain layout's; + 1 with a layer table */
    uint32_t header_bytes; /* the plain layout's, before any table */
    uint32_t layer_bytes;
    uint32_t at_checksum;
} pkv__format;

/* The header's bytes of a file of format f from an engine whose layers
 * are grouped as g (the layer table included). */
uint32_t pkv__format_header_bytes(const pkv__format *f, const pkv__groups *g);

/* Bytes a buffer holds before the file: the seal's envelope's header
 * with a deployment key (seal NULL: none). */
size_t pkv__format_seal_bytes(const struct pkv__seal *seal);

/* Write the header of a file from an engine of config c and groups g at
 * out: the common fields, then the layer table. */
void pkv__format_begin(const pkv__format *f, uint8_t *out,
                       const pkv__backend_config *c, const pkv__groups *g);

/* Finish a file of `content` bytes at buffer + pkv__format_seal_bytes:
 * its checksum, then with a seal the envelope around it. PKV_OK or the
 * seal's failure. */
pkv_status pkv__format_finish(const pkv__format *f, struct pkv__seal *seal,
                              uint8_t *buffer, size_t content);

/* A file a load opened (pkv__format_open). */
typedef struct pkv__format_view {
    const uint8_t *d; /* the file, out of the seal's envelope */
    size_t size;
    int layered;           /* the next version: a layer table follows */
    uint32_t header_bytes; /* the layer table included */
    uint8_t *owned;        /* what opening the seal allocated, or NULL */
} pkv__format_view;

/* Open `size` bytes of a file of format f for an engine of num_layers
 * layers: out of the seal's envelope (an engine without a seal refuses
 * sealed bytes), then the checks every load makes first, cheapest first:
 * the header's size and the magic, one of the format's two versions with
 * its header's size, the length length(d, header_bytes) says, the
 * checksum. PKV_OK with *v set (pkv__format_release frees it); else
 * PKV_ERR_INVALID_ARGUMENT (not such a file, damaged, cut short),
 * PKV_ERR_UNSUPPORTED (another version: an older one is said to be made
 * by an older pkv; sealed bytes and no seal) or PKV_ERR_OUT_OF_MEMORY,
 * why[] saying which. */
pkv_status pkv__format_open(const pkv__format *f, struct pkv__seal *seal,
                            const pkv__allocator *alloc, const void *data,
                            size_t size, uint32_t num_layers,
                            uint64_t (*length)(const uint8_t *d,
                                               uint32_t header_bytes),
                            pkv__format_view *v, char *why,
                            size_t why_size);
void pkv__format_release(pkv__format_view *v, const pkv__allocator *alloc);

/* Whether the opened file's layers are grouped as g's: both in the
 * plain layout, or both with the same layer table (group, arena and, in
 * a 12-byte table, window). When not, *layer is the first layer placed
 * otherwise, or g's layer count when one of the two is plain. */
int pkv__format_same_layout(const pkv__format *f, const pkv__format_view *v,
                            const pkv__groups *g, uint32_t *layer);

/* Whether the opened file's geometry is config c's: kv_dtype, layers,
 * kv heads and head_dim, and with `layout` set the quantization groups
 * and block size too. When not, why[] says both. */
int pkv__format_same_geometry(const pkv__format_view *v,
                              const pkv__backend_config *c, int layout,
                              char *why, size_t why_size);

#endif
