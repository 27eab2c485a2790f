/* SPDX-License-Identifier: MIT */
/*
 * A lane's connection (internal.h): made through hiredis (connect with a
 * timeout, TCP keepalive), handshaken (AUTH and SELECT as the params ask,
 * before any other command, so that a reconnect is as authenticated as
 * the first connection), checked before each command (a connection the
 * server closed while idle is replaced at once, not failed), dropped
 * after a failure.
 *
 * While attempts fail, each waits longer: retry_ms, doubled per failed
 * attempt up to PKV__REDIS_BACKOFF_MAX_MS, each wait drawn from 75-125%
 * of that (connectors restarted together do not retry in step). An
 * operation that comes during a wait fails at once instead of waiting,
 * unless the other lane has connected since (the server is back). A
 * refused AUTH or SELECT fails the attempt like a server that is down,
 * and its reason is kept for pkv_redis_connection_error.
 */
#define _POSIX_C_SOURCE 200809L
#include "internal.h"
#include "io.h"
#include "reply.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

void pkv__redis_note(pkv_redis *redis, const char *why)
{
    /* Every line a server sent is checked: one that echoes what it was
     * sent is not quoted. */
    const char *text = why;
    if (redis->password != NULL && redis->password[0] != '\0' &&
        strstr(why, redis->password) != NULL)
        text = "(not quoted: the server's reply holds the password)";
    pthread_mutex_lock(&redis->lock);
    snprintf(redis->connection_error, sizeof redis->connection_error, "%s",
             text);
    pthread_mutex_unlock(&redis->lock);
}

/* The wait after a failed attempt. */
static uint64_t backoff_ms(pkv__redis_lane *lane)
{
    const pkv_redis *redis = lane->redis;
    uint64_t cap = redis->retry_ms > PKV__REDIS_BACKOFF_MAX_MS
                       ? redis->retry_ms
                       : PKV__REDIS_BACKOFF_MAX_MS;
    uint64_t wait = redis->retry_ms;
    for (uint32_t i = 1; i < lane->failed_attempts && wait < cap; i++)
        wait *= 2;
    if (wait > cap)
        wait = cap;
    uint64_t x = lane->jitter; /* xorshift64 */
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    lane->jitter = x;
    return wait * (75 + x % 51) / 100;
}

void pkv__redis_disconnect(pkv__redis_lane *lane)
{
    if (lane->ctx == NULL)
        return;
    pkv_redis *redis = lane->redis;
    pthread_mutex_lock(&redis->lock);
    lane->fd = -1;
    redis->stats.connected--;
    pthread_mutex_unlock(&redis->lock);
    redisFree(lane->ctx);
    lane->ctx = NULL;
    lane->last_attempt_ms = pkv__redis_now_ms();
    lane->wait_ms = 0; /* the next operation reconnects at once */
}

/* A connection with timeout_ms on connect, or NULL with why[] saying
 * why. Sends and receives are bounded by each command's deadline (io.h),
 * not by socket timeouts. */
static redisContext *open_context(const pkv_redis *redis, char *why,
                                  size_t why_size)
{
    struct timeval tv;
    tv.tv_sec = (time_t)(redis->timeout_ms / 1000u);
    tv.tv_usec = (suseconds_t)(redis->timeout_ms % 1000u * 1000u);
    redisContext *c = redis->unix_path != NULL
                          ? redisConnectUnixWithTimeout(redis->unix_path, tv)
                          : redisConnectWithTimeout(redis->host,
                                                    (int)redis->port, tv);
    if (c != NULL && c->err != 0) {
        if (redis->unix_path != NULL)
            snprintf(why, why_size, "cannot connect to %s: %s",
                     redis->unix_path, c->errstr);
        else
            snprintf(why, why_size, "cannot connect to %s:%u: %s",
                     redis->host, (unsigned)redis->port, c->errstr);
        redisFree(c);
        return NULL;
    }
    if (c == NULL)
        snprintf(why, why_size, "no memory for a connection");
    /* A unix socket has no keepalive and needs none. */
    if (c != NULL && redis->unix_path == NULL)
        redisEnableKeepAlive(c);
    return c;
}

/* Whether the idle connection is still in step: no byte and no EOF
 * waiting (a reply can only come after a command). */
static int idle_connection_ok(const redisContext *c)
{
    char byte;
    ssize_t got = recv(c->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK ||
                       errno == EINTR);
}

/* Append to cmd (at *at, cap bytes) one bulk string of a command in the
 * protocol's own form: "$<n>\r\n<bytes>\r\n". 0, or -1 if it does not
 * fit. */
static int put_bulk(char *cmd, size_t cap, size_t *at, const char *s)
{
    size_t n = strlen(s);
    int head = snprintf(cmd + *at, cap - *at, "$%zu\r\n", n);
    if (head < 0 || (size_t)head + n + 2 >= cap - *at)
        return -1;
    *at += (size_t)head;
    memcpy(cmd + *at, s, n);
    memcpy(cmd + *at + n, "\r\n", 2);
    *at += n + 2;
    return 0;
}

/* Send the argc strings of argv as one command on fd and read its status
 * reply, both by deadline d. The command is written by the lane itself,
 * not through hiredis, whose output buffer would leave the password in
 * freed memory; the stack copy is wiped. 0 for +OK; 1 when the server
 * refused it (why[]: the command and its error line); -1 when the
 * connection failed. */
