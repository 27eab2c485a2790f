/* SPDX-License-Identifier: MIT */
/*
 * The connector object's memory (internal.h): made from checked params
 * (strings copied, lock and condition ready, no thread yet) and freed
 * (queues, buffers, the password's copy wiped). Below the public
 * functions (redis.c) and the engine's callbacks (ops.c), both of which
 * free a connector: whichever comes last of pkv_redis_destroy and the
 * last engine's detach.
 */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void pkv__redis_wipe(void *p, size_t n)
{
    volatile unsigned char *v = p;
    for (size_t i = 0; i < n; i++)
        v[i] = 0;
}

static void free_memory(pkv_redis *redis)
{
    if (redis->password != NULL)
        pkv__redis_wipe(redis->password, strlen(redis->password));
    free(redis->password);
    free(redis->username);
    free(redis->host);
    free(redis->unix_path);
    for (int k = 0; k < 2; k++) {
        free(redis->lanes[k].staging);
        free(redis->lanes[k].read_buffer);
        free(redis->lanes[k].staged_sizes);
    }
    free(redis);
}

pkv_status pkv__redis_connector_new(const pkv_redis_params *p,
                                    pkv_redis **out, const char **what)
{
    *what = "no memory for the connector";
    pkv_redis *redis = calloc(1, sizeof *redis);
    if (redis == NULL)
        return PKV_ERR_OUT_OF_MEMORY;
    if (p->unix_path != NULL)
        redis->unix_path = strdup(p->unix_path);
    else
        redis->host = strdup(p->host);
    if (p->username != NULL)
        redis->username = strdup(p->username);
    if (p->password != NULL)
        redis->password = strdup(p->password);
    if ((redis->unix_path == NULL && redis->host == NULL) ||
        (p->username != NULL && redis->username == NULL) ||
        (p->password != NULL && redis->password == NULL)) {
        free_memory(redis);
        return PKV_ERR_OUT_OF_MEMORY;
    }
    redis->port = p->port;
    redis->timeout_ms = p->timeout_ms;
    redis->retry_ms = p->retry_ms;
    if (p->key_prefix != NULL) {
        redis->prefix_len = strlen(p->key_prefix);
        memcpy(redis->prefix, p->key_prefix, redis->prefix_len);
    }
    if (p->ttl_seconds > 0)
        snprintf(redis->ttl, sizeof redis->ttl, "%u",
                 (unsigned)p->ttl_seconds);
    if (p->database > 0)
        snprintf(redis->database, sizeof redis->database, "%u",
                 (unsigned)p->database);
    for (int k = 0; k <= PKV__REDIS_PROBE; k++) {
        pkv__redis_lane *lane =
            k == PKV__REDIS_PROBE ? &redis->probe : &redis->lanes[k];
        lane->redis = redis;
        lane->kind = k;
        lane->fd = -1;
        /* Differs between lanes, connectors and processes: their retries
         * spread. */
        lane->jitter = ((uint64_t)(uintptr_t)lane ^ (uint64_t)time(NULL)) *
                           0x9e3779b97f4a7c15ull |
                       1u;
    }
    redis->stats.struct_size = sizeof redis->stats;
    if (pthread_mutex_init(&redis->lock, NULL) != 0) {
        free_memory(redis);
        *what = "pthread_mutex_init failed";
        return PKV_ERR_OUT_OF_MEMORY;
    }
    if (pthread_mutex_init(&redis->probe_lock, NULL) != 0) {
        pthread_mutex_destroy(&redis->lock);
        free_memory(redis);
        *what = "pthread_mutex_init failed";
        return PKV_ERR_OUT_OF_MEMORY;
    }
    for (int k = 0; k < 2; k++) {
        if (pthread_cond_init(&redis->lanes[k].wake, NULL) != 0) {
            if (k > 0)
                pthread_cond_destroy(&redis->lanes[0].wake);
            pthread_mutex_destroy(&redis->probe_lock);
            pthread_mutex_destroy(&redis->lock);
            free_memory(redis);
            *what = "pthread_cond_init failed";
            return PKV_ERR_OUT_OF_MEMORY;
        }
    }
    *out = redis;
    return PKV_OK;
}

void pkv__redis_connector_free(pkv_redis *redis)
{
    pkv__redis_list_free(&redis->loads);
    pkv__redis_list_free(&redis->saves);
    pkv__redis_list_free(&redis->done);
    for (int k = 0; k < 2; k++)
        pthread_cond_destroy(&redis->lanes[k].wake);
    pthread_mutex_destroy(&redis->probe_lock);
    pthread_mutex_destroy(&redis->lock);
    free_memory(redis);
}
