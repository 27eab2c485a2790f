/* SPDX-License-Identifier: MIT */
/*
 * The connector's state, shared by its files, each calling only those
 * below it: redis.c (the public functions) above ops.c (the engine-facing
 * callbacks) and worker.c (the threads that talk to the server), worker.c
 * above connection.c (a lane's connection) and reply.c (replies read
 * from the socket), those above io.c (the socket under a deadline); ops.c
 * and redis.c above connector.c (the object's memory), which is above
 * queue.c (the queues).
 *
 * One mutex guards the queues, the cancelled flags, the stats and the
 * published sockets; the engine's callbacks only take it to queue,
 * dequeue or flag, so they never wait for the network. Each lane's thread
 * owns its hiredis context and the op it runs: it sends and receives
 * without the lock, and takes it to touch an engine's buffer (reading a
 * save's value, writing a load's values), after checking that the op was
 * not cancelled.
 */
#ifndef PKV_REDIS_INTERNAL_H
#define PKV_REDIS_INTERNAL_H

#include "pkv/pkv.h"
#include "pkv/pkv_redis.h"
#include "struct_sizes.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* Longest key_prefix, without its NUL (pkv_redis.h). */
#define PKV__REDIS_PREFIX_MAX 64u

/* ttl_seconds and database in decimal (a uint32_t), NUL included. */
#define PKV__REDIS_TTL_MAX 11u

/* The longest username and password, without their NUL: ACL names and
 * passwords are far shorter in practice, and the AUTH command is built
 * in a buffer of bounded size on the lane's stack. */
#define PKV__REDIS_USERNAME_MAX 128u
#define PKV__REDIS_PASSWORD_MAX 512u

/* The longest timeout_ms and retry_ms: destroy waits up to timeout_ms
 * for a connection attempt in progress, and an engine's operations fail
 * for retry_ms after a failure. */
#define PKV__REDIS_TIME_MAX_MS 60000u

/* The longest wait between connection attempts to a server that stays
 * down (retry_ms if that is longer). */
#define PKV__REDIS_BACKOFF_MAX_MS 5000u

/* A whole command, sent and answered, must be done within this many
 * timeout_ms (each wait for the socket within one): a server that reads
 * or drips bytes slowly cannot hold a connection. */
#define PKV__REDIS_COMMAND_TIMEOUTS 4u

/* A connection that carried nothing for this long is idle: a load that
 * fails on it by the connection (no reply, a reset) is sent again once on
 * a new connection, since a NAT or firewall may have forgotten it. One
 * second apart from its last reply already tells a connection at rest
 * from one in use; NATs forget connections after minutes. */
#define PKV__REDIS_IDLE_MS 1000u

/* The most a load's staging buffers keep between loads (pkv_redis.h,
 * buffer_bytes): a prompt's 1,000 blocks of 8 KiB. One huge value must
 * not pin its size for the connector's life, and a buffer kept up to
 * this size spares the common loads an allocation and its page faults. */
#define PKV__REDIS_STAGING_KEEP ((size_t)8 << 20)

/* Messages of pkv_redis_last_error. */
#define PKV__REDIS_ERROR_MAX 256u

/* First release: every field up to reserved0 (append-only from here). */
#define PKV__REDIS_PARAMS_MIN_SIZE PKV__END_OF(pkv_redis_params, reserved0)
#define PKV__REDIS_STATS_MIN_SIZE PKV__END_OF(pkv_redis_stats, bytes_written)

/* Zero n bytes at p in a way the compiler cannot drop as a dead store
 * (the password's copies: they must not linger in freed memory).
 * connector.c. */
void pkv__redis_wipe(void *p, size_t n);

/* What a lane carries: loads and saves (each a thread's), and the
 * counts of held keys (pkv_redis_count_prefix, on its caller's thread). */
enum pkv__redis_kind { PKV__REDIS_LOAD, PKV__REDIS_SAVE, PKV__REDIS_PROBE };

