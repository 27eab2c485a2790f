/* SPDX-License-Identifier: MIT */
/* An example host's KV store through libpkv_redis (store.h). */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include "store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef PKV_EXAMPLE_REDIS
#include <pkv/pkv_redis.h>
#endif

int host_store_open(host_store *s, const char *program, const char *spec,
                    const char *model)
{
    memset(s, 0, sizeof *s);
#ifdef PKV_EXAMPLE_REDIS
    char host[256];
    const char *colon = strrchr(spec, ':');
    char *end = NULL;
    unsigned long port = colon ? strtoul(colon + 1, &end, 10) : 0;
    size_t len = colon ? (size_t)(colon - spec) : 0;
    if (colon == NULL || len == 0 || len >= sizeof host || *end != '\0' ||
        port == 0 || port > 65535) {
        fprintf(stderr, "%s: --store %s: expected HOST:PORT\n", program,
                spec);
        return -1;
    }
    memcpy(host, spec, len);
    host[len] = '\0';
    pkv_redis_params rp;
    pkv_redis_params_init(&rp);
    rp.host = host;
    rp.port = (uint32_t)port;
    s->model = strdup(model);
    if (s->model == NULL) {
        fprintf(stderr, "%s: out of memory\n", program);
        return -1;
    }
    pkv_redis *r = NULL;
    if (pkv_redis_create(&rp, &r) != PKV_OK) {
        fprintf(stderr, "%s: --store %s: %s\n", program, spec,
                pkv_redis_last_error());
        host_store_close(s);
        return -1;
    }
    pkv_store_init(&s->store);
    pkv_redis_store(r, &s->store);
    s->store.model = s->model;
    s->redis = r;
    return 0;
#else
    (void)model;
    fprintf(stderr, "%s: --store %s: built without hiredis (install "
                    "libhiredis-dev and build again)\n",
            program, spec);
    return -1;
#endif
}

int host_store_count_prefix(const host_store *s, const char *const *keys,
                            uint32_t n, uint32_t *held)
{
#ifdef PKV_EXAMPLE_REDIS
    return pkv_redis_count_prefix(s->redis, keys, n, held) == PKV_OK ? 0
                                                                     : -1;
#else
    (void)s;
    (void)keys;
    (void)n;
    *held = 0;
    return -1;
#endif
}

void host_store_close(host_store *s)
{
#ifdef PKV_EXAMPLE_REDIS
    pkv_redis_destroy(s->redis);
#endif
    free(s->model);
    memset(s, 0, sizeof *s);
}

void host_store_print(const pkv_engine *e)
{
    pkv_engine_stats st;
    pkv_engine_stats_init(&st);
    if (pkv_engine_get_stats(e, &st) != PKV_OK)
        return;
    printf("store:            %llu of %llu blocks asked loaded, %llu "
           "saved, %llu failed or late, %llu rejected\n",
           (unsigned long long)st.store_hit_blocks,
           (unsigned long long)st.store_query_blocks,
           (unsigned long long)st.store_saves,
           (unsigned long long)(st.store_load_failures +
                                st.store_save_failures +
                                st.store_timeouts),
           (unsigned long long)(st.store_damaged + st.store_mismatched));
}
