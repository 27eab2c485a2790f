/* SPDX-License-Identifier: MIT */
/*
 * The connector's two lanes (internal.h): a thread and a connection for
 * loads, another for saves, each running its queue's operations one at a
 * time in the order they were started. A load is one MGET, a save one
 * SET. A sequence waits for a load and nobody for a save, so a save, be
 * it a large value to a server that reads slowly, never delays a load.
 *
 * Every command, sent and answered, has one deadline: PKV__REDIS_COMMAND_
 * TIMEOUTS x timeout_ms in all, and no wait for the socket longer than
 * timeout_ms (io.h). A server that takes a few KiB of a SET now and then
 * is cut off by the first, a server that stopped by the second.
 *
 * Cancel never waits for a lane: it reads a save's value while it formats
 * the command under the lock (a copy is sent), and writes a load's values
 * under the lock after the whole reply arrived, both only if the op was
 * not cancelled.
 *
 * A load's reply is read by reply.c, not hiredis: straight from the
 * socket into the lane's staging buffer, then copied once.
 *
 * A failed connection (no reply in time, a close, a reply of another
 * shape) is dropped at once, since a late reply would be taken for the
 * next command's, and the next operation connects again at once
 * (connection.c). A load that fails so on a connection that had been
 * idle for PKV__REDIS_IDLE_MS or more is sent again, once, on a new
 * connection: a NAT or firewall that forgot an idle connection without a
 * word costs that load timeout_ms, not a miss. A save is not sent again
 * (nobody waits for it).
 *
 * A command the server refuses for want of AUTH (NOAUTH, or the protocol
 * error Redis sends before it closes an unauthenticated connection that
 * sent a large command) and a connection the server closes under a
 * command are named in pkv_redis_connection_error and counted
 * (auth_failures, command_closes): a connector without the password a
 * server needs says so instead of failing quietly.
 */
#define _POSIX_C_SOURCE 200809L /* pthread_sigmask */
#include "internal.h"
#include "io.h"
#include "reply.h"

#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* What became of one attempt of an op's command. */
enum outcome {
    DONE,      /* answered as expected */
    CANCELLED, /* cancelled before it was sent: nothing sent */
    REFUSED,   /* an error reply, or no memory for the reply: the
                  connection is in step */
    LOST,      /* the connection failed and was dropped */
    SILENT     /* the same, by no answer in time or a close: what a
                  connection a NAT forgot does */
};

/* How a command was lost when its send failed otherwise than by a close
 * or a timeout (besides the reply results of reply.h). */
enum { SEND_FAILED = -1 };

/* The loads' buffers' bytes, into the stats. */
static void count_buffers(pkv__redis_lane *lane)
{
    uint64_t bytes = lane->staging_size +
                     (uint64_t)lane->staged_capacity *
                         sizeof *lane->staged_sizes +
                     (lane->read_buffer != NULL ? PKV__REPLY_BUFFER : 0);
    pthread_mutex_lock(&lane->redis->lock);
    lane->redis->stats.buffer_bytes = bytes;
    pthread_mutex_unlock(&lane->redis->lock);
}

/* After a load: staging buffers that grew past PKV__REDIS_STAGING_KEEP
 * for it are freed, the next load allocates what it needs. */
static void trim_staging(pkv__redis_lane *lane)
{
    if (lane->staging_size > PKV__REDIS_STAGING_KEEP) {
        free(lane->staging);
        lane->staging = NULL;
        lane->staging_size = 0;
    }
    if ((size_t)lane->staged_capacity * sizeof *lane->staged_sizes >
        PKV__REDIS_STAGING_KEEP) {
        free(lane->staged_sizes);
        lane->staged_sizes = NULL;
        lane->staged_capacity = 0;
    }
    count_buffers(lane);
}

/* Room for op's reply: the read buffer (allocated on first use and
 * kept) and the staging buffers. 0, or -1. */
