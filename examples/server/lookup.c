/* SPDX-License-Identifier: MIT */
/* pkv-server's prefix lookup (lookup.h). */
#include "lookup.h"

#include "host.h" /* GG_BLOCK_SIZE: the engine's block size */

#include <jansson.h>

#include <stdlib.h>

/* The tokens of the prompt's leading blocks the store holds into
 * *tokens; -1 when the store could not be asked. The key buffers are
 * bounded by the prompt's blocks, which the request's limits bound. */
static int store_prefix(srv_server *s, const int32_t *prompt, uint32_t n,
                        uint32_t *tokens)
{
    /* A load asks at most (n - 1) / block_size blocks: the last token is
     * always computed. */
    uint32_t cap = (n - 1) / GG_BLOCK_SIZE;
    *tokens = 0;
    if (cap == 0)
        return 0;
    char *keys = malloc((size_t)cap * PKV_STORE_KEY_MAX);
    const char **names = malloc((size_t)cap * sizeof *names);
    uint32_t num_keys = 0, held = 0;
    int rc = -1;
    if (keys != NULL && names != NULL &&
        pkv_engine_store_keys(s->engine, prompt, n, 0, keys, cap,
                              &num_keys) == PKV_OK) {
        for (uint32_t i = 0; i < num_keys; i++)
            names[i] = keys + (size_t)i * PKV_STORE_KEY_MAX;
        rc = host_store_count_prefix(s->store, names, num_keys, &held);
    }
    if (rc == 0)
        *tokens = held * GG_BLOCK_SIZE;
    free(names);
    free(keys);
    return rc;
}

char *srv_lookup_answer(srv_server *s, const int32_t *prompt, uint32_t n,
                        srv_error *e)
{
    uint32_t cached = 0, stored = 0;
    /* Salt 0, as the loop adds every request's sequence. */
    if (pkv_engine_lookup_prefix(s->engine, prompt, n, 0, &cached) !=
        PKV_OK) {
        srv_error_set(e, 500, "server_error", NULL, NULL,
                      "the prefix lookup failed: %s", pkv_last_error());
        return NULL;
    }
    int store_failed =
        s->store != NULL && store_prefix(s, prompt, n, &stored) != 0;
    json_t *body = json_pack("{s:I,s:I}", "prompt_tokens", (json_int_t)n,
                             "cached_tokens", (json_int_t)cached);
    if (body != NULL && s->store != NULL)
        json_object_set_new(body, "store_tokens",
                            store_failed ? json_null()
                                         : json_integer(stored));
    char *text = body != NULL ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    pthread_mutex_lock(&s->lock);
    s->figures.lookups++;
    s->figures.lookup_store_failures += (uint64_t)store_failed;
    pthread_mutex_unlock(&s->lock);
    if (text == NULL)
        srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    return text;
}
