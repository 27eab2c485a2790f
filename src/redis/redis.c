/* SPDX-License-Identifier: MIT */
/*
 * The public functions of libpkv_redis (pkv_redis.h): params, create and
 * destroy, the pkv_store it fills in, its stats and its thread-local
 * message. It does not link libpkv, so it keeps its own message and
 * status names.
 */
#define _POSIX_C_SOURCE 200809L /* strnlen */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#if defined(__GNUC__)
#define PKV__REDIS_PRINTF(fmt_index, first_arg) \
    __attribute__((format(printf, fmt_index, first_arg)))
#else
#define PKV__REDIS_PRINTF(fmt_index, first_arg)
#endif

static _Thread_local char last_error[PKV__REDIS_ERROR_MAX];

const char *pkv_redis_last_error(void)
{
    return last_error;
}

static const char *status_name(pkv_status status)
{
    switch (status) {
#define PKV__REDIS_NAME_CASE(name, value, message) \
    case name:                                     \
        return #name;
        PKV_STATUS_LIST(PKV__REDIS_NAME_CASE)
#undef PKV__REDIS_NAME_CASE
    }
    return "PKV_UNKNOWN_STATUS";
}

/* Set this thread's message, "PKV_ERR_X: text" as libpkv's, and return
 * status. */
static pkv_status fail(pkv_status status, const char *fmt, ...)
    PKV__REDIS_PRINTF(2, 3);

static pkv_status fail(pkv_status status, const char *fmt, ...)
{
    int n = snprintf(last_error, sizeof last_error, "%s: ",
                     status_name(status));
    if (n > 0 && (size_t)n < sizeof last_error) {
        va_list args;
        va_start(args, fmt);
        vsnprintf(last_error + n, sizeof last_error - (size_t)n, fmt, args);
        va_end(args);
    }
    return status;
}

pkv_status pkv_redis_params_init(pkv_redis_params *params)
{
    if (params == NULL)
        return fail(PKV_ERR_INVALID_ARGUMENT, "params is NULL");
    memset(params, 0, sizeof *params);
    params->struct_size = sizeof *params;
    params->port = 6379;
    params->host = "127.0.0.1";
    params->timeout_ms = 500;
    params->retry_ms = 100;
    return PKV_OK;
}

/* Whether s (NULL: none) is longer than max bytes, read no further. */
static int too_long(const char *s, size_t max)
{
    return s != NULL && strnlen(s, max + 1) > max;
}

/* The fields of in that its struct_size covers, over the defaults. */
static pkv_status read_params(const pkv_redis_params *in,
                              pkv_redis_params *p)
{
    char why[128];
    pkv_redis_params_init(p);
    if (pkv__struct_read(p, in, in->struct_size, PKV__REDIS_PARAMS_MIN_SIZE,
                         sizeof *p, "params", "pkv_redis_params_init", why,
                         sizeof why))
        return fail(PKV_ERR_STRUCT_SIZE, "%s", why);
    size_t sun_path = sizeof(((struct sockaddr_un *)0)->sun_path);
    if (p->unix_path != NULL && strnlen(p->unix_path, sun_path) >= sun_path)
        return fail(PKV_ERR_INVALID_ARGUMENT,
                    "unix_path is longer than %zu bytes", sun_path - 1);
    if (p->unix_path == NULL && p->host == NULL)
        return fail(PKV_ERR_INVALID_ARGUMENT, "no host and no unix_path");
    if (p->unix_path == NULL && (p->port == 0 || p->port > 65535))
        return fail(PKV_ERR_INVALID_ARGUMENT, "port %u is not 1..65535",
                    (unsigned)p->port);
    if (too_long(p->key_prefix, PKV__REDIS_PREFIX_MAX) ||
        too_long(p->username, PKV__REDIS_USERNAME_MAX) ||
        too_long(p->password, PKV__REDIS_PASSWORD_MAX))
        return fail(PKV_ERR_INVALID_ARGUMENT,
                    "key_prefix, username or password is longer than %u, "
                    "%u or %u bytes",
                    PKV__REDIS_PREFIX_MAX, PKV__REDIS_USERNAME_MAX,
                    PKV__REDIS_PASSWORD_MAX);
    /* 0 would be no timeout at all: an operation, and destroy, could wait
     * for ever on a hung server. */
    if (p->timeout_ms == 0 || p->timeout_ms > PKV__REDIS_TIME_MAX_MS ||
        p->retry_ms > PKV__REDIS_TIME_MAX_MS)
        return fail(PKV_ERR_INVALID_ARGUMENT,
                    "timeout_ms is %u and retry_ms %u: timeout_ms must be "
                    "1 to %u, retry_ms at most %u",
                    (unsigned)p->timeout_ms, (unsigned)p->retry_ms,
                    PKV__REDIS_TIME_MAX_MS, PKV__REDIS_TIME_MAX_MS);
    if (p->reserved0 != 0 || p->reserved1 != 0)
        return fail(PKV_ERR_INVALID_ARGUMENT,
                    "reserved0 or reserved1 is not 0");
    /* AUTH user alone is not a command: the user meant a password. */
    if (p->username != NULL && p->password == NULL)
        return fail(PKV_ERR_INVALID_ARGUMENT,
                    "a username needs a password");
    return PKV_OK;
}

