/* SPDX-License-Identifier: MIT */
/*
 * pkv_redis: a KV store connector (pkv_store, pkv.h) over Redis or any
 * server that speaks its protocol (Valkey, KeyDB), through hiredis. A
 * separate small library, libpkv_redis, built when hiredis is found
 * (CMake says whether it was).
 *
 * Two connections and two worker threads per pkv_redis, one pair for
 * loads and one for saves: the engine's callbacks queue operations and
 * return; each worker sends its queue's operations one at a time, a
 * prompt's load as one MGET (one round trip), a save as one SET, and
 * queues each result for the engine's poll, in the order they finished.
 * A sequence waits for a load and nobody for a save, so a save (a large
 * value to a server that reads slowly) never delays a load; loads finish
 * in the order they were started, and so do saves. The loads' connection
 * is made at create, the saves' at the first save.
 *
 * Every command, sent and answered, has one deadline: 4 x timeout_ms in
 * all, and no wait for the reply's bytes longer than timeout_ms, so a
 * server that takes a few KiB of a value now and then holds a worker 4 x
 * timeout_ms at most (a value sent at less than its size per 4 x
 * timeout_ms fails: raise timeout_ms for large values over slow links).
 * A connection error, a timeout or an error reply fails the operation
 * (PKV_ERR_STORE, never a value); after a connection error or a timeout
 * the connection is closed and the worker connects again for the next
 * operation; while attempts fail, each waits longer (retry_ms, doubled
 * per failed attempt up to 5 s or retry_ms, 75-125% of that): operations
 * that come sooner fail at once. Keys are key_prefix followed by the
 * engine's key. Every connection, the first and each reconnect, sends
 * AUTH (a password, or an ACL user and its password) and SELECT when the
 * params ask, before any other command; a refusal fails that connection
 * like any other failure (pkv_redis_connection_error says why). A
 * command the server refuses for want of AUTH (NOAUTH: it requires a
 * password and none was given) is counted in auth_failures and named
 * there too.
 *
 * What a blip costs. A connection the server closed while idle (its
 * `timeout`, CLIENT KILL, a restart, a proxy) is found before the next
 * command, which goes out on a new connection: nothing fails. A
 * connection dropped without a word (a NAT or firewall that forgot it)
 * is found by the first command on it: a load that went out on a
 * connection idle for a second or more and gets no answer within
 * timeout_ms (or a reset) is sent again at once on a new connection, so
 * it costs that load about timeout_ms, not a miss (stats.retries); a
 * save fails, and the next one connects again. With the engine's
 * pkv_store.timeout_ms at its default (1,000 ms), keep timeout_ms well
 * under it (the default 500 ms) for the retried load to arrive in time.
 * A server down for longer costs the operations during its backoff.
 *
 * poll and cancel take the connector's lock, so they may wait for a copy
 * in progress (a load's values into the engine's buffers: about 0.1 ms a
 * MiB), never for the network.
 *
 * A cancelled operation's buffers are never touched once cancel returns,
 * and cancel never waits for the network: a save's value is read when
 * its command is formatted (a copy is sent), a load's values are
 * written when the whole reply has arrived, both under the connector's
 * lock. The workers block every signal, and a write to a closed
 * connection raises no SIGPIPE (MSG_NOSIGNAL).
 *
 * TLS: hiredis 0.14 (Debian 12's) has none, so the connector speaks plain
 * TCP; for a server that takes TLS only (a managed Redis, or
 * redis-server --tls-port), run a TLS client tunnel on loopback and point
 * host and port at it. With stunnel (Debian's stunnel4), a configuration
 * such as
 *
 *     [redis]
 *     client = yes
 *     accept = 127.0.0.1:6380
 *     connect = redis.example.net:6379
 *     verifyPeer = yes
 *     CAfile = /etc/ssl/certs/ca-certificates.crt
 *     checkHost = redis.example.net
 *
 * and host 127.0.0.1, port 6380 (with password, and username, since the
 * tunnel carries AUTH too). verifyPeer and checkHost matter: without
 * them the tunnel encrypts to whoever answers. Between two hosts of
 * one's own, spiped does the same with a shared key instead of
 * certificates. The listening port is reachable by every local user:
 * keep requirepass or an ACL user on the server. test_redis's
 * test_tls_stunnel runs this against a TLS-only redis-server, and
 * test_store_redis's test_tls_engines has engines share sealed blocks
 * through it. hiredis 1.x has hiredis_ssl; using it would put TLS inside
 * the connector, but the workers' own socket reads and writes would have
 * to go through the TLS session (docs/design.md, "What hiredis 1.x would
 * change").
 *
 * libpkv_redis needs only this header and pkv.h's types: it does not link
 * libpkv, and reports its own failures through pkv_redis_last_error.
 *
 * The library and everything in this header: since 0.2.0, but for what
 * says "Since 0.3.0.".
 */