/* The most keys one pkv_redis_count_prefix takes (a prompt of 64 Ki
 * blocks): its command is built in one buffer. */
#define PKV__REDIS_COUNT_MAX 65536u

/* One load or save, from its callback to its report or cancel. */
typedef struct pkv__redis_op {
    struct pkv__redis_op *next;
    uint64_t ticket;
    int kind;       /* enum pkv__redis_kind */
    int cancelled;  /* under the lock: set by cancel while running */
    int32_t status; /* the result, for poll */
    uint32_t num_keys;
    /* The engine's buffers: touched only under the lock, and only while
     * cancelled is 0. */
    void *values;        /* load */
    size_t value_size;   /* load: each slot; save: the value */
    uint64_t *sizes;     /* load */
    const void *value;   /* save */
    /* The command, its keys copied into the op (key_prefix included):
     * MGET k1 .. kn, or SET k value [EX ttl], whose argv[2] is the
     * engine's value, read only while the command is formatted. */
    int argc;
    const char **argv;
    size_t *argvlen;
} pkv__redis_op;

/* A FIFO of ops. */
typedef struct pkv__redis_list {
    pkv__redis_op *head;
    pkv__redis_op *tail;
} pkv__redis_list;

/* A connection and the thread that owns it. A connector has two: its
 * loads go over one, its saves over the other, so that a load, which a
 * sequence waits for, never waits behind a save (a large SET to a server
 * that reads slowly), which nobody waits for. */
typedef struct pkv__redis_lane {
    pkv_redis *redis;
    int kind; /* enum pkv__redis_kind: the queue it serves */
    int started;
    pthread_t thread;
    pthread_cond_t wake; /* work queued for it, or stop */

    /* Under the connector's lock. */
    pkv__redis_op *running; /* the op it runs, or NULL */
    int fd;                 /* its connection's socket, -1: none; destroy
                               shuts it down to end a wait at once */

    /* The lane's thread alone. */
    void *ctx;                /* redisContext, NULL when disconnected */
    uint64_t last_attempt_ms; /* or the connection's loss */
    uint64_t wait_ms;         /* before the next attempt: 0 after a lost
                                 connection, then retry_ms doubling with
                                 each failed attempt (jittered), up to
                                 PKV__REDIS_BACKOFF_MAX_MS */
    uint32_t failed_attempts; /* in a row */
    uint64_t jitter;          /* xorshift state */
    uint64_t used_ms;         /* when the connection was made or last
                                 answered: idle since then */
    /* The loads' lane: a load's reply as read (reply.h), before it is
     * copied into the engine's buffers, kept from load to load up to
     * PKV__REDIS_STAGING_KEEP bytes. */
    uint8_t *staging;
    size_t staging_size;
    uint8_t *read_buffer; /* PKV__REPLY_BUFFER bytes, or NULL */
    uint64_t *staged_sizes;
    uint32_t staged_capacity;
} pkv__redis_lane;

struct pkv_redis {
    /* Copied from the params at create; read-only afterwards. */
    char *host;
    char *unix_path;
    uint32_t port;
    uint32_t timeout_ms;
    uint32_t retry_ms;
    char prefix[PKV__REDIS_PREFIX_MAX + 1];
    size_t prefix_len;
    char ttl[PKV__REDIS_TTL_MAX]; /* "" for no expiry */
    char *username;               /* NULL: AUTH password alone */
    char *password;               /* NULL: no AUTH; wiped at destroy */
    char database[PKV__REDIS_TTL_MAX]; /* "" for no SELECT */

    pthread_mutex_t lock;
    pkv__redis_lane lanes[2]; /* by enum pkv__redis_kind */
    /* The counts' own connection, without a thread: used by the thread
     * that calls pkv_redis_count_prefix, under probe_lock, so a count
     * never waits behind a load or a save. */
    pkv__redis_lane probe;
    pthread_mutex_t probe_lock;