static int handshake_command(const pkv_redis *redis, int fd,
                             const char *const *argv, int argc,
                             const pkv__redis_deadline *d, char *why,
                             size_t why_size)
{
    /* AUTH, the longest: its name, a username and a password, and their
     * lengths' lines. */
    char cmd[PKV__REDIS_USERNAME_MAX + PKV__REDIS_PASSWORD_MAX + 128];
    size_t at = (size_t)snprintf(cmd, sizeof cmd, "*%d\r\n", argc);
    int ok = 1;
    for (int i = 0; i < argc && ok; i++)
        ok = put_bulk(cmd, sizeof cmd, &at, argv[i]) == 0;
    ok = ok && pkv__redis_send(fd, cmd, at, d) == 0;
    pkv__redis_wipe(cmd, sizeof cmd);
    if (!ok) {
        snprintf(why, why_size, "%s: the connection failed", argv[0]);
        return -1;
    }
    char line[PKV__REDIS_ERROR_MAX / 2];
    enum pkv__reply_result got =
        pkv__redis_read_status(fd, d, line, sizeof line);
    if (got == PKV__REPLY_VALUES)
        return 0;
    if (got != PKV__REPLY_ERROR) {
        snprintf(why, why_size,
                 "%s: no reply of the expected shape within timeout_ms",
                 argv[0]);
        return -1;
    }
    /* A server that echoes what it was sent is not quoted. */
    if (redis->password != NULL && redis->password[0] != '\0' &&
        strstr(line, redis->password) != NULL)
        snprintf(line, sizeof line, "(reply not quoted: it holds the "
                                    "password)");
    snprintf(why, why_size, "%s refused: %s", argv[0], line);
    pkv__redis_wipe(line, sizeof line);
    return 1;
}

/* AUTH and SELECT on a new connection, as the params ask, before any
 * other command, within one command's deadline. 0, 1 (refused) or -1
 * (connection failed), as handshake_command. */
static int handshake(const pkv_redis *redis, int fd, char *why,
                     size_t why_size)
{
    pkv__redis_deadline d = pkv__redis_deadline_in(
        PKV__REDIS_COMMAND_TIMEOUTS * redis->timeout_ms, redis->timeout_ms);
    int rc = 0;
    if (redis->password != NULL) {
        const char *argv[3] = {"AUTH", redis->username, redis->password};
        if (redis->username == NULL)
            argv[1] = redis->password;
        rc = handshake_command(redis, fd, argv,
                               redis->username != NULL ? 3 : 2, &d, why,
                               why_size);
    }
    if (rc == 0 && redis->database[0] != '\0') {
        const char *argv[2] = {"SELECT", redis->database};
        rc = handshake_command(redis, fd, argv, 2, &d, why, why_size);
    }
    return rc;
}

pkv_status pkv__redis_connect(pkv__redis_lane *lane)
{
    pkv_redis *redis = lane->redis;
    if (lane->ctx != NULL &&
        idle_connection_ok((const redisContext *)lane->ctx))
        return PKV_OK;
    if (lane->ctx != NULL) {
        /* Closed by the server while idle: reconnect now. */
        pkv__redis_disconnect(lane);
        pthread_mutex_lock(&redis->lock);
        redis->stats.idle_closes++;
        pthread_mutex_unlock(&redis->lock);
    }
    /* In the wait after a failed attempt, unless the other lane connected
     * since: the server is back. */
    pthread_mutex_lock(&redis->lock);
    int back = redis->connected_ms > lane->last_attempt_ms;
    pthread_mutex_unlock(&redis->lock);
    if (!back && pkv__redis_now_ms() - lane->last_attempt_ms < lane->wait_ms)
        return PKV_ERR_STORE;
    char why[PKV__REDIS_ERROR_MAX] = "";
    redisContext *c = open_context(redis, why, sizeof why);
    int refused = 0;
    if (c != NULL) {
        /* Published for destroy, which shuts it down to end a wait (the
         * handshake's included). */
        pthread_mutex_lock(&redis->lock);
        lane->fd = c->fd;
        int stopping = redis->stop;
        pthread_mutex_unlock(&redis->lock);
        int rc = stopping ? 0 : handshake(redis, c->fd, why, sizeof why);
        if (rc != 0) {
            refused = rc > 0;
            pthread_mutex_lock(&redis->lock);
            lane->fd = -1;
            pthread_mutex_unlock(&redis->lock);
            redisFree(c);
            c = NULL;
        }
    }
    lane->last_attempt_ms = pkv__redis_now_ms();
    lane->used_ms = lane->last_attempt_ms;
    lane->failed_attempts = c != NULL ? 0 : lane->failed_attempts + 1;
    lane->wait_ms = c != NULL ? 0 : backoff_ms(lane);
    lane->ctx = c;
    if (c == NULL)
        pkv__redis_note(redis, why);
    pkv__redis_wipe(why, sizeof why);
    pthread_mutex_lock(&redis->lock);
    if (c != NULL) {
        redis->stats.connected++;
        redis->stats.connects++;
        redis->connected_ms = lane->last_attempt_ms;
    } else {
        redis->stats.connect_failures++;
        redis->stats.auth_failures += (uint64_t)refused;
    }
    /* destroy came while connecting, too early to shut the socket down:
     * send nothing that could wait. */
    int stop = redis->stop;
    pthread_mutex_unlock(&redis->lock);
    return c != NULL && !stop ? PKV_OK : PKV_ERR_STORE;
}