#ifndef PKV_PKV_REDIS_H
#define PKV_PKV_REDIS_H

#include "pkv/pkv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* libpkv_redis's own export macro: PKV_API marks libpkv's functions, so a
 * host may link either library shared or static without the other's
 * declarations changing. Since 0.2.0. */
#if defined(PKV_REDIS_STATIC_DEFINE)
#define PKV_REDIS_API
#elif defined(_WIN32)
#if defined(PKV_REDIS_BUILDING_LIBRARY)
#define PKV_REDIS_API __declspec(dllexport)
#else
#define PKV_REDIS_API __declspec(dllimport)
#endif
#elif defined(__GNUC__) && __GNUC__ >= 4
#define PKV_REDIS_API __attribute__((visibility("default")))
#else
#define PKV_REDIS_API
#endif

typedef struct pkv_redis pkv_redis;

/* Parameters of pkv_redis_create. Fields are append-only. Since 0.2.0. */
typedef struct pkv_redis_params {
    uint32_t struct_size; /* sizeof(pkv_redis_params), set by _init */
    uint32_t port;        /* 1..65535; default 6379 */
    const char *host;     /* name or address; default "127.0.0.1"; NULL
                             with unix_path set: the socket */
    const char *unix_path; /* a Unix socket instead of TCP (host and
                              port are then ignored); NULL: TCP */
    const char *key_prefix; /* prepended to every key (a namespace);
                               NULL: none. At most 64 bytes */
    uint32_t timeout_ms; /* connect, and every wait for the server; a
                            whole command, sent and answered, within 4 x
                            timeout_ms; 1 to 60,000; default 500 */
    uint32_t retry_ms;   /* the first wait after a failed connection
                            attempt (then doubled per failure, jittered);
                            at most 60,000; default 100 */
    uint32_t ttl_seconds; /* SET ... EX ttl; 0 (the default): no expiry */
    uint32_t reserved0;   /* 0 */
    /* Since 0.2.0, appended after the fields above. Sent on every
     * connection, the first and each reconnect, before any other command:
     * AUTH when password is set, then SELECT when database is not 0. A
     * refusal fails the connection (connect_failures, auth_failures;
     * pkv_redis_connection_error says which command and the server's
     * reply, never the password). */
    const char *username; /* a Redis 6 ACL user (AUTH username password);
                             NULL: AUTH password alone (the default user).
                             At most 128 bytes; needs a password */
    const char *password; /* NULL (the default): no AUTH. At most 512
                             bytes; copied at create, its copy zeroed at
                             destroy */
    uint32_t database;    /* SELECT database; 0 (the default): none sent,
                             the server's first database */
    uint32_t reserved1;   /* 0 */
} pkv_redis_params;

/* Counters of one connector. Fields are append-only. Since 0.2.0. */
typedef struct pkv_redis_stats {
    uint32_t struct_size; /* sizeof(pkv_redis_stats), set by _init */
    uint32_t connected;   /* connections held now: 0 to 3, one for
                             loads, one for saves and (since 0.3.0) one
                             for pkv_redis_count_prefix (a server that
                             went away is noticed by the next operation) */
    uint64_t connects;    /* connections made, the first included */
    uint64_t connect_failures;
    uint64_t commands;    /* MGETs and SETs sent, and EXISTS answered */
    uint64_t errors;      /* operations failed: connection, timeout,
                             error reply, no connection yet (retry_ms),
                             or the connector destroyed under an engine */
    uint64_t bytes_read;  /* value bytes received */
    uint64_t bytes_written; /* value bytes sent */
    uint64_t idle_closes; /* connections the server closed while idle,
                             found before a command and replaced at once
                             (not counted in errors) */
    uint64_t auth_failures; /* connections whose AUTH or SELECT the server
                               refused (counted in connect_failures too),
                               and commands it refused for want of AUTH
                               (NOAUTH: the server requires a password
                               and the connector has none) */
    uint64_t buffer_bytes; /* held for replies now: a 1 MiB read buffer
                              and a load's staging, kept between loads up
                              to 8 MiB (a larger one is freed after the
                              load that needed it) */
    /* Since 0.2.0, appended after the fields above. */
    uint64_t command_closes; /* connections the server closed or reset
                                under a command, before its reply's end
                                (a server killed, or one that requires a
                                password closing a connection that sent
                                a large command unauthenticated;
                                pkv_redis_connection_error says which) */
    uint64_t retries;      /* loads sent again on a new connection after
                              the idle connection they went out on failed
                              (no answer within timeout_ms, a reset): a
                              NAT or firewall had forgotten it */
} pkv_redis_stats;

