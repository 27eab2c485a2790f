/* SPDX-License-Identifier: MIT */
/*
 * The forgeries of a sealed file (a saved prefix cache, an export) that
 * someone without the deployment key can make (forge.c), for the tests of
 * both formats: the store's values meet the same in test_store.c.
 */
#ifndef PKV_TESTS_FORGE_H
#define PKV_TESTS_FORGE_H

#include "pkv/pkv.h"

#include <stddef.h>
#include <stdint.h>

/* Give n bytes at data to engine e's load of the format. */
typedef pkv_status (*forge_load_fn)(pkv_engine *e, const uint8_t *data,
                                    size_t n);

/* A sealed file and its kin. */
typedef struct forge_set {
    const uint8_t *file; /* sealed under the key */
    size_t size;
    const uint8_t *again; /* the same content sealed again: other salt and
                             nonce, same size */
    const uint8_t *other_key; /* the same content under another key */
    size_t other_key_size;
    const uint8_t *other_format; /* the other format, under the key */
    size_t other_format_size;
    const uint8_t *unsealed; /* the same content without a seal */
    size_t unsealed_size;
} forge_set;

/* The other format's file, from an engine of params p: the export of a
 * sequence of prompt (n tokens) after one step, or the prefix cache after
 * prompt ran to its end (malloc'd, *size bytes). */
uint8_t *forge_export_of(const pkv_engine_params *p, const int32_t *prompt,
                         uint32_t n, size_t *size);
uint8_t *forge_prefix_cache_of(const pkv_engine_params *p,
                               const int32_t *prompt, uint32_t n,
                               size_t *size);

/* Give e's load every forgery of f->file, each of which it must refuse
 * with PKV_ERR_INVALID_ARGUMENT, and leave e's stats as they were: every
 * byte flipped; cut at every length; extended by a byte and by a
 * header's worth; the seal's salt, nonce, tag and whole header each
 * taken from `again` (a seal of the same content); again's content under
 * this header; the file twice over; the file under another key; the
 * other format's sealed file; the unsealed file. Prints how many, after
 * `what` (the format's name). */
void forge_refused(const forge_set *f, forge_load_fn load, pkv_engine *e,
                   const char *what);

#endif