static int reserve_staging(pkv__redis_lane *lane, const pkv__redis_op *op)
{
    if (lane->read_buffer == NULL) {
        lane->read_buffer = malloc(PKV__REPLY_BUFFER);
        if (lane->read_buffer == NULL)
            return -1;
    }
    size_t bytes = (size_t)op->num_keys * op->value_size;
    if (bytes > lane->staging_size) {
        uint8_t *p = realloc(lane->staging, bytes);
        if (p == NULL)
            return -1;
        lane->staging = p;
        lane->staging_size = bytes;
    }
    if (op->num_keys > lane->staged_capacity) {
        uint64_t *s = realloc(lane->staged_sizes, op->num_keys * sizeof *s);
        if (s == NULL)
            return -1;
        lane->staged_sizes = s;
        lane->staged_capacity = op->num_keys;
    }
    return 0;
}

/* Format op's command under the lock unless op was cancelled, then send
 * it by d. 1 once sent, 0 when cancelled, else an io.h failure
 * (PKV__IO_FAILED for no memory). */
static int send_command(pkv__redis_lane *lane, pkv__redis_op *op,
                        const pkv__redis_deadline *d)
{
    pkv_redis *redis = lane->redis;
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
        return PKV__IO_FAILED;
    int rc = pkv__redis_send(((redisContext *)lane->ctx)->fd, cmd,
                             (size_t)len, d);
    redisFreeSdsCommand(cmd);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&redis->lock);
    redis->stats.commands++;
    if (op->kind == PKV__REDIS_SAVE)
        redis->stats.bytes_written += op->value_size;
    pthread_mutex_unlock(&redis->lock);
    return 1;
}

/* An MGET's reply, read into the staging buffers (reserved for it), then
 * copied into the engine's under the lock unless op was cancelled
 * meanwhile. */
static enum pkv__reply_result take_values(pkv__redis_lane *lane,
                                          pkv__redis_op *op,
                                          const pkv__redis_deadline *d,
                                          char *line, size_t line_size)
{
    enum pkv__reply_result got = pkv__redis_read_mget(
        ((redisContext *)lane->ctx)->fd, lane->read_buffer, op->num_keys,
        lane->staging, op->value_size, lane->staged_sizes, d, line,
        line_size);
    if (got != PKV__REPLY_VALUES)
        return got;
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < op->num_keys; i++)
        bytes += lane->staged_sizes[i];
    pkv_redis *redis = lane->redis;
    pthread_mutex_lock(&redis->lock);
    redis->stats.bytes_read += bytes;
    if (!op->cancelled) {
        uint8_t *values = op->values;
        for (uint32_t i = 0; i < op->num_keys; i++) {
            uint64_t len = lane->staged_sizes[i];
            size_t keep = len < op->value_size ? (size_t)len : op->value_size;
            size_t at = (size_t)i * op->value_size;
            memcpy(values + at, lane->staging + at, keep);
            op->sizes[i] = len;
        }
    }
    pthread_mutex_unlock(&redis->lock);
    return PKV__REPLY_VALUES;
}

/* Whether an error line is a refusal for want of AUTH: NOAUTH, or the
 * protocol error Redis sends an unauthenticated connection that sent a
 * large command before it closes it. */
static int wants_auth(const char *line)
{
    return strncmp(line, "NOAUTH", 6) == 0 ||
           strstr(line, "unauthenticated") != NULL;
}

/* The command's name, for messages. */
static const char *command_name(const pkv__redis_op *op)
{
    return op->kind == PKV__REDIS_LOAD ? "MGET" : "SET";
}

/* An error reply to op's command (line): a refusal for want of AUTH is
 * named and counted; a protocol error means the server closes the
 * connection. */
static enum outcome refused(pkv__redis_lane *lane, const pkv__redis_op *op,
                            const char *line)
{
    pkv_redis *redis = lane->redis;
    if (wants_auth(line)) {
        char why[PKV__REDIS_ERROR_MAX];
        snprintf(why, sizeof why, "%s refused: %s (%s)", command_name(op),
                 line,
                 redis->password == NULL
                     ? "the server requires AUTH: set "
                       "pkv_redis_params.password"
                     : "the server requires AUTH");
        pkv__redis_note(redis, why);
        pthread_mutex_lock(&redis->lock);
        redis->stats.auth_failures++;
        pthread_mutex_unlock(&redis->lock);
    }
    if (strncmp(line, "ERR Protocol error", 18) == 0) {
        pkv__redis_disconnect(lane);
        return LOST;
    }
    return REFUSED;
}