/*
 * Fill *params with defaults (127.0.0.1:6379, no prefix, timeout 500 ms,
 * retry 100 ms, no expiry, no AUTH, no SELECT).
 * Errors: PKV_ERR_INVALID_ARGUMENT for a NULL params
 * (pkv_redis_last_error).
 * Since 0.2.0.
 * Thread-safety: safe from any thread. Ownership: writes *params only.
 */
PKV_REDIS_API pkv_status pkv_redis_params_init(pkv_redis_params *params);

/*
 * Create a connector and start its workers. It connects in the
 * background: a server that is down is not an error here (operations
 * fail until it is up). Errors: PKV_ERR_INVALID_ARGUMENT (NULL, a
 * key_prefix too long, no host and no unix_path, a unix_path too long
 * for a socket address, port 0 or above 65535, timeout_ms 0 or above
 * 60,000, retry_ms above 60,000, reserved0 or reserved1 not 0, a
 * username or password too long, a username without a password),
 * PKV_ERR_STRUCT_SIZE,
 * PKV_ERR_OUT_OF_MEMORY, PKV_ERR_STORE when
 * a thread cannot start; pkv_redis_last_error() says why.
 * Since 0.2.0.
 * Thread-safety: safe from any thread.
 * Ownership: params' strings are copied; the caller destroys the
 * connector with pkv_redis_destroy, after every engine that uses it.
 */
PKV_REDIS_API pkv_status pkv_redis_create(const pkv_redis_params *params,
                                          pkv_redis **out);

/*
 * Stop the workers, close the connections, free everything; queued
 * operations are dropped unreported. An operation sending or waiting for
 * its reply ends at once (the socket is shut down); a connection attempt
 * in progress ends within timeout_ms (a host name's lookup is not
 * bounded by it). NULL is a no-op.
 * Destroy engines before their connector. A connector destroyed while an
 * engine still holds its store (attached by pkv_engine_create, through
 * pkv_store.attach, and not yet detached by pkv_engine_destroy) is not
 * freed under it: it is closed (the workers stop, loads and saves fail
 * with PKV_ERR_STORE, so the engine computes what it would have loaded)
 * and freed by the last such engine's pkv_engine_destroy, and
 * pkv_redis_last_error says so (PKV_ERR_BAD_STATE). An engine of a
 * libpkv older than pkv_store.attach is not counted.
 * Since 0.2.0.
 * Thread-safety: safe while engines use the connector (above); not with
 * another call of this connector's public functions.
 */
PKV_REDIS_API void pkv_redis_destroy(pkv_redis *redis);

/*
 * Set the callbacks and user of *store (after pkv_store_init, which sets
 * the engine-side defaults) to this connector's. One connector serves one
 * engine: a second call on a connector is refused, and a ticket already
 * in flight (the same store given to two engines) makes load and save
 * fail with PKV_ERR_BAD_STATE, so sharing costs misses, never memory.
 * The callbacks' load and save also fail with PKV_ERR_INVALID_ARGUMENT (a
 * NULL or too long key, no keys) or PKV_ERR_OUT_OF_MEMORY, and then start
 * nothing.
 * Errors: PKV_ERR_INVALID_ARGUMENT (NULL), PKV_ERR_STRUCT_SIZE (a store
 * not set up by pkv_store_init), PKV_ERR_BAD_STATE (this connector already
 * serves a store; nothing written).
 * Since 0.2.0.
 * Thread-safety: safe from any thread. Ownership: writes *store only.
 */
PKV_REDIS_API pkv_status pkv_redis_store(pkv_redis *redis, pkv_store *store);

