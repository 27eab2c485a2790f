/* SPDX-License-Identifier: MIT */
/*
 * How many leading keys of a prompt the server holds (internal.h,
 * pkv_redis_count_prefix): one EXISTS per key, all sent at once
 * (pipelined: one round trip), on the probe lane's connection, by the
 * calling thread under probe_lock; no value moves. The connection is made
 * and kept as the other lanes' are (connection.c: AUTH, SELECT, backoff),
 * and dropped after a failure.
 */
#define _POSIX_C_SOURCE 200809L
#include "internal.h"
#include "io.h"
#include "reply.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The commands: "EXISTS <prefix><key>" for each key, in the protocol's
 * own form, into a new buffer (*size bytes); NULL without memory. */
static char *exists_commands(const pkv_redis *redis, const char *const *keys,
                             uint32_t n, size_t *size)
{
    size_t cap = 0;
    for (uint32_t i = 0; i < n; i++)
        cap += 48 + redis->prefix_len + strlen(keys[i]);
    char *cmd = malloc(cap);
    if (cmd == NULL)
        return NULL;
    size_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        size_t len = redis->prefix_len + strlen(keys[i]);
        at += (size_t)snprintf(cmd + at, cap - at,
                               "*2\r\n$6\r\nEXISTS\r\n$%zu\r\n%s%s\r\n", len,
                               redis->prefix, keys[i]);
    }
    *size = at;
    return cmd;
}

/* The connection failed under the counts (as reply.h says how), or the
 * server refused them (line): named, counted, and a broken connection
 * dropped. */
static void failed(pkv__redis_lane *lane, enum pkv__reply_result how,
                   const char *line)
{
    pkv_redis *redis = lane->redis;
    char why[PKV__REDIS_ERROR_MAX];
    if (how == PKV__REPLY_ERROR)
        snprintf(why, sizeof why, "EXISTS refused: %s", line);
    else
        snprintf(why, sizeof why, "EXISTS: %s",
                 how == PKV__REPLY_TIMEOUT ? "no answer in time"
                 : how == PKV__REPLY_CLOSED
                     ? "the server closed the connection under the command"
                     : "a reply of another shape, or the command could "
                       "not be sent");
    pkv__redis_note(redis, why);
    pthread_mutex_lock(&redis->lock);
    redis->stats.errors++;
    redis->stats.command_closes += (uint64_t)(how == PKV__REPLY_CLOSED);
    pthread_mutex_unlock(&redis->lock);
    if (how != PKV__REPLY_ERROR)
        pkv__redis_disconnect(lane);
}

pkv_status pkv__redis_count(pkv_redis *redis, const char *const *keys,
                            uint32_t n, uint32_t *held)
{
    *held = 0;
    size_t size = 0;
    char *cmd = exists_commands(redis, keys, n, &size);
    if (cmd == NULL)
        return PKV_ERR_OUT_OF_MEMORY;
    pkv__redis_lane *lane = &redis->probe;
    pthread_mutex_lock(&redis->probe_lock);
    pkv_status st = pkv__redis_connect(lane);
    if (st == PKV_OK) {
        pkv__redis_deadline d =
            pkv__redis_deadline_in(PKV__REDIS_COMMAND_TIMEOUTS *
                                       redis->timeout_ms,
                                   redis->timeout_ms);
        int fd = ((redisContext *)lane->ctx)->fd;
        char line[PKV__REDIS_ERROR_MAX / 2] = "";
        enum pkv__reply_result got =
            pkv__redis_send(fd, cmd, size, &d) == 0
                ? pkv__redis_read_exists(fd, n, held, &d, line, sizeof line)
                : PKV__REPLY_BROKEN;
        if (got == PKV__REPLY_VALUES) {
            lane->used_ms = pkv__redis_now_ms();
            pthread_mutex_lock(&redis->lock);
            redis->stats.commands += n;
            redis->connection_error[0] = '\0';
            pthread_mutex_unlock(&redis->lock);
        } else {
            *held = 0;
            failed(lane, got, line);
            st = PKV_ERR_STORE;
        }
    }
    pthread_mutex_unlock(&redis->probe_lock);
    free(cmd);
    return st;
}
