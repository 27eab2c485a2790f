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
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, pthread_sigmask */
#include "internal.h"
#include "reply.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <signal.h>
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
 * (socket timeouts: hiredis then fails the call), or NULL. */
static redisContext *open_context(const pkv_redis *redis)
{
    struct timeval tv;
    tv.tv_sec = (time_t)(redis->timeout_ms / 1000u);
    tv.tv_usec = (suseconds_t)(redis->timeout_ms % 1000u * 1000u);
    redisContext *c = redis->unix_path != NULL
                          ? redisConnectUnixWithTimeout(redis->unix_path, tv)
                          : redisConnectWithTimeout(redis->host,
                                                    (int)redis->port, tv);
    if (c != NULL && (c->err != 0 || redisSetTimeout(c, tv) != REDIS_OK)) {
        redisFree(c);
        c = NULL;
    }
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
    redisContext *c = open_context(redis);
    redis->last_attempt_ms = now_ms();
    redis->failed_attempts = c != NULL ? 0 : redis->failed_attempts + 1;
    redis->wait_ms = c != NULL ? 0 : backoff_ms(redis);
    redis->ctx = c;
    pthread_mutex_lock(&redis->lock);
    if (c != NULL) {
        /* Published for destroy, which shuts it down to end a wait. */
        redis->fd = c->fd;
        redis->stats.connected = 1;
        redis->stats.connects++;
    } else {
        redis->stats.connect_failures++;
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

/* Room in the staging buffers for op's reply. 0, or -1. */
static int reserve_staging(pkv_redis *redis, const pkv__redis_op *op)
{
    if (redis->read_buffer == NULL)
        redis->read_buffer = malloc(PKV__REPLY_BUFFER);
    if (redis->read_buffer == NULL)
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
    if (redis->read_buffer == NULL)
        redis->read_buffer = malloc(PKV__REPLY_BUFFER);
    if (redis->read_buffer == NULL) {
        disconnect(redis); /* the reply is left unread */
        return PKV_ERR_STORE;
    }
    enum pkv__reply_result got = pkv__redis_read_status(
        ((redisContext *)redis->ctx)->fd, redis->read_buffer,
        PKV__REDIS_REPLY_TIMEOUTS * redis->timeout_ms);
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
        return PKV_OK; /* cancelled: pkv__redis_finish drops it */
    if (sent < 0) {
        disconnect(redis);
        return PKV_ERR_STORE;
    }
    /* hiredis has read nothing ahead: one command is in flight at a time,
     * and each reply is read to its end. */
    return op->kind == PKV__REDIS_LOAD ? take_values(redis, op)
                                       : take_status(redis);
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
        pkv__redis_finish(redis, op, run(redis, op));
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