/*
 * Zero *stats and set its struct_size, ready for pkv_redis_get_stats.
 * Errors: PKV_ERR_INVALID_ARGUMENT for a NULL stats
 * (pkv_redis_last_error).
 * Since 0.2.0.
 * Thread-safety: safe from any thread. Ownership: writes *stats only.
 */
PKV_REDIS_API pkv_status pkv_redis_stats_init(pkv_redis_stats *stats);

/*
 * The connector's counters, into *stats: stats->struct_size must be set
 * (pkv_redis_stats_init); only the fields that fit are written.
 * Errors (pkv_redis_last_error): PKV_ERR_INVALID_ARGUMENT for a NULL redis
 * or stats; PKV_ERR_STRUCT_SIZE for a struct_size below 0.2.0's or above
 * this library's (*stats is then unchanged).
 * Since 0.2.0.
 * Thread-safety: safe from any thread (read under the connector's lock).
 * Ownership: writes *stats only.
 */
PKV_REDIS_API pkv_status pkv_redis_get_stats(const pkv_redis *redis,
                                             pkv_redis_stats *stats);

/*
 * Why the connector's connection last failed, into buffer (size bytes,
 * truncated, NUL-terminated): "" when it never did, or when an operation
 * succeeded since. A failed connection attempt; a refused AUTH or SELECT
 * (the command and the server's error line: WRONGPASS, NOPERM, ...); a
 * command refused for want of AUTH (NOAUTH: a server with requirepass,
 * and no password given); a connection the server closed under a command
 * (with no password given, the likely reason is named); no answer in
 * time. A line that holds the password is never quoted. Connections are
 * made by the workers, so their failures are not pkv_redis_last_error's.
 * Errors (pkv_redis_last_error): PKV_ERR_INVALID_ARGUMENT for a NULL redis
 * or buffer, or a size of 0.
 * Since 0.2.0.
 * Thread-safety: safe from any thread (read under the connector's lock).
 * Ownership: writes buffer only.
 */
PKV_REDIS_API pkv_status pkv_redis_connection_error(const pkv_redis *redis,
                                                    char *buffer,
                                                    size_t size);

/*
 * How many of a prompt's blocks the server holds, leading: into
 * *num_held, the length of the run of keys[0 .. num_keys), from the
 * first, that exist on the server (key_prefix prepended, as loads ask
 * for them). The keys are a prompt's block names in order, as the engine
 * that saves them derives them, sealed names included
 * (pkv_engine_store_keys). Only names travel: one EXISTS per key, all
 * sent at once (one round trip), no value read. A router asks this to
 * know how much of a prompt any engine sharing the store could load
 * instead of computing (a value may still fail verification, or be
 * evicted before the load). It runs on the calling thread, over the
 * connector's third connection (made at the first count, with AUTH and
 * SELECT as the params ask, kept between counts, bounded by timeout_ms
 * as every command), so it never waits behind a load or a save; counts
 * from several threads take turns.
 * Errors (pkv_redis_last_error): PKV_ERR_INVALID_ARGUMENT for a NULL redis
 * or num_held, NULL keys with num_keys > 0, more than 65,536 keys, or a
 * key NULL, empty or longer than PKV_STORE_KEY_MAX - 1 bytes;
 * PKV_ERR_STORE when the server cannot be reached or answers otherwise
 * (the message and pkv_redis_connection_error say why; while
 * connection attempts fail, counts fail at once as loads do);
 * PKV_ERR_OUT_OF_MEMORY. num_keys 0: 0, nothing sent.
 * Since 0.3.0.
 * Thread-safety: safe from any thread, while engines use the connector.
 * Ownership: keys are read during the call only.
 */
PKV_REDIS_API pkv_status pkv_redis_count_prefix(pkv_redis *redis,
                                                const char *const *keys,
                                                uint32_t num_keys,
                                                uint32_t *num_held);

/*
 * The message of the last failure of a pkv_redis_* function on this
 * thread ("PKV_ERR_X: why"), or "" if there was none. (libpkv_redis does
 * not link libpkv, so pkv_last_error does not see these.)
 * Since 0.2.0.
 * Thread-safety: the message is thread-local.
 * Ownership: valid until the next pkv_redis_* call on this thread; never
 * free it.
 */
PKV_REDIS_API const char *pkv_redis_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* PKV_PKV_REDIS_H */
