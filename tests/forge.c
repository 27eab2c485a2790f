/* SPDX-License-Identifier: MIT */
/* The forgeries of a sealed file (forge.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "forge.h"
#include "check_host_cmocka.h"
#include "hash_model.h"
#include "seal.h"

#include <stdlib.h>
#include <string.h>

/* The seal's header (docs/design.md, "Sealing with a deployment key"). */
enum { AT_SALT = 24, AT_NONCE = 36, AT_TAG = 48 };

typedef struct forger {
    forge_load_fn load;
    pkv_engine *e;
    uint32_t tried;
} forger;

static void refused(forger *g, const uint8_t *data, size_t n,
                    const char *what, size_t at)
{
    pkv_status st = g->load(g->e, data, n);
    if (st != PKV_ERR_INVALID_ARGUMENT)
        fail_msg("%s (%zu): status %d, not PKV_ERR_INVALID_ARGUMENT", what,
                 at, (int)st);
    g->tried++;
}

void forge_refused(const forge_set *f, forge_load_fn load, pkv_engine *e,
                   const char *what)
{
    forger g = {load, e, 0};
    pkv_engine_stats before, after;
    pkv_engine_stats_init(&before);
    pkv_engine_stats_init(&after);
    assert_int_equal(pkv_engine_get_stats(e, &before), PKV_OK);
    size_t n = f->size;
    uint8_t *copy = malloc(2 * n + PKV__SEAL_HEADER_BYTES);
    assert_non_null(copy);
    memcpy(copy, f->file, n);
    for (size_t i = 0; i < n; i++) {
        copy[i] ^= (uint8_t)(1u << (i % 8));
        refused(&g, copy, n, "a byte flipped", i);
        copy[i] ^= (uint8_t)(1u << (i % 8));
    }
    /* Cut: each length in a buffer of its own, so that a read past it is
     * the sanitizers'. */
    for (size_t cut = 0; cut < n; cut++) {
        uint8_t *part = malloc(cut > 0 ? cut : 1);
        assert_non_null(part);
        memcpy(part, f->file, cut);
        refused(&g, part, cut, "cut", cut);
        free(part);
    }
    memset(copy + n, 0, PKV__SEAL_HEADER_BYTES);
    refused(&g, copy, n + 1, "extended by a byte", n);
    refused(&g, copy, n + PKV__SEAL_HEADER_BYTES, "extended by 64 bytes", n);
    /* Parts of another seal of the same content. */
    const struct {
        size_t at, len;
        const char *what;
    } fields[] = {{AT_SALT, 12, "another seal's salt"},
                  {AT_NONCE, 12, "another seal's nonce"},
                  {AT_TAG, 16, "another seal's tag"},
                  {0, PKV__SEAL_HEADER_BYTES, "another seal's header"},
                  {PKV__SEAL_HEADER_BYTES, n - PKV__SEAL_HEADER_BYTES,
                   "another seal's content"}};
    assert_memory_not_equal(f->again + AT_SALT, f->file + AT_SALT, 12);
    for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++) {
        memcpy(copy, f->file, n);
        memcpy(copy + fields[k].at, f->again + fields[k].at, fields[k].len);
        refused(&g, copy, n, fields[k].what, fields[k].at);
    }
    memcpy(copy, f->file, n);
    memcpy(copy + n, f->file, n);
    refused(&g, copy, 2 * n, "the file twice", n);
    refused(&g, f->other_key, f->other_key_size, "another key's file", 0);
    refused(&g, f->other_format, f->other_format_size,
            "the other format, sealed under the key", 0);
    refused(&g, f->unsealed, f->unsealed_size, "the unsealed file", 0);
    free(copy);
    assert_int_equal(pkv_engine_get_stats(e, &after), PKV_OK);
    assert_memory_equal(&after, &before, sizeof after);
    print_message("%u forgeries of a %zu-byte sealed %s refused\n",
                  (unsigned)g.tried, n, what);
}

/* n bytes of what fill writes, malloc'd. */
static uint8_t *written(pkv_status (*fill)(pkv_engine *, void *, size_t,
                                           size_t *, pkv_seq_id),
                        pkv_engine *e, pkv_seq_id id, size_t *size)
{
    size_t need = 0;
    assert_int_equal(fill(e, NULL, 0, &need, id), PKV_OK);
    uint8_t *data = malloc(need);
    assert_non_null(data);
    assert_int_equal(fill(e, data, need, size, id), PKV_OK);
    return data;
}

static pkv_status export_into(pkv_engine *e, void *buffer, size_t n,
                              size_t *size, pkv_seq_id id)
{
    return pkv_seq_export(e, id, buffer, n, size);
}

static pkv_status cache_into(pkv_engine *e, void *buffer, size_t n,
                             size_t *size, pkv_seq_id id)
{
    (void)id;
    return pkv_engine_save_prefix_cache(e, buffer, n, size);
}

uint8_t *forge_export_of(const pkv_engine_params *p, const int32_t *prompt,
                         uint32_t n, size_t *size)
{
    ch_host h;
    ch_cmocka_init(&h, p, hm_tolerance(p->kv_dtype));
    pkv_seq_id id = ch_add_prompt(&h, prompt, n, 2, 0, 0);
    ch_step(&h, NULL);
    uint8_t *data = written(export_into, h.engine, id, size);
    ch_run(&h, 200);
    ch_free(&h);
    return data;
}

uint8_t *forge_prefix_cache_of(const pkv_engine_params *p,
                               const int32_t *prompt, uint32_t n,
                               size_t *size)
{
    ch_host h;
    ch_cmocka_init(&h, p, hm_tolerance(p->kv_dtype));
    ch_add_prompt(&h, prompt, n, 2, 0, 0);
    ch_run(&h, 200);
    uint8_t *data = written(cache_into, h.engine, 0, size);
    ch_free(&h);
    return data;
}