    /* Under the lock. Queued for the lanes: loads for one, saves for the
     * other. */
    pkv__redis_list loads;
    pkv__redis_list saves;
    pkv__redis_list done;    /* finished, waiting for poll */
    int stop;                /* destroy asked the lanes to end */
    int store_given;         /* pkv_redis_store was called: it serves an
                                engine's store already */
    uint32_t engines;        /* engines holding the store: attached and
                                not detached (pkv_store.attach) */
    int closed;              /* pkv_redis_destroy was called while engines
                                held it: the last detach frees it */
    uint64_t connected_ms;   /* the last connection made, by either lane
                                (pkv__redis_now_ms) */
    pkv_redis_stats stats;
    /* Why the connection last failed (pkv_redis_connection_error): "" if
     * it never did or an operation succeeded since. */
    char connection_error[PKV__REDIS_ERROR_MAX];
};

/* queue.c. A list's functions: the caller holds the lock, or owns the
 * list (a connector being freed). take moves every op of ticket from
 * list to out; has says whether list holds one. */
void pkv__redis_list_push(pkv__redis_list *list, pkv__redis_op *op);
pkv__redis_op *pkv__redis_list_pop(pkv__redis_list *list);
void pkv__redis_list_free(pkv__redis_list *list);
void pkv__redis_list_take(pkv__redis_list *list, uint64_t ticket,
                          pkv__redis_list *out);
int pkv__redis_list_has(const pkv__redis_list *list, uint64_t ticket);

/* connector.c. A connector with p's settings (already checked), its lock
 * and queues ready, no thread: PKV_OK, or PKV_ERR_OUT_OF_MEMORY with *what
 * saying what could not be made. free: everything of a connector whose
 * lanes have ended (or never started). */
pkv_status pkv__redis_connector_new(const pkv_redis_params *p,
                                    pkv_redis **out, const char **what);
void pkv__redis_connector_free(pkv_redis *redis);

/* ops.c: the four pkv_store callbacks (user is the pkv_redis). */
pkv_status pkv__redis_load(void *user, uint64_t ticket,
                           const char *const *keys, uint32_t num_keys,
                           void *values, size_t value_size, uint64_t *sizes);
pkv_status pkv__redis_save(void *user, uint64_t ticket, const char *key,
                           const void *value, size_t value_size);
uint32_t pkv__redis_poll(void *user, pkv_store_done *done,
                         uint32_t capacity);
void pkv__redis_cancel(void *user, uint64_t ticket);
void pkv__redis_attach(void *user);
void pkv__redis_detach(void *user);

/* connection.c: a lane's connection. connect: make it (AUTH and SELECT
 * included) unless it stands, or fail at once while the last failed
 * attempt's wait lasts; PKV_OK or PKV_ERR_STORE. disconnect: drop it (a
 * failed connection must go: a late reply would be taken for the next
 * command's). note: why the connection failed, for
 * pkv_redis_connection_error (under the lock). */
pkv_status pkv__redis_connect(pkv__redis_lane *lane);
void pkv__redis_disconnect(pkv__redis_lane *lane);
void pkv__redis_note(pkv_redis *redis, const char *why);

/* count.c: how many of keys[0 .. n), leading, the server holds (EXISTS
 * of each, pipelined, on the probe lane), into *held: PKV_OK, or
 * PKV_ERR_STORE (the connection; pkv_redis_connection_error says why)
 * or PKV_ERR_OUT_OF_MEMORY. The keys are checked by the caller. */
pkv_status pkv__redis_count(pkv_redis *redis, const char *const *keys,
                            uint32_t n, uint32_t *held);

/* worker.c: start the lanes' threads (0, or an errno value); stop and join
 * them. */
int pkv__redis_worker_start(pkv_redis *redis);
void pkv__redis_worker_stop(pkv_redis *redis);

#endif