/* The connection failed under op's command, as `how` says (a reply's
 * CLOSED, TIMEOUT or BROKEN; SEND_FAILED): named, counted, dropped.
 * SILENT for a close or no answer in time, what a connection a NAT
 * forgot does; else LOST. */
static enum outcome lost(pkv__redis_lane *lane, const pkv__redis_op *op,
                         int how)
{
    pkv_redis *redis = lane->redis;
    char why[PKV__REDIS_ERROR_MAX];
    if (how == PKV__REPLY_CLOSED)
        snprintf(why, sizeof why,
                 "%s: the server closed the connection under the "
                 "command%s",
                 command_name(op),
                 redis->password == NULL
                     ? " (a server that requires a password closes an "
                       "unauthenticated connection that sends a large "
                       "command: is pkv_redis_params.password needed?)"
                     : "");
    else if (how == PKV__REPLY_TIMEOUT)
        snprintf(why, sizeof why,
                 "%s: no answer in time (a wait for the reply over "
                 "timeout_ms, %u ms, or the whole command over %u ms)",
                 command_name(op), (unsigned)redis->timeout_ms,
                 (unsigned)(PKV__REDIS_COMMAND_TIMEOUTS * redis->timeout_ms));
    else if (how == PKV__REPLY_BROKEN)
        snprintf(why, sizeof why, "%s: a reply of another shape",
                 command_name(op));
    else
        snprintf(why, sizeof why, "%s: the command could not be sent",
                 command_name(op));
    pkv__redis_note(redis, why);
    int closed = how == PKV__REPLY_CLOSED;
    pthread_mutex_lock(&redis->lock);
    redis->stats.command_closes += (uint64_t)closed;
    pthread_mutex_unlock(&redis->lock);
    pkv__redis_disconnect(lane);
    return closed || how == PKV__REPLY_TIMEOUT ? SILENT : LOST;
}

/* One attempt of op's command on the lane's connection, sent and answered
 * by one deadline. */
static enum outcome attempt(pkv__redis_lane *lane, pkv__redis_op *op)
{
    pkv_redis *redis = lane->redis;
    pkv__redis_deadline d = pkv__redis_deadline_in(
        PKV__REDIS_COMMAND_TIMEOUTS * redis->timeout_ms, redis->timeout_ms);
    int fd = ((redisContext *)lane->ctx)->fd;
    char line[PKV__REDIS_ERROR_MAX / 2];
    /* Before the command goes: without memory for its reply, the op fails
     * and the connection stays in step. */
    if (op->kind == PKV__REDIS_LOAD && reserve_staging(lane, op) != 0) {
        count_buffers(lane);
        return REFUSED;
    }
    int sent = send_command(lane, op, &d);
    if (sent == 0)
        return CANCELLED;
    if (sent == PKV__IO_CLOSED) {
        /* A server that closes a connection under a command may have
         * said why first: what it sent is there already. */
        pkv__redis_deadline soon = pkv__redis_deadline_in(10, 10);
        if (pkv__redis_read_status(fd, &soon, line, sizeof line) ==
            PKV__REPLY_ERROR)
            return refused(lane, op, line);
    }
    if (sent < 0)
        return lost(lane, op,
                    sent == PKV__IO_CLOSED    ? PKV__REPLY_CLOSED
                    : sent == PKV__IO_TIMEOUT ? PKV__REPLY_TIMEOUT
                                              : SEND_FAILED);
    /* One command in flight at a time, each reply read to its end. */
    enum pkv__reply_result got =
        op->kind == PKV__REDIS_SAVE
            ? pkv__redis_read_status(fd, &d, line, sizeof line)
            : take_values(lane, op, &d, line, sizeof line);
    if (got == PKV__REPLY_VALUES) {
        lane->used_ms = pkv__redis_now_ms();
        return DONE;
    }
    if (got == PKV__REPLY_ERROR)
        return refused(lane, op, line);
    return lost(lane, op, (int)got);
}

