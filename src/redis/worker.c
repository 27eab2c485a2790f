/* SPDX-License-Identifier: MIT */
/*
 * The connector's worker thread and its one blocking hiredis connection.
 * It runs the queued operations one at a time: loads first, in the order
 * they were started, then saves, in theirs (a sequence waits for a load;
 * nobody waits for a save, so a burst of saves must not delay a load). A
 * load is one MGET, a save one SET.
 *
 * Cancel never waits for it: the worker reads a save's value while it
 * formats the command under the lock (hiredis sends its own copy), and
 * writes a load's values under the lock after the whole reply arrived,
 * both only if the op was not cancelled.
 *
 * A load's reply is read by reply.c, not hiredis: straight from the
 * socket into the connector's staging buffer, then copied once.
 *
 * A failed connection (error, timeout, EOF) is freed at once, since a late
 * reply would be taken for the next command's; the next operation
 * connects again at once (a blip costs one operation), and while
 * attempts keep failing, each waits longer: retry_ms, doubled per failed
 * attempt up to PKV__REDIS_BACKOFF_MAX_MS, each wait drawn from 75-125% of
 * that (connectors restarted together do not retry in step). An
 * operation that comes during a wait fails at once instead of waiting.
 * A connection the server closed while it was idle (Redis's `timeout`, a
 * proxy or NAT dropping idle connections) is not a failure: before each
 * command a peek at the socket finds the close, and the command goes out
 * on a new connection at once. TCP keepalive lets the kernel find a peer
 * that vanished without a close.
 *
 * Every new connection is handshaken before its first command: AUTH and
 * SELECT as the params ask, so a reconnect is as authenticated as the
 * first connection; a refusal fails the attempt like a server that is
 * down (backoff), and its reason is kept for pkv_redis_connection_error.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, pthread_sigmask */
#include "internal.h"
#include "reply.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The wait after a failed attempt. */
static uint64_t backoff_ms(pkv_redis *redis)
{
    uint64_t cap = redis->retry_ms > PKV__REDIS_BACKOFF_MAX_MS
                       ? redis->retry_ms
                       : PKV__REDIS_BACKOFF_MAX_MS;
    uint64_t wait = redis->retry_ms;
    for (uint32_t i = 1; i < redis->failed_attempts && wait < cap; i++)
        wait *= 2;
    if (wait > cap)
        wait = cap;
    uint64_t x = redis->jitter; /* xorshift64 */
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    redis->jitter = x;
    return wait * (75 + x % 51) / 100;
}

static void disconnect(pkv_redis *redis)
{
    pthread_mutex_lock(&redis->lock);
    redis->fd = -1;
    redis->stats.connected = 0;
    pthread_mutex_unlock(&redis->lock);
    redisFree(redis->ctx);
    redis->ctx = NULL;
    redis->last_attempt_ms = now_ms();
    redis->wait_ms = 0; /* the next operation reconnects at once */
}