pkv_status pkv_redis_create(const pkv_redis_params *params, pkv_redis **out)
{
    if (out != NULL)
        *out = NULL;
    if (params == NULL || out == NULL)
        return fail(PKV_ERR_INVALID_ARGUMENT, "params or out is NULL");
    pkv_redis_params p;
    pkv_status st = read_params(params, &p);
    if (st != PKV_OK)
        return st;
    pkv_redis *redis = NULL;
    const char *what;
    st = pkv__redis_connector_new(&p, &redis, &what);
    if (st != PKV_OK)
        return fail(st, "%s", what);
    int rc = pkv__redis_worker_start(redis);
    if (rc != 0) {
        pkv__redis_connector_free(redis);
        return fail(PKV_ERR_STORE, "cannot start a worker thread: %s",
                    strerror(rc));
    }
    *out = redis;
    return PKV_OK;
}

void pkv_redis_destroy(pkv_redis *redis)
{
    if (redis == NULL)
        return;
    /* Each lane finishes the op it runs (at once if it was sending or
     * receiving: the socket is shut down); queued ones are never sent. */
    pkv__redis_worker_stop(redis);
    /* No count runs (destroy is not called with another public call). */
    pkv__redis_disconnect(&redis->probe);
    pthread_mutex_lock(&redis->lock);
    uint32_t engines = redis->engines;
    redis->closed = engines > 0;
    pthread_mutex_unlock(&redis->lock);
    if (engines == 0) {
        pkv__redis_connector_free(redis);
        return;
    }
    /* An engine still holds the store: freeing now would leave it calling
     * into freed memory. As SQLite's sqlite3_close_v2, the connector
     * stays, closed (loads and saves fail at once), until the last
     * engine's pkv_engine_destroy detaches. destroy returns nothing, so
     * the misuse is named on this thread, and it costs no memory. */
    fail(PKV_ERR_BAD_STATE,
         "pkv_redis_destroy: %u engine(s) still use this connector: it is "
         "closed now and freed when the last of them is destroyed "
         "(destroy engines before their connector)",
         (unsigned)engines);
}

pkv_status pkv_redis_store(pkv_redis *redis, pkv_store *store)
{
    if (redis == NULL || store == NULL)
        return fail(PKV_ERR_INVALID_ARGUMENT, "redis or store is NULL");
    if (store->struct_size < PKV__END_OF(pkv_store, cancel))
        return fail(PKV_ERR_STRUCT_SIZE,
                    "store->struct_size is %u: call pkv_store_init first",
                    (unsigned)store->struct_size);
    pthread_mutex_lock(&redis->lock);
    int given = redis->store_given;
    redis->store_given = 1;
    pthread_mutex_unlock(&redis->lock);
    if (given)
        return fail(PKV_ERR_BAD_STATE,
                    "this connector already serves an engine's store: "
                    "create one connector per engine");
    store->user = redis;
    store->load = pkv__redis_load;
    store->save = pkv__redis_save;
    store->poll = pkv__redis_poll;
    store->cancel = pkv__redis_cancel;
    /* A store from a pkv.h before attach and detach has no room for them
     * (and its engine would not call them). */
    if (store->struct_size >= PKV__END_OF(pkv_store, detach)) {
        store->attach = pkv__redis_attach;
        store->detach = pkv__redis_detach;
    }
    return PKV_OK;
}