static pkv_status run(pkv__redis_lane *lane, pkv__redis_op *op)
{
    if (pkv__redis_connect(lane) != PKV_OK)
        return PKV_ERR_STORE;
    int idle = pkv__redis_now_ms() - lane->used_ms >= PKV__REDIS_IDLE_MS;
    enum outcome o = attempt(lane, op);
    if (o == SILENT && idle && op->kind == PKV__REDIS_LOAD &&
        pkv__redis_connect(lane) == PKV_OK) {
        pthread_mutex_lock(&lane->redis->lock);
        lane->redis->stats.retries++;
        pthread_mutex_unlock(&lane->redis->lock);
        o = attempt(lane, op);
    }
    if (op->kind == PKV__REDIS_LOAD)
        trim_staging(lane);
    /* cancelled: finish drops it. */
    return o == DONE || o == CANCELLED ? PKV_OK : PKV_ERR_STORE;
}

/* The lane is done with op: report it (the done queue), or free it when
 * it was cancelled meanwhile. A success clears the connection's last
 * failure (pkv_redis_connection_error). */
static void finish(pkv__redis_lane *lane, pkv__redis_op *op,
                   pkv_status status)
{
    pkv_redis *redis = lane->redis;
    pthread_mutex_lock(&redis->lock);
    lane->running = NULL;
    int cancelled = op->cancelled;
    if (status != PKV_OK)
        redis->stats.errors++;
    else if (!cancelled)
        redis->connection_error[0] = '\0';
    if (!cancelled) {
        op->status = status;
        pkv__redis_list_push(&redis->done, op);
    }
    pthread_mutex_unlock(&redis->lock);
    if (cancelled)
        free(op);
}

static void *lane_main(void *arg)
{
    pkv__redis_lane *lane = arg;
    pkv_redis *redis = lane->redis;
    pkv__redis_list *queue =
        lane->kind == PKV__REDIS_LOAD ? &redis->loads : &redis->saves;
    /* Loads connect early, so that the first finds the connection up;
     * saves at their first (nobody waits for them). */
    if (lane->kind == PKV__REDIS_LOAD)
        pkv__redis_connect(lane);
    pthread_mutex_lock(&redis->lock);
    for (;;) {
        while (!redis->stop && queue->head == NULL)
            pthread_cond_wait(&lane->wake, &redis->lock);
        if (redis->stop)
            break;
        pkv__redis_op *op = pkv__redis_list_pop(queue);
        lane->running = op;
        pthread_mutex_unlock(&redis->lock);
        finish(lane, op, run(lane, op));
        pthread_mutex_lock(&redis->lock);
    }
    pthread_mutex_unlock(&redis->lock);
    pkv__redis_disconnect(lane);
    return NULL;
}

/* Ask the lanes to end, ending a send or receive in flight at once, and
 * join those that started. */
static void stop_lanes(pkv_redis *redis)
{
    pthread_mutex_lock(&redis->lock);
    redis->stop = 1;
    for (int k = 0; k < 2; k++) {
        /* A lane clears fd under the lock before it closes the socket,
         * so fd is still this connection's. */
        if (redis->lanes[k].fd >= 0)
            shutdown(redis->lanes[k].fd, SHUT_RDWR);
        pthread_cond_signal(&redis->lanes[k].wake);
    }
    pthread_mutex_unlock(&redis->lock);
    for (int k = 0; k < 2; k++)
        if (redis->lanes[k].started)
            pthread_join(redis->lanes[k].thread, NULL);
}

int pkv__redis_worker_start(pkv_redis *redis)
{
    /* The lanes block every signal: the host's go to its own threads.
     * (Every send passes MSG_NOSIGNAL, so a write to a connection the
     * server closed fails with EPIPE and raises no SIGPIPE.) */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = 0;
    for (int k = 0; k < 2 && rc == 0; k++) {
        pkv__redis_lane *lane = &redis->lanes[k];
        rc = pthread_create(&lane->thread, NULL, lane_main, lane);
        lane->started = rc == 0;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        stop_lanes(redis);
    return rc;
}

void pkv__redis_worker_stop(pkv_redis *redis)
{
    stop_lanes(redis);
}