/* A connection with timeout_ms on connect, and on every send and receive
 * (socket timeouts: hiredis then fails the call), or NULL with why[]
 * saying why. */
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
    if (c != NULL && (c->err != 0 || redisSetTimeout(c, tv) != REDIS_OK)) {
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

/* The buffers' bytes, into the stats. */
static void count_buffers(pkv_redis *redis)
{
    uint64_t bytes = redis->staging_size +
                     (uint64_t)redis->staged_capacity *
                         sizeof *redis->staged_sizes +
                     (redis->read_buffer != NULL ? PKV__REPLY_BUFFER : 0);
    pthread_mutex_lock(&redis->lock);
    redis->stats.buffer_bytes = bytes;
    pthread_mutex_unlock(&redis->lock);
}

/* The read buffer every reply goes through, allocated on first use and
 * kept. 0, or -1 without memory. */
static int have_read_buffer(pkv_redis *redis)
{
    if (redis->read_buffer != NULL)
        return 0;
    redis->read_buffer = malloc(PKV__REPLY_BUFFER);
    count_buffers(redis);
    return redis->read_buffer != NULL ? 0 : -1;
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

/* Send the argc strings of argv as one command on fd and read its
 * status reply. The command is written by the worker itself, not through
 * hiredis, whose output buffer would leave the password in freed memory;
 * the stack copy is wiped. 0 for +OK; 1 when the server refused it
 * (why[]: the command and its error line, never the password); -1 when
 * the connection failed. */
static int handshake_command(pkv_redis *redis, int fd, const char *const *argv,
                             int argc, char *why, size_t why_size)
{
    /* AUTH, the longest: its name, a username and a password, and their
     * lengths' lines. */
    char cmd[PKV__REDIS_USERNAME_MAX + PKV__REDIS_PASSWORD_MAX + 128];
    size_t at = (size_t)snprintf(cmd, sizeof cmd, "*%d\r\n", argc);
    int ok = 1;
    for (int i = 0; i < argc && ok; i++)
        ok = put_bulk(cmd, sizeof cmd, &at, argv[i]) == 0;
    for (size_t sent = 0; ok && sent < at;) {
        ssize_t n = send(fd, cmd + sent, at - sent, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        ok = n > 0;
        sent += ok ? (size_t)n : 0;
    }
    pkv__redis_wipe(cmd, sizeof cmd);
    if (!ok) {
        snprintf(why, why_size, "%s: the connection failed", argv[0]);
        return -1;
    }
    if (have_read_buffer(redis) != 0) {
        snprintf(why, why_size, "%s: no memory for its reply", argv[0]);
        return -1;
    }
    char line[PKV__REDIS_ERROR_MAX / 2];
    enum pkv__reply_result got = pkv__redis_read_status(
        fd, redis->read_buffer, redis->timeout_ms, line, sizeof line);
    if (got == PKV__REPLY_VALUES)
        return 0;
    if (got == PKV__REPLY_BROKEN) {
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
 * other command. 0, 1 (refused) or -1 (connection failed), as
 * handshake_command. */
static int handshake(pkv_redis *redis, int fd, char *why, size_t why_size)
{
    int rc = 0;
    if (redis->password != NULL) {
        const char *argv[3] = {"AUTH", redis->username, redis->password};
        if (redis->username == NULL)
            argv[1] = redis->password;
        rc = handshake_command(redis, fd, argv,
                               redis->username != NULL ? 3 : 2,
                               why, why_size);
    }
    if (rc == 0 && redis->database[0] != '\0') {
        const char *argv[2] = {"SELECT", redis->database};
        rc = handshake_command(redis, fd, argv, 2, why, why_size);
    }
    return rc;
}

static pkv_status ensure_connected(pkv_redis *redis)
{
    if (redis->ctx != NULL && idle_connection_ok(redis->ctx))
        return PKV_OK;
    if (redis->ctx != NULL) {
        /* Closed by the server while idle: reconnect now. */
        disconnect(redis);
        pthread_mutex_lock(&redis->lock);
        redis->stats.idle_closes++;
        pthread_mutex_unlock(&redis->lock);
    }
    if (now_ms() - redis->last_attempt_ms < redis->wait_ms)
        return PKV_ERR_STORE;
    char why[PKV__REDIS_ERROR_MAX] = "";
    redisContext *c = open_context(redis, why, sizeof why);
    int refused = 0;
    if (c != NULL) {
        /* Published for destroy, which shuts it down to end a wait (the
         * handshake's included). */
        pthread_mutex_lock(&redis->lock);
        redis->fd = c->fd;
        int stopping = redis->stop;
        pthread_mutex_unlock(&redis->lock);
        int rc = stopping ? 0 : handshake(redis, c->fd, why, sizeof why);
        if (rc != 0) {
            refused = rc > 0;
            pthread_mutex_lock(&redis->lock);
            redis->fd = -1;
            pthread_mutex_unlock(&redis->lock);
            redisFree(c);
            c = NULL;
        }
    }
    redis->last_attempt_ms = now_ms();
    redis->failed_attempts = c != NULL ? 0 : redis->failed_attempts + 1;
    redis->wait_ms = c != NULL ? 0 : backoff_ms(redis);
    redis->ctx = c;
    pthread_mutex_lock(&redis->lock);
    memcpy(redis->connection_error, why, sizeof why);
    if (c != NULL) {
        redis->stats.connected = 1;
        redis->stats.connects++;
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

/* Format op's command under the lock unless op was cancelled, then send
 * it. Returns 1 once sent, 0 when cancelled, -1 when the connection (or
 * memory) failed. */
static int send_command(pkv_redis *redis, pkv__redis_op *op)
{
    sds cmd = NULL;
    pthread_mutex_lock(&redis->lock);
    int cancelled = op->cancelled;
    int len = cancelled ? 0
                        : redisFormatSdsCommandArgv(&cmd, op->argc, op->argv,
                                                    op->argvlen);
    pthread_mutex_unlock(&redis->lock);
    if (cancelled)
        return 0;
    if (len < 0)
        return -1;
    redisContext *c = redis->ctx;
    int rc = redisAppendFormattedCommand(c, cmd, (size_t)len);
    redisFreeSdsCommand(cmd);
    int written = 0;
    while (rc == REDIS_OK && !written)
        rc = redisBufferWrite(c, &written);
    if (rc != REDIS_OK)
        return -1;
    pthread_mutex_lock(&redis->lock);
    redis->stats.commands++;
    if (op->kind == PKV__REDIS_SAVE)
        redis->stats.bytes_written += op->value_size;
    pthread_mutex_unlock(&redis->lock);
    return 1;
}

/* After a load: staging buffers that grew past PKV__REDIS_STAGING_KEEP
 * for it are freed, the next load allocates what it needs. */
static void trim_staging(pkv_redis *redis)
{
    if (redis->staging_size > PKV__REDIS_STAGING_KEEP) {
        free(redis->staging);
        redis->staging = NULL;
        redis->staging_size = 0;
    }
    if ((size_t)redis->staged_capacity * sizeof *redis->staged_sizes >
        PKV__REDIS_STAGING_KEEP) {
        free(redis->staged_sizes);
        redis->staged_sizes = NULL;
        redis->staged_capacity = 0;
    }
    count_buffers(redis);
}

/* Room in the staging buffers for op's reply. 0, or -1. */
static int reserve_staging(pkv_redis *redis, const pkv__redis_op *op)
{
    if (have_read_buffer(redis) != 0)
        return -1;
    size_t bytes = (size_t)op->num_keys * op->value_size;
    if (bytes > redis->staging_size) {
        uint8_t *p = realloc(redis->staging, bytes);
        if (p == NULL)
            return -1;
        redis->staging = p;
        redis->staging_size = bytes;
    }
    if (op->num_keys > redis->staged_capacity) {
        uint64_t *s = realloc(redis->staged_sizes,
                              op->num_keys * sizeof *s);
        if (s == NULL)
            return -1;
        redis->staged_sizes = s;
        redis->staged_capacity = op->num_keys;
    }
    return 0;
}

/* An MGET's reply, read into the staging buffers, then copied into the
 * engine's under the lock unless op was cancelled meanwhile. */
static pkv_status take_values(pkv_redis *redis, pkv__redis_op *op)
{
    redisContext *c = redis->ctx;
    if (reserve_staging(redis, op) != 0) {
        disconnect(redis); /* the reply is left unread */
        return PKV_ERR_STORE;
    }
    enum pkv__reply_result got = pkv__redis_read_mget(
        c->fd, redis->read_buffer, op->num_keys, redis->staging,
        op->value_size, redis->staged_sizes,
        PKV__REDIS_REPLY_TIMEOUTS * redis->timeout_ms);
    if (got == PKV__REPLY_BROKEN)
        disconnect(redis);
    if (got != PKV__REPLY_VALUES)
        return PKV_ERR_STORE;
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < op->num_keys; i++)
        bytes += redis->staged_sizes[i];
    pthread_mutex_lock(&redis->lock);
    redis->stats.bytes_read += bytes;
    if (!op->cancelled) {
        uint8_t *values = op->values;
        for (uint32_t i = 0; i < op->num_keys; i++) {
            uint64_t len = redis->staged_sizes[i];
            size_t keep = len < op->value_size ? (size_t)len : op->value_size;
            size_t at = (size_t)i * op->value_size;
            memcpy(values + at, redis->staging + at, keep);
            op->sizes[i] = len;
        }
    }
    pthread_mutex_unlock(&redis->lock);
    return PKV_OK;
}

/* A SET's reply, read by reply.c: hiredis's reader would take whatever a
 * hostile server announces (an array of 10^8 elements) into memory. */
static pkv_status take_status(pkv_redis *redis)
{
    if (have_read_buffer(redis) != 0) {
        disconnect(redis); /* the reply is left unread */
        return PKV_ERR_STORE;
    }
    enum pkv__reply_result got = pkv__redis_read_status(
        ((redisContext *)redis->ctx)->fd, redis->read_buffer,
        PKV__REDIS_REPLY_TIMEOUTS * redis->timeout_ms, NULL, 0);
    if (got == PKV__REPLY_BROKEN)
        disconnect(redis);
    /* An error reply (full memory) fails the op only: the connection is
     * in step. */
    return got == PKV__REPLY_VALUES ? PKV_OK : PKV_ERR_STORE;
}

static pkv_status run(pkv_redis *redis, pkv__redis_op *op)
{
    pkv_status st = ensure_connected(redis);
    if (st != PKV_OK)
        return st;
    int sent = send_command(redis, op);
    if (sent == 0)
        return PKV_OK; /* cancelled: finish drops it */
    if (sent < 0) {
        disconnect(redis);
        return PKV_ERR_STORE;
    }
    /* hiredis has read nothing ahead: one command is in flight at a time,
     * and each reply is read to its end. */
    if (op->kind == PKV__REDIS_SAVE)
        return take_status(redis);
    st = take_values(redis, op);
    trim_staging(redis);
    return st;
}

/* The worker is done with op: report it (the done queue), or free it when
 * it was cancelled meanwhile. */
static void finish(pkv_redis *redis, pkv__redis_op *op, pkv_status status)
{
    pthread_mutex_lock(&redis->lock);
    redis->running = NULL;
    if (status != PKV_OK)
        redis->stats.errors++;
    int cancelled = op->cancelled;
    if (!cancelled) {
        op->status = status;
        pkv__redis_list_push(&redis->done, op);
    }
    pthread_mutex_unlock(&redis->lock);
    if (cancelled)
        free(op);
}

static void *worker_main(void *arg)
{
    pkv_redis *redis = arg;
    ensure_connected(redis); /* early, so the first op finds it up */
    pthread_mutex_lock(&redis->lock);
    for (;;) {
        while (!redis->stop && redis->loads.head == NULL &&
               redis->saves.head == NULL)
            pthread_cond_wait(&redis->wake, &redis->lock);
        if (redis->stop)
            break;
        pkv__redis_op *op = redis->loads.head != NULL
                                ? pkv__redis_list_pop(&redis->loads)
                                : pkv__redis_list_pop(&redis->saves);
        redis->running = op;
        pthread_mutex_unlock(&redis->lock);
        finish(redis, op, run(redis, op));
        pthread_mutex_lock(&redis->lock);
    }
    pthread_mutex_unlock(&redis->lock);
    if (redis->ctx != NULL)
        disconnect(redis);
    return NULL;
}

int pkv__redis_worker_start(pkv_redis *redis)
{
    /* The worker blocks every signal: the host's go to its own threads,
     * and the SIGPIPE of a write to a connection the server closed
     * (hiredis 0.14 writes without MSG_NOSIGNAL) stays pending on the
     * worker instead of ending the process; the write fails with EPIPE. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&redis->thread, NULL, worker_main, redis);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

void pkv__redis_worker_stop(pkv_redis *redis)
{
    pthread_mutex_lock(&redis->lock);
    redis->stop = 1;
    /* Ends a send or receive in flight at once. The worker clears fd under
     * the lock before it closes the socket, so fd is still this
     * connection's. */
    if (redis->fd >= 0)
        shutdown(redis->fd, SHUT_RDWR);
    pthread_cond_signal(&redis->wake);
    pthread_mutex_unlock(&redis->lock);
    pthread_join(redis->thread, NULL);
}