pkv_status pkv_redis_stats_init(pkv_redis_stats *stats)
{
    if (stats == NULL)
        return fail(PKV_ERR_INVALID_ARGUMENT, "stats is NULL");
    memset(stats, 0, sizeof *stats);
    stats->struct_size = sizeof *stats;
    return PKV_OK;
}

pkv_status pkv_redis_get_stats(const pkv_redis *redis, pkv_redis_stats *stats)
{
    if (redis == NULL || stats == NULL)
        return fail(PKV_ERR_INVALID_ARGUMENT, "redis or stats is NULL");
    char why[128];
    if (pkv__struct_size_bad(stats->struct_size, PKV__REDIS_STATS_MIN_SIZE,
                             sizeof *stats, "stats", "pkv_redis_stats_init",
                             why, sizeof why))
        return fail(PKV_ERR_STRUCT_SIZE, "%s", why);
    /* The lock is the one mutable part of a const connector. */
    pkv_redis *r = (pkv_redis *)redis;
    pthread_mutex_lock(&r->lock);
    pkv_redis_stats s = r->stats;
    pthread_mutex_unlock(&r->lock);
    s.struct_size = stats->struct_size;
    memcpy(stats, &s, stats->struct_size);
    return PKV_OK;
}

pkv_status pkv_redis_connection_error(const pkv_redis *redis, char *buffer,
                                      size_t size)
{
    if (redis == NULL || buffer == NULL || size == 0)
        return fail(PKV_ERR_INVALID_ARGUMENT,
                    "redis or buffer is NULL, or size is 0");
    /* The lock is the one mutable part of a const connector. */
    pkv_redis *r = (pkv_redis *)redis;
    pthread_mutex_lock(&r->lock);
    snprintf(buffer, size, "%s", r->connection_error);
    pthread_mutex_unlock(&r->lock);
    return PKV_OK;
}

pkv_status pkv_redis_count_prefix(pkv_redis *redis, const char *const *keys,
                                  uint32_t num_keys, uint32_t *num_held)
{
    if (num_held != NULL)
        *num_held = 0;
    if (redis == NULL || num_held == NULL || (keys == NULL && num_keys > 0))
        return fail(PKV_ERR_INVALID_ARGUMENT, "%s is NULL",
                    redis == NULL      ? "redis"
                    : num_held == NULL ? "num_held"
                                       : "keys");
    if (num_keys > PKV__REDIS_COUNT_MAX)
        return fail(PKV_ERR_INVALID_ARGUMENT, "%u keys; at most %u",
                    (unsigned)num_keys, (unsigned)PKV__REDIS_COUNT_MAX);
    for (uint32_t i = 0; i < num_keys; i++)
        if (keys[i] == NULL || keys[i][0] == '\0' ||
            strnlen(keys[i], PKV_STORE_KEY_MAX) >= PKV_STORE_KEY_MAX)
            return fail(PKV_ERR_INVALID_ARGUMENT,
                        "keys[%u] is NULL, empty or longer than %u bytes",
                        (unsigned)i, (unsigned)(PKV_STORE_KEY_MAX - 1));
    if (num_keys == 0)
        return PKV_OK;
    pkv_status st = pkv__redis_count(redis, keys, num_keys, num_held);
    if (st == PKV_ERR_STORE) {
        char why[PKV__REDIS_ERROR_MAX];
        pthread_mutex_lock(&redis->lock);
        snprintf(why, sizeof why, "%s", redis->connection_error);
        pthread_mutex_unlock(&redis->lock);
        return fail(st, "count of %u keys: %s", (unsigned)num_keys, why);
    }
    if (st != PKV_OK)
        return fail(st, "count of %u keys: no memory for the command",
                    (unsigned)num_keys);
    return PKV_OK;
}
