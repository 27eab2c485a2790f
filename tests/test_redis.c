/* SPDX-License-Identifier: MIT */
/*
 * libpkv_redis alone, without an engine, against redis-servers the test
 * starts (redis_server.h): values round-trip, prefixes, expiry, FIFO
 * polls, cancels that leave buffers alone, a server killed, hung or down
 * at create, and the parameters. Skipped (77) without redis-server.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep, mkdtemp */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "pkv/pkv_redis.h"
#include "redis_server.h"
#include "tcp_proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* The server the tests that do not stop it share. */
static rs_server shared;

/* One connector and the pkv_store it fills in. */
typedef struct conn {
    pkv_redis *redis;
    pkv_store store;
} conn;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void open_conn(conn *c, const rs_server *rs, const char *prefix,
                      uint32_t timeout_ms, uint32_t ttl)
{
    pkv_redis_params p;
    assert_int_equal(pkv_redis_params_init(&p), PKV_OK);
    p.port = (uint32_t)rs->port;
    p.key_prefix = prefix;
    p.timeout_ms = timeout_ms;
    p.retry_ms = 100;
    p.ttl_seconds = ttl;
    assert_int_equal(pkv_redis_create(&p, &c->redis), PKV_OK);
    /* pkv_store_init's part, without linking libpkv. */
    memset(&c->store, 0, sizeof c->store);
    c->store.struct_size = sizeof c->store;
    assert_int_equal(pkv_redis_store(c->redis, &c->store), PKV_OK);
}

/* As open_conn, with AUTH and SELECT: username, password (NULL: none)
 * and database. */
static void open_conn_auth(conn *c, const rs_server *rs, const char *prefix,
                           const char *username, const char *password,
                           uint32_t database)
{
    pkv_redis_params p;
    assert_int_equal(pkv_redis_params_init(&p), PKV_OK);
    p.port = (uint32_t)rs->port;
    p.key_prefix = prefix;
    p.retry_ms = 100;
    p.username = username;
    p.password = password;
    p.database = database;
    assert_int_equal(pkv_redis_create(&p, &c->redis), PKV_OK);
    memset(&c->store, 0, sizeof c->store);
    c->store.struct_size = sizeof c->store;
    assert_int_equal(pkv_redis_store(c->redis, &c->store), PKV_OK);
}

/* pkv_redis_connection_error, into a static buffer. */
static const char *connection_error(const conn *c)
{
    static char why[256];
    assert_int_equal(pkv_redis_connection_error(c->redis, why, sizeof why),
                     PKV_OK);
    return why;
}

/* An admin command's reply, which must be +OK or an integer (the
 * command is rs_command's format: hiredis splits it at spaces). */
#define admin(rs, command) admin_reply(rs_command(rs, command), command)

static void admin_reply(redisReply *r, const char *command)
{
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR)
        print_message("%s: %s\n", command, r->str);
    assert_true(r->type == REDIS_REPLY_STATUS ||
                r->type == REDIS_REPLY_INTEGER);
    freeReplyObject(r);
}

static void close_conn(conn *c)
{
    pkv_redis_destroy(c->redis);
    c->redis = NULL;
}

static pkv_redis_stats get_stats(const conn *c)
{
    pkv_redis_stats s;
    assert_int_equal(pkv_redis_stats_init(&s), PKV_OK);
    assert_int_equal(pkv_redis_get_stats(c->redis, &s), PKV_OK);
    return s;
}

/* Poll until want operations are reported or ms pass; how many were. */
static uint32_t poll_until(conn *c, pkv_store_done *done, uint32_t want,
                           long ms)
{
    uint32_t got = 0;
    uint64_t end = now_ms() + (uint64_t)ms;
    while (got < want && now_ms() < end) {
        uint32_t n = c->store.poll(c->store.user, done + got, want - got);
        got += n;
        if (n == 0)
            sleep_ms(1);
    }
    return got;
}

/* The status of one operation already started as ticket. */
static int32_t wait_op(conn *c, uint64_t ticket)
{
    pkv_store_done d;
    assert_int_equal(poll_until(c, &d, 1, 5000), 1);
    assert_int_equal(d.ticket, ticket);
    return d.status;
}

static int32_t save_sync(conn *c, uint64_t ticket, const char *key,
                         const void *value, size_t size)
{
    assert_int_equal(c->store.save(c->store.user, ticket, key, value, size),
                     PKV_OK);
    return wait_op(c, ticket);
}

static int32_t load_sync(conn *c, uint64_t ticket, const char *const *keys,
                         uint32_t n, void *values, size_t value_size,
                         uint64_t *sizes)
{
    assert_int_equal(c->store.load(c->store.user, ticket, keys, n, values,
                                   value_size, sizes),
                     PKV_OK);
    return wait_op(c, ticket);
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)((i * 131u + seed * 7u) % 256u);
}

static int all_bytes(const unsigned char *p, size_t n, unsigned char b)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != b)
            return 0;
    return 1;
}

/* Wait until the connector has written n commands in all. */
static void wait_commands(const conn *c, uint64_t n)
{
    uint64_t end = now_ms() + 5000;
    while (get_stats(c).commands < n && now_ms() < end)
        sleep_ms(1);
    assert_int_equal(get_stats(c).commands, n);
}

/* ------------------------------------------------------------ fixtures */

static int group_setup(void **state)
{
    (void)state;
    return rs_start(&shared, NULL) == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    rs_stop(&shared);
    return 0;
}

/* A server of the test's own, to kill or freeze. */
static int private_setup(void **state)
{
    rs_server *rs = calloc(1, sizeof *rs);
    if (rs == NULL || rs_start(rs, NULL) != 0) {
        free(rs);
        return -1;
    }
    *state = rs;
    return 0;
}

static int private_teardown(void **state)
{
    rs_server *rs = *state;
    rs_stop(rs);
    free(rs);
    return 0;
}

/* -------------------------------------------------------------- params */

static void test_params(void **state)
{
    (void)state;
    pkv_redis_params p;
    pkv_redis *r = (pkv_redis *)&p;
    assert_int_equal(pkv_redis_params_init(NULL), PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(pkv_redis_params_init(&p), PKV_OK);
    assert_int_equal(p.struct_size, sizeof p);
    assert_int_equal(p.port, 6379);
    assert_string_equal(p.host, "127.0.0.1");
    assert_null(p.unix_path);
    assert_null(p.key_prefix);
    assert_int_equal(p.timeout_ms, 500);
    assert_int_equal(p.retry_ms, 100);
    assert_int_equal(p.ttl_seconds, 0);
    assert_null(p.username);
    assert_null(p.password);
    assert_int_equal(p.database, 0);
    assert_int_equal(p.reserved1, 0);

    assert_int_equal(pkv_redis_create(NULL, &r), PKV_ERR_INVALID_ARGUMENT);
    assert_null(r);
    assert_int_equal(pkv_redis_create(&p, NULL), PKV_ERR_INVALID_ARGUMENT);
    assert_true(strstr(pkv_redis_last_error(), "PKV_ERR_INVALID_ARGUMENT")
                != NULL);

    char prefix[80];
    memset(prefix, 'p', sizeof prefix);
    prefix[65] = '\0';
    p.key_prefix = prefix;
    assert_int_equal(pkv_redis_create(&p, &r), PKV_ERR_INVALID_ARGUMENT);
    assert_true(strstr(pkv_redis_last_error(), "key_prefix") != NULL);
    prefix[64] = '\0'; /* 64 bytes: the longest */
    assert_int_equal(pkv_redis_create(&p, &r), PKV_OK);
    pkv_redis_destroy(r);

    pkv_redis_params q = p;
    q.host = NULL;
    assert_int_equal(pkv_redis_create(&q, &r), PKV_ERR_INVALID_ARGUMENT);
    q = p;
    q.port = 0;
    assert_int_equal(pkv_redis_create(&q, &r), PKV_ERR_INVALID_ARGUMENT);
    q.port = 65536;
    assert_int_equal(pkv_redis_create(&q, &r), PKV_ERR_INVALID_ARGUMENT);
    q = p;
    q.timeout_ms = 0;
    assert_int_equal(pkv_redis_create(&q, &r), PKV_ERR_INVALID_ARGUMENT);
    /* Bounded: destroy waits up to timeout_ms for a connect. */
    q.timeout_ms = 60001;
    assert_int_equal(pkv_redis_create(&q, &r), PKV_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(pkv_redis_last_error(), "1 to 60000"));
    q.timeout_ms = 60000;
    q.retry_ms = 60001;
    assert_int_equal(pkv_redis_create(&q, &r), PKV_ERR_INVALID_ARGUMENT);
    q.retry_ms = 60000;
    assert_int_equal(pkv_redis_create(&q, &r), PKV_OK);
    pkv_redis_destroy(r);
    q = p;
    q.reserved0 = 1;
    assert_int_equal(pkv_redis_create(&q, &r), PKV_ERR_INVALID_ARGUMENT);
    q = p;
    q.reserved1 = 1;
    assert_int_equal(pkv_redis_create(&q, &r), PKV_ERR_INVALID_ARGUMENT);
    /* AUTH's strings are bounded, a username needs a password, and no
     * message shows the password. */
    char secret[600];
    memset(secret, 'w', sizeof secret);
    secret[513] = '\0';
    q = p;
    q.password = secret;
    assert_int_equal(pkv_redis_create(&q, &r), PKV_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(pkv_redis_last_error(), "or password is longer"));
    assert_null(strstr(pkv_redis_last_error(), "wwww"));
    secret[512] = '\0';
    assert_int_equal(pkv_redis_create(&q, &r), PKV_OK);
    pkv_redis_destroy(r);
    char user[200];
    memset(user, 'u', sizeof user);
    user[129] = '\0';
    q.username = user;
    assert_int_equal(pkv_redis_create(&q, &r), PKV_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(pkv_redis_last_error(), "username or password"));
    user[128] = '\0';
    assert_int_equal(pkv_redis_create(&q, &r), PKV_OK);
    pkv_redis_destroy(r);
    q.password = NULL;
    assert_int_equal(pkv_redis_create(&q, &r), PKV_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(pkv_redis_last_error(), "needs a password"));
    /* A program built before AUTH's fields passes a shorter struct: it
     * gets no AUTH and no SELECT, whatever lies past its end. */
    q = p;
    q.struct_size = (uint32_t)offsetof(pkv_redis_params, username);
    q.username = user;
    q.reserved1 = 7;
    assert_int_equal(pkv_redis_create(&q, &r), PKV_OK);
    pkv_redis_destroy(r);
    q = p;
    char path[200];
    memset(path, 's', sizeof path);
    path[sizeof path - 1] = '\0';
    q.unix_path = path;
    assert_int_equal(pkv_redis_create(&q, &r), PKV_ERR_INVALID_ARGUMENT);
    q = p;
    q.struct_size = 8;
    assert_int_equal(pkv_redis_create(&q, &r), PKV_ERR_STRUCT_SIZE);
    q.struct_size = sizeof q + 8;
    assert_int_equal(pkv_redis_create(&q, &r), PKV_ERR_STRUCT_SIZE);
    assert_true(strstr(pkv_redis_last_error(), "struct_size") != NULL);
    assert_null(r);

    /* No server on this port: create still succeeds (connects later). */
    q = p;
    q.port = 1;
    assert_int_equal(pkv_redis_create(&q, &r), PKV_OK);
    pkv_store s;
    memset(&s, 0, sizeof s);
    assert_int_equal(pkv_redis_store(NULL, &s), PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(pkv_redis_store(r, NULL), PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(pkv_redis_store(r, &s), PKV_ERR_STRUCT_SIZE);
    s.struct_size = sizeof s;
    assert_int_equal(pkv_redis_store(r, &s), PKV_OK);
    assert_ptr_equal(s.user, r);
    assert_non_null(s.load);
    assert_non_null(s.save);
    assert_non_null(s.poll);
    assert_non_null(s.cancel);
    /* One connector serves one engine: a second store is refused,
     * untouched. */
    pkv_store second;
    memset(&second, 0, sizeof second);
    second.struct_size = sizeof second;
    assert_int_equal(pkv_redis_store(r, &second), PKV_ERR_BAD_STATE);
    assert_non_null(strstr(pkv_redis_last_error(), "one connector per"));
    assert_null(second.user);
    assert_null(second.load);

    pkv_redis_stats st;
    assert_int_equal(pkv_redis_stats_init(NULL), PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(pkv_redis_stats_init(&st), PKV_OK);
    assert_int_equal(st.struct_size, sizeof st);
    assert_int_equal(pkv_redis_get_stats(NULL, &st),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(pkv_redis_get_stats(r, NULL), PKV_ERR_INVALID_ARGUMENT);
    st.struct_size = 4;
    assert_int_equal(pkv_redis_get_stats(r, &st), PKV_ERR_STRUCT_SIZE);
    pkv_redis_destroy(r);
    pkv_redis_destroy(NULL);
}

/* load and save refuse what they cannot send, and start nothing. */
static void test_bad_ops(void **state)
{
    (void)state;
    conn c;
    open_conn(&c, &shared, "bad:", 500, 0);
    void *u = c.store.user;
    unsigned char buf[16];
    uint64_t sizes[2];
    char long_key[PKV_STORE_KEY_MAX + 1];
    memset(long_key, 'k', sizeof long_key);
    long_key[PKV_STORE_KEY_MAX] = '\0'; /* 88 characters: too long */
    const char *keys[2] = {"a", long_key};
    const char *null_key[1] = {NULL};
    assert_int_equal(c.store.load(u, 1, NULL, 1, buf, 8, sizes),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(c.store.load(u, 1, keys, 0, buf, 8, sizes),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(c.store.load(u, 1, keys, 2, buf, 8, sizes),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(c.store.load(u, 1, null_key, 1, buf, 8, sizes),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(c.store.load(u, 1, keys, 1, NULL, 8, sizes),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(c.store.load(u, 1, keys, 1, buf, 8, NULL),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(c.store.save(u, 1, NULL, buf, 8),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(c.store.save(u, 1, long_key, buf, 8),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(c.store.save(u, 1, "a", NULL, 8),
                     PKV_ERR_INVALID_ARGUMENT);
    pkv_store_done d[1];
    assert_int_equal(poll_until(&c, d, 1, 100), 0);
    assert_int_equal(get_stats(&c).commands, 0);

    /* The longest key, with the longest prefix. */
    long_key[PKV_STORE_KEY_MAX - 1] = '\0';
    close_conn(&c);
    char prefix[65];
    memset(prefix, 'x', 64);
    prefix[64] = '\0';
    open_conn(&c, &shared, prefix, 500, 0);
    fill(buf, 8, 3);
    assert_int_equal(save_sync(&c, 2, long_key, buf, 8), PKV_OK);
    redisReply *r = rs_command(&shared, "STRLEN %s%s", prefix, long_key);
    assert_non_null(r);
    assert_int_equal(r->integer, 8);
    freeReplyObject(r);
    close_conn(&c);
}

/* ----------------------------------------------------------- round trip */

static void test_roundtrip(void **state)
{
    (void)state;
    enum { N = 3, SIZE = 100 };
    conn c;
    open_conn(&c, &shared, "rt:", 500, 0);
    unsigned char in[N][SIZE];
    const char *keys[N + 1] = {"k0", "k1", "k2", "missing"};
    for (unsigned i = 0; i < N; i++) {
        fill(in[i], SIZE, i + 1);
        in[i][5] = 0; /* binary: NULs and \r\n inside */
        in[i][6] = '\r';
        in[i][7] = '\n';
        assert_int_equal(save_sync(&c, 10 + i, keys[i], in[i], SIZE),
                         PKV_OK);
    }
    unsigned char out[N + 1][SIZE];
    uint64_t sizes[N + 1];
    memset(out, 0xAA, sizeof out);
    memset(sizes, 0xFF, sizeof sizes);
    assert_int_equal(load_sync(&c, 20, keys, N + 1, out, SIZE, sizes),
                     PKV_OK);
    for (unsigned i = 0; i < N; i++) {
        assert_int_equal(sizes[i], SIZE);
        assert_memory_equal(out[i], in[i], SIZE);
    }
    assert_int_equal(sizes[N], 0);
    assert_true(all_bytes(out[N], SIZE, 0xAA));

    /* What the server holds, under the prefix. */
    redisReply *r = rs_command(&shared, "GET rt:k1");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_int_equal(r->len, SIZE);
    assert_memory_equal(r->str, in[1], SIZE);
    freeReplyObject(r);

    /* Two connections: the loads' (made at create) and the saves'. */
    pkv_redis_stats s = get_stats(&c);
    assert_int_equal(s.connected, 2);
    assert_int_equal(s.connects, 2);
    assert_int_equal(s.connect_failures, 0);
    assert_int_equal(s.commands, N + 1);
    assert_int_equal(s.errors, 0);
    assert_int_equal(s.bytes_written, N * SIZE);
    assert_int_equal(s.bytes_read, N * SIZE);

    /* An empty value. */
    assert_int_equal(save_sync(&c, 30, "empty", NULL, 0), PKV_OK);
    r = rs_command(&shared, "STRLEN rt:empty");
    assert_non_null(r);
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
    close_conn(&c);
}

/* A value longer than value_size: its full length in sizes, only
 * value_size bytes written; a shorter one writes only its bytes. */
static void test_long_value(void **state)
{
    (void)state;
    enum { SIZE = 64 };
    unsigned char big[300], small[10];
    fill(big, sizeof big, 9);
    fill(small, sizeof small, 4);
    redisReply *r = rs_command(&shared, "SET lv:big %b", (const void *)big,
                               sizeof big);
    assert_non_null(r);
    freeReplyObject(r);
    r = rs_command(&shared, "SET lv:small %b", (const void *)small,
                   sizeof small);
    assert_non_null(r);
    freeReplyObject(r);

    conn c;
    open_conn(&c, &shared, "lv:", 500, 0);
    unsigned char out[3 * SIZE]; /* two slots and a guard */
    uint64_t sizes[2];
    memset(out, 0xAA, sizeof out);
    const char *keys[2] = {"big", "small"};
    assert_int_equal(load_sync(&c, 1, keys, 2, out, SIZE, sizes), PKV_OK);
    assert_int_equal(sizes[0], sizeof big);
    assert_memory_equal(out, big, SIZE);
    assert_int_equal(sizes[1], sizeof small);
    assert_memory_equal(out + SIZE, small, sizeof small);
    assert_true(all_bytes(out + SIZE + sizeof small,
                          2 * SIZE - sizeof small, 0xAA));
    assert_int_equal(get_stats(&c).bytes_read, sizeof big + sizeof small);
    close_conn(&c);
}

/* Values larger than the connector's 1 MiB read buffer (read straight
 * into their slot), one just over it, a small one after them; then the
 * large one into a smaller slot (its rest read and dropped). */
static void test_large_values(void **state)
{
    (void)state;
    enum { MIB = 1 << 20, SLOT = 3 * MIB };
    const size_t lens[3] = {3 * MIB, MIB + 7, 5};
    const char *names[3] = {"lg:a", "lg:b", "lg:c"};
    unsigned char *in[3], *out = malloc(3 * (size_t)SLOT + 64);
    assert_non_null(out);
    for (int i = 0; i < 3; i++) {
        in[i] = malloc(lens[i]);
        assert_non_null(in[i]);
        fill(in[i], lens[i], (unsigned)i + 3);
        redisReply *r = rs_command(&shared, "SET %s %b", names[i],
                                   (const void *)in[i], lens[i]);
        assert_non_null(r);
        freeReplyObject(r);
    }
    conn c;
    open_conn(&c, &shared, "lg:", 2000, 0);
    const char *keys[3] = {"a", "b", "c"};
    uint64_t sizes[3];
    memset(out, 0xAA, 3 * (size_t)SLOT + 64);
    assert_int_equal(load_sync(&c, 1, keys, 3, out, SLOT, sizes), PKV_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(sizes[i], lens[i]);
        assert_memory_equal(out + (size_t)i * SLOT, in[i], lens[i]);
    }
    assert_true(all_bytes(out + 2 * (size_t)SLOT + 5, SLOT - 5 + 64, 0xAA));
    /* 9 MiB of staging for that load, past the 8 MiB kept between loads:
     * freed once it is done; the read buffer and the sizes stay. */
    const uint64_t kept = MIB + 3 * sizeof(uint64_t);
    assert_int_equal(get_stats(&c).buffer_bytes, kept);
    /* The 3 MiB value into a 2 MiB slot, then the small one. */
    const char *two[2] = {"a", "c"};
    memset(out, 0xAA, 3 * (size_t)SLOT + 64);
    assert_int_equal(load_sync(&c, 2, two, 2, out, 2 * MIB, sizes), PKV_OK);
    assert_int_equal(sizes[0], lens[0]);
    assert_memory_equal(out, in[0], 2 * MIB);
    assert_int_equal(sizes[1], lens[2]);
    assert_memory_equal(out + 2 * MIB, in[2], lens[2]);
    assert_true(all_bytes(out + 2 * MIB + 5, 64, 0xAA));
    /* 4 MiB of staging: kept for the next load. */
    assert_int_equal(get_stats(&c).buffer_bytes, kept + 4 * MIB);
    close_conn(&c);
    for (int i = 0; i < 3; i++)
        free(in[i]);
    free(out);
}

/* A thousand keys: saves reported in order, then one MGET for all. */
static void test_many_keys(void **state)
{
    (void)state;
    enum { N = 1000, SIZE = 32 };
    conn c;
    open_conn(&c, &shared, "many:", 2000, 0);
    static char names[N][16];
    static const char *keys[N];
    static unsigned char in[N][SIZE], out[N][SIZE];
    static uint64_t sizes[N];
    static pkv_store_done done[N];
    for (unsigned i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "key%u", i);
        keys[i] = names[i];
        fill(in[i], SIZE, i);
        assert_int_equal(c.store.save(c.store.user, 1000 + i, keys[i],
                                      in[i], SIZE),
                         PKV_OK);
    }
    assert_int_equal(poll_until(&c, done, N, 10000), N);
    for (unsigned i = 0; i < N; i++) {
        assert_int_equal(done[i].ticket, 1000 + i);
        assert_int_equal(done[i].status, PKV_OK);
    }
    uint64_t commands = get_stats(&c).commands;
    assert_int_equal(load_sync(&c, 7, keys, N, out, SIZE, sizes), PKV_OK);
    assert_int_equal(get_stats(&c).commands, commands + 1);
    for (unsigned i = 0; i < N; i++)
        assert_int_equal(sizes[i], SIZE);
    assert_memory_equal(out, in, sizeof in);
    close_conn(&c);
}

/* Two prefixes, the same key: each connector sees its own value. */
static void test_prefix(void **state)
{
    (void)state;
    conn a, b;
    open_conn(&a, &shared, "ns-a:", 500, 0);
    open_conn(&b, &shared, "ns-b:", 500, 0);
    assert_int_equal(save_sync(&a, 1, "key", "from a", 6), PKV_OK);
    assert_int_equal(save_sync(&b, 1, "key", "from b!", 7), PKV_OK);
    char out[16];
    uint64_t size;
    const char *keys[1] = {"key"};
    assert_int_equal(load_sync(&a, 2, keys, 1, out, sizeof out, &size),
                     PKV_OK);
    assert_int_equal(size, 6);
    assert_memory_equal(out, "from a", 6);
    assert_int_equal(load_sync(&b, 2, keys, 1, out, sizeof out, &size),
                     PKV_OK);
    assert_int_equal(size, 7);
    assert_memory_equal(out, "from b!", 7);
    redisReply *r = rs_command(&shared, "EXISTS key");
    assert_non_null(r);
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
    r = rs_command(&shared, "GET ns-a:key");
    assert_non_null(r);
    assert_string_equal(r->str, "from a");
    freeReplyObject(r);
    close_conn(&a);
    close_conn(&b);
}

static long long ttl_of(const char *key)
{
    redisReply *r = rs_command(&shared, "TTL %s", key);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    long long ttl = r->integer;
    freeReplyObject(r);
    return ttl;
}

static void test_ttl(void **state)
{
    (void)state;
    conn c;
    open_conn(&c, &shared, "ttl:", 500, 100);
    assert_int_equal(save_sync(&c, 1, "a", "v", 1), PKV_OK);
    long long ttl = ttl_of("ttl:a");
    assert_true(ttl > 90 && ttl <= 100);
    close_conn(&c);
    open_conn(&c, &shared, "ttl:", 500, 0);
    assert_int_equal(save_sync(&c, 2, "b", "v", 1), PKV_OK);
    assert_int_equal(ttl_of("ttl:b"), -1); /* no expiry */
    close_conn(&c);
}

/* The ticket after t of its kind in test_poll_order: saves are those
 * that are multiples of 3, loads the others. */
static uint64_t next_of_kind(uint64_t t)
{
    uint64_t n = t + 1;
    while ((n % 3 == 0) != (t % 3 == 0))
        n++;
    return n;
}

/* Operations are reported once each, a few at a time, loads in the order
 * they were started and saves in theirs; poll on nothing returns at once.
 */
static void test_poll_order(void **state)
{
    (void)state;
    enum { N = 200, SIZE = 8 };
    conn c;
    open_conn(&c, &shared, "fifo:", 500, 0);
    static unsigned char values[N][SIZE];
    static uint64_t sizes[N];
    for (unsigned i = 0; i < N; i++) {
        char key[16];
        snprintf(key, sizeof key, "k%u", i % 10);
        const char *keys[1] = {key};
        pkv_status st = i % 3 == 0
                            ? c.store.save(c.store.user, i, key, "12345678",
                                           SIZE)
                            : c.store.load(c.store.user, i, keys, 1,
                                           values[i], SIZE, &sizes[i]);
        assert_int_equal(st, PKV_OK);
    }
    pkv_store_done done[3];
    uint64_t next_save = 0, next_load = 1; /* i % 3 == 0: saves */
    uint32_t got = 0;
    uint64_t end = now_ms() + 10000;
    while (got < N && now_ms() < end) {
        assert_int_equal(c.store.poll(c.store.user, done, 0), 0);
        uint32_t n = c.store.poll(c.store.user, done, 3);
        assert_true(n <= 3);
        for (uint32_t i = 0; i < n; i++, got++) {
            uint64_t *next = done[i].ticket % 3 == 0 ? &next_save
                                                     : &next_load;
            assert_int_equal(done[i].ticket, *next);
            *next = next_of_kind(*next);
            assert_int_equal(done[i].status, PKV_OK);
            assert_int_equal(done[i].reserved0, 0);
        }
    }
    assert_int_equal(got, N);
    uint64_t t0 = now_ms();
    for (int i = 0; i < 1000; i++)
        assert_int_equal(c.store.poll(c.store.user, done, 3), 0);
    assert_true(now_ms() - t0 < 500);
    close_conn(&c);
}

/* A load does not wait for the saves: with a save in flight to a frozen
 * server and two more queued behind it, the load goes out at once on its
 * own connection. Saves finish in the order they were started. */
static void test_load_first(void **state)
{
    rs_server *rs = *state;
    conn c;
    open_conn(&c, rs, "lf1:", 3000, 0);
    assert_int_equal(save_sync(&c, 1, "a", "v", 1), PKV_OK);
    rs_stop_process(rs);
    assert_int_equal(c.store.save(c.store.user, 2, "a", "v", 1), PKV_OK);
    wait_commands(&c, 2); /* in flight */
    const char *keys[1] = {"a"};
    char out[4];
    uint64_t size;
    assert_int_equal(c.store.save(c.store.user, 3, "b", "v", 1), PKV_OK);
    assert_int_equal(c.store.save(c.store.user, 4, "c", "v", 1), PKV_OK);
    assert_int_equal(c.store.load(c.store.user, 5, keys, 1, out, sizeof out,
                                  &size),
                     PKV_OK);
    wait_commands(&c, 3); /* the load: sent while the save waits */
    rs_continue(rs);
    pkv_store_done d[4];
    assert_int_equal(poll_until(&c, d, 4, 3000), 4);
    uint64_t saves[3], n = 0;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(d[i].status, PKV_OK);
        if (d[i].ticket != 5)
            saves[n++] = d[i].ticket;
    }
    assert_int_equal(n, 3);
    assert_int_equal(saves[0], 2);
    assert_int_equal(saves[1], 3);
    assert_int_equal(saves[2], 4);
    assert_int_equal(size, 1);
    close_conn(&c);
}

/* A ticket already in the connector (queued, running or done but not
 * polled) is refused: only two engines sharing one store could send one,
 * and cancel and poll match by ticket alone. Once polled, it is free. */
static void test_ticket_in_flight(void **state)
{
    (void)state;
    conn c;
    open_conn(&c, &shared, "tf:", 500, 0);
    unsigned char out[8];
    uint64_t size;
    const char *keys[1] = {"k"};
    void *u = c.store.user;
    assert_int_equal(c.store.save(u, 5, "k", "abcdefgh", 8), PKV_OK);
    assert_int_equal(c.store.load(u, 5, keys, 1, out, 8, &size),
                     PKV_ERR_BAD_STATE);
    assert_int_equal(c.store.save(u, 5, "k", "abcdefgh", 8),
                     PKV_ERR_BAD_STATE);
    pkv_store_done d[2];
    assert_int_equal(poll_until(&c, d, 1, 1000), 1);
    assert_int_equal(d[0].ticket, 5);
    assert_int_equal(d[0].status, PKV_OK);
    assert_int_equal(c.store.load(u, 5, keys, 1, out, 8, &size), PKV_OK);
    assert_int_equal(poll_until(&c, d, 1, 1000), 1);
    assert_int_equal(d[0].status, PKV_OK);
    assert_int_equal(size, 8);
    assert_memory_equal(out, "abcdefgh", 8);
    assert_int_equal(poll_until(&c, d, 1, 100), 0);
    close_conn(&c);
}

/* A connection the server closes while idle (its `timeout`) is found
 * before the next command, which goes out on a new connection: the load
 * after an idle close hits. */
static void test_idle_close(void **state)
{
    (void)state;
    conn c;
    open_conn(&c, &shared, "ic:", 500, 0);
    assert_int_equal(save_sync(&c, 1, "k", "abcdefgh", 8), PKV_OK);
    redisReply *r = rs_command(&shared, "CONFIG SET timeout 1");
    assert_non_null(r);
    freeReplyObject(r);
    /* Redis checks its idle clients about ten times a second. */
    sleep_ms(3000);
    unsigned char out[8];
    uint64_t size;
    const char *keys[1] = {"k"};
    assert_int_equal(c.store.load(c.store.user, 2, keys, 1, out, 8, &size),
                     PKV_OK);
    pkv_store_done d[1];
    assert_int_equal(poll_until(&c, d, 1, 1000), 1);
    assert_int_equal(d[0].status, PKV_OK);
    assert_int_equal(size, 8);
    assert_memory_equal(out, "abcdefgh", 8);
    r = rs_command(&shared, "CONFIG SET timeout 0");
    assert_non_null(r);
    freeReplyObject(r);
    /* Both connections were closed; the loads' was found and made
     * again. */
    pkv_redis_stats s = get_stats(&c);
    assert_int_equal(s.idle_closes, 1);
    assert_int_equal(s.errors, 0);
    assert_int_equal(s.connects, 3);
    close_conn(&c);
}

/* --------------------------------------------------- a hostile server */

/* A server on a loopback port that answers the first command of each
 * connection with `head`, then either `body` over and over until the
 * connection is closed (flood) or one byte of body every drip_ms. Each
 * connection has a thread of its own (a connector makes two). */
enum { HOSTILE_CONNECTIONS = 16 };
typedef struct hostile {
    int listen_fd;
    int port;
    const char *head;
    const char *body;
    long drip_ms;
    pthread_t thread;
    pthread_t handlers[HOSTILE_CONNECTIONS];
    int fds[HOSTILE_CONNECTIONS];
    int connections;
} hostile;

typedef struct hostile_conn {
    hostile *h;
    int fd;
} hostile_conn;

static void *hostile_serve(void *arg)
{
    hostile_conn *hc = arg;
    const hostile *h = hc->h;
    int fd = hc->fd;
    free(hc);
    char command[4096];
    if (recv(fd, command, sizeof command, 0) > 0 &&
        send(fd, h->head, strlen(h->head), MSG_NOSIGNAL) > 0) {
        size_t len = strlen(h->body);
        for (size_t i = 0;; i = (i + 1) % len) {
            if (h->drip_ms > 0) {
                sleep_ms(h->drip_ms);
                if (send(fd, h->body + i, 1, MSG_NOSIGNAL) != 1)
                    break;
            } else if (send(fd, h->body, len, MSG_NOSIGNAL) <= 0) {
                break;
            }
        }
    }
    return NULL;
}

static void *hostile_main(void *arg)
{
    hostile *h = arg;
    while (h->connections < HOSTILE_CONNECTIONS) {
        int fd = accept(h->listen_fd, NULL, NULL);
        if (fd < 0)
            break;
        hostile_conn *hc = malloc(sizeof *hc);
        assert_non_null(hc);
        hc->h = h;
        hc->fd = fd;
        h->fds[h->connections] = fd;
        assert_int_equal(pthread_create(&h->handlers[h->connections], NULL,
                                        hostile_serve, hc),
                         0);
        h->connections++;
    }
    return NULL;
}

static void hostile_start(hostile *h, const char *head, const char *body,
                          long drip_ms)
{
    memset(h, 0, sizeof *h);
    h->head = head;
    h->body = body;
    h->drip_ms = drip_ms;
    h->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(h->listen_fd >= 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    assert_int_equal(bind(h->listen_fd, (struct sockaddr *)&a, len), 0);
    assert_int_equal(listen(h->listen_fd, 4), 0);
    assert_int_equal(getsockname(h->listen_fd, (struct sockaddr *)&a, &len),
                     0);
    h->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&h->thread, NULL, hostile_main, h), 0);
}

/* After the connector that talked to it is destroyed (its connections
 * closed, so a flood's send or a wait for a command ends). */
static void hostile_stop(hostile *h)
{
    shutdown(h->listen_fd, SHUT_RDWR); /* ends the accept */
    pthread_join(h->thread, NULL);
    for (int i = 0; i < h->connections; i++) {
        pthread_join(h->handlers[i], NULL);
        close(h->fds[i]);
    }
    close(h->listen_fd);
}

static long max_rss_kib(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

/* A SET answered by an array announcing 10^8 elements, then integers
 * without end: the save fails at once and the process does not grow
 * (hiredis's reader took 2 GB in 10 s). */
static void test_hostile_set_reply(void **state)
{
    (void)state;
    hostile h;
    hostile_start(&h, "*100000000\r\n", ":1\r\n", 0);
    rs_server fake = {0};
    fake.port = h.port;
    conn c;
    long before = max_rss_kib();
    open_conn(&c, &fake, "", 500, 0);
    uint64_t t0 = now_ms();
    assert_int_equal(c.store.save(c.store.user, 1, "k", "v", 1), PKV_OK);
    assert_int_equal(wait_op(&c, 1), PKV_ERR_STORE);
    assert_true(now_ms() - t0 < 5000);
    close_conn(&c);
    hostile_stop(&h);
    assert_true(max_rss_kib() - before < 64 * 1024);
}

/* A load whose reply drips in a byte every 200 ms: each receive is within
 * the socket's timeout, but the whole reply is not within 4 timeouts, so
 * the load fails after about 2 s, not the 20 s the reply would take. */
static void test_hostile_drip(void **state)
{
    (void)state;
    hostile h;
    hostile_start(&h, "*1\r\n", "$90\r\n0123456789012345678901234567890"
                                  "1234567890123456789012345678901234567"
                                  "8901234567890123456789\r\n", 200);
    rs_server fake = {0};
    fake.port = h.port;
    conn c;
    open_conn(&c, &fake, "", 500, 0);
    unsigned char out[100];
    uint64_t size;
    const char *keys[1] = {"k"};
    uint64_t t0 = now_ms();
    assert_int_equal(c.store.load(c.store.user, 1, keys, 1, out, 100, &size),
                     PKV_OK);
    assert_int_equal(wait_op(&c, 1), PKV_ERR_STORE);
    uint64_t took = now_ms() - t0;
    print_message("a dripping reply failed after %llu ms\n",
                  (unsigned long long)took);
    assert_true(took >= 1900 && took < 10000); /* the reply: 20 s */
    close_conn(&c);
    hostile_stop(&h);
}

/* ------------------------------------------------ slow and lost links */

/* A connector to the shared server through a proxy (tcp_proxy.h). */
static void open_via(conn *c, tp_proxy **proxy, uint32_t timeout_ms)
{
    assert_int_equal(tp_start(proxy, shared.port), 0);
    rs_server via = {0};
    via.port = tp_port(*proxy);
    open_conn(c, &via, "via:", timeout_ms, 0);
}

/* The status of ticket, which must be reported within ms; the time it
 * took from t0 in *took. */
static int32_t wait_ticket(conn *c, uint64_t ticket, long ms, uint64_t t0,
                           uint64_t *took)
{
    pkv_store_done d;
    assert_int_equal(poll_until(c, &d, 1, ms), 1);
    assert_int_equal(d.ticket, ticket);
    *took = now_ms() - t0;
    return d.status;
}

/* Load key as ticket, which must arrive within ms holding `expect`: the
 * time it took, printed after `what`. */
static uint64_t timed_load(conn *c, uint64_t ticket, const char *key,
                           const char *expect, long ms, const char *what)
{
    const char *keys[1] = {key};
    char out[16];
    uint64_t size, took, t0 = now_ms();
    assert_int_equal(c->store.load(c->store.user, ticket, keys, 1, out,
                                   sizeof out, &size),
                     PKV_OK);
    assert_int_equal(wait_ticket(c, ticket, ms, t0, &took), PKV_OK);
    print_message("%s: %llu ms\n", what, (unsigned long long)took);
    assert_int_equal(size, strlen(expect));
    assert_memory_equal(out, expect, strlen(expect));
    return took;
}

/* A server that reads a few KiB every 250 ms while a 16 MiB SET goes
 * out: the save fails by its deadline (4 x timeout_ms, the server having
 * taken some of it in every wait), and a load started behind it goes out
 * on its own connection and arrives at once. Socket timeouts per send
 * held such a save for tens of seconds and every load behind it. */
static void test_slow_reader(void **state)
{
    (void)state;
    conn c;
    tp_proxy *proxy;
    open_via(&c, &proxy, 500);
    assert_int_equal(save_sync(&c, 1, "small", "abcd", 4), PKV_OK);
    tp_throttle(proxy, 4096, 250);
    enum { BIG = 16 << 20 };
    unsigned char *big = malloc(BIG);
    assert_non_null(big);
    fill(big, BIG, 3);
    uint64_t t0 = now_ms();
    assert_int_equal(c.store.save(c.store.user, 2, "big", big, BIG), PKV_OK);
    sleep_ms(100);
    timed_load(&c, 3, "small", "abcd", 1500, "a load behind a slow save");
    uint64_t took;
    assert_int_equal(wait_ticket(&c, 2, 4000, t0, &took), PKV_ERR_STORE);
    print_message("the slow save failed after %llu ms\n",
                  (unsigned long long)took);
    assert_true(took >= 1900 && took < 3500);
    const char *why = connection_error(&c);
    print_message("why: %s\n", why);
    assert_non_null(strstr(why, "SET: no answer in time"));
    free(big);
    /* At full speed again: the next save connects again and lands. */
    tp_throttle(proxy, 0, 0);
    assert_int_equal(save_sync(&c, 4, "after", "x", 1), PKV_OK);
    assert_string_equal(connection_error(&c), "");
    close_conn(&c);
    tp_stop(proxy);
}

/* Connections forgotten by a NAT after a second's rest: the load that
 * finds its connection dead gets no answer within timeout_ms and is sent
 * again on a new connection, so it hits (retries); a save fails, and
 * the next save connects again. */
static void test_forgotten_connection(void **state)
{
    (void)state;
    conn c;
    tp_proxy *proxy;
    open_via(&c, &proxy, 300);
    assert_int_equal(save_sync(&c, 1, "k", "value", 5), PKV_OK);
    timed_load(&c, 2, "k", "value", 1000, "a load");
    sleep_ms(1100);
    tp_forget(proxy);
    uint64_t took = timed_load(&c, 3, "k", "value", 3000,
                               "a load on a forgotten connection");
    assert_true(took >= 250 && took < 1000);
    pkv_redis_stats s = get_stats(&c);
    assert_int_equal(s.retries, 1);
    assert_int_equal(s.errors, 0);
    assert_int_equal(s.connects, 3);
    /* A save is not sent again. */
    assert_int_equal(save_sync(&c, 4, "k", "other", 5), PKV_ERR_STORE);
    assert_int_equal(save_sync(&c, 5, "k", "third", 5), PKV_OK);
    s = get_stats(&c);
    assert_int_equal(s.retries, 1);
    assert_int_equal(s.connects, 4);
    close_conn(&c);
    tp_stop(proxy);
}

/* A finished op cancelled before it is polled is never reported. */
static void test_cancel_done(void **state)
{
    (void)state;
    conn c;
    open_conn(&c, &shared, "cd:", 500, 0);
    unsigned char out[8];
    uint64_t size;
    const char *keys[1] = {"k"};
    assert_int_equal(c.store.save(c.store.user, 1, "k", "abcdefgh", 8),
                     PKV_OK);
    assert_int_equal(c.store.load(c.store.user, 2, keys, 1, out, 8, &size),
                     PKV_OK);
    assert_int_equal(c.store.save(c.store.user, 3, "k", "abcdefgh", 8),
                     PKV_OK);
    wait_commands(&c, 3);
    sleep_ms(50); /* the last reply */
    c.store.cancel(c.store.user, 2);
    c.store.cancel(c.store.user, 99); /* unknown: nothing happens */
    pkv_store_done d[3];
    assert_int_equal(poll_until(&c, d, 3, 300), 2);
    assert_int_equal(d[0].ticket, 1);
    assert_int_equal(d[1].ticket, 3);
    close_conn(&c);
}

/* A hung server (SIGSTOP) holds a save and a load in flight (each on its
 * connection) and a save queued behind the first: all are cancelled; when
 * the server resumes, the save it had received lands (its value was
 * copied before cancel returned: the buffer is freed at once), the queued
 * one was never sent, nothing is reported and the load's buffers are as
 * they were. */
static void test_cancel_queued(void **state)
{
    rs_server *rs = *state;
    conn c;
    open_conn(&c, rs, "cq:", 3000, 0);
    assert_int_equal(save_sync(&c, 1, "warm", "x", 1), PKV_OK);
    rs_stop_process(rs);
    unsigned char *value = malloc(64);
    assert_non_null(value);
    fill(value, 64, 1);
    unsigned char expect[64];
    memcpy(expect, value, 64);
    assert_int_equal(c.store.save(c.store.user, 2, "sent", value, 64),
                     PKV_OK);
    wait_commands(&c, 2); /* in flight: written, no reply */
    unsigned char out[64];
    uint64_t size = 12345;
    memset(out, 0x5A, sizeof out);
    const char *keys[1] = {"sent"};
    unsigned char *late = malloc(64);
    assert_non_null(late);
    memset(late, 1, 64);
    assert_int_equal(c.store.load(c.store.user, 3, keys, 1, out, 64, &size),
                     PKV_OK);
    assert_int_equal(c.store.save(c.store.user, 4, "never", late, 64),
                     PKV_OK);
    wait_commands(&c, 3); /* the load, in flight too */
    c.store.cancel(c.store.user, 3);
    c.store.cancel(c.store.user, 4);
    c.store.cancel(c.store.user, 2);
    free(value);
    free(late);
    rs_continue(rs);
    pkv_store_done d[1];
    assert_int_equal(poll_until(&c, d, 1, 300), 0);
    assert_true(all_bytes(out, sizeof out, 0x5A));
    assert_int_equal(size, 12345);
    assert_int_equal(get_stats(&c).commands, 3);

    redisReply *r = rs_command(rs, "GET cq:sent");
    assert_non_null(r);
    assert_int_equal(r->len, 64);
    assert_memory_equal(r->str, expect, 64);
    freeReplyObject(r);
    r = rs_command(rs, "EXISTS cq:never");
    assert_non_null(r);
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);

    /* The connections are in step: the cancelled ops' replies were
     * read. */
    assert_int_equal(load_sync(&c, 5, keys, 1, out, 64, &size), PKV_OK);
    assert_int_equal(size, 64);
    assert_memory_equal(out, expect, 64);
    assert_int_equal(save_sync(&c, 6, "after", "y", 1), PKV_OK);
    assert_int_equal(get_stats(&c).connects, 2);
    close_conn(&c);
}

/* A load cancelled in flight whose reply arrives after the cancel: the
 * values are not written and it is not reported. */
static void test_cancel_load_in_flight(void **state)
{
    rs_server *rs = *state;
    unsigned char value[32];
    fill(value, sizeof value, 2);
    redisReply *r = rs_command(rs, "SET lf:k %b", (const void *)value,
                               sizeof value);
    assert_non_null(r);
    freeReplyObject(r);
    conn c;
    open_conn(&c, rs, "lf:", 3000, 0);
    const char *keys[1] = {"k"};
    uint64_t size = 777;
    unsigned char out[32];
    memset(out, 0x5A, sizeof out);
    assert_int_equal(load_sync(&c, 1, keys, 1, out, sizeof out, &size),
                     PKV_OK); /* connected */
    memset(out, 0x5A, sizeof out);
    size = 777;
    rs_stop_process(rs);
    assert_int_equal(c.store.load(c.store.user, 2, keys, 1, out, sizeof out,
                                  &size),
                     PKV_OK);
    wait_commands(&c, 2);
    c.store.cancel(c.store.user, 2);
    rs_continue(rs);
    /* The reply comes now; the worker reads it and drops it. */
    uint64_t end = now_ms() + 3000;
    while (get_stats(&c).bytes_read < 2 * sizeof value && now_ms() < end)
        sleep_ms(1);
    assert_int_equal(get_stats(&c).bytes_read, 2 * sizeof value);
    pkv_store_done d[1];
    assert_int_equal(poll_until(&c, d, 1, 100), 0);
    assert_true(all_bytes(out, sizeof out, 0x5A));
    assert_int_equal(size, 777);
    assert_int_equal(get_stats(&c).errors, 0);
    close_conn(&c);
}

/* Destroy with operations queued and in flight: nothing leaks. */
static void test_destroy_busy(void **state)
{
    (void)state;
    enum { N = 100, SIZE = 4096 };
    conn c;
    open_conn(&c, &shared, "busy:", 500, 0);
    static unsigned char value[SIZE];
    static unsigned char out[N][SIZE];
    static uint64_t sizes[N];
    for (unsigned i = 0; i < N; i++) {
        char key[16];
        snprintf(key, sizeof key, "k%u", i);
        const char *keys[1] = {key};
        pkv_status st = i % 2
                            ? c.store.save(c.store.user, i, key, value, SIZE)
                            : c.store.load(c.store.user, i, keys, 1, out[i],
                                           SIZE, &sizes[i]);
        assert_int_equal(st, PKV_OK);
    }
    sleep_ms(2);
    close_conn(&c);
}

/* -------------------------------------------------------------- faults */

/* A killed server: operations fail within about timeout_ms; once it is
 * back, the connector connects again and they succeed. */
static void test_server_killed(void **state)
{
    rs_server *rs = *state;
    conn c;
    open_conn(&c, rs, "kill:", 300, 0);
    assert_int_equal(save_sync(&c, 1, "a", "value", 5), PKV_OK);
    pkv_redis_stats s = get_stats(&c);
    assert_int_equal(s.connected, 2);
    assert_int_equal(s.connects, 2);

    rs_kill(rs);
    /* A big value to a closed connection: the writes after the first fail
     * with EPIPE, whose SIGPIPE must not end the process. */
    enum { BIG = 8 << 20 };
    unsigned char *big = calloc(1, BIG);
    assert_non_null(big);
    uint64_t t0 = now_ms();
    assert_int_equal(save_sync(&c, 2, "big", big, BIG), PKV_ERR_STORE);
    free(big);
    const char *keys[1] = {"a"};
    char out[8];
    uint64_t size;
    for (uint64_t t = 3; t < 6; t++)
        assert_int_equal(load_sync(&c, t, keys, 1, out, sizeof out, &size),
                         PKV_ERR_STORE);
    assert_true(now_ms() - t0 < 1000);
    s = get_stats(&c);
    assert_int_equal(s.connected, 0);
    assert_int_equal(s.errors, 4);

    assert_int_equal(rs_restart(rs), 0);
    sleep_ms(150); /* retry_ms */
    assert_int_equal(save_sync(&c, 6, "a", "again", 5), PKV_OK);
    assert_int_equal(load_sync(&c, 7, keys, 1, out, sizeof out, &size),
                     PKV_OK);
    assert_int_equal(size, 5);
    assert_memory_equal(out, "again", 5);
    s = get_stats(&c);
    assert_int_equal(s.connected, 2);
    assert_int_equal(s.connects, 4);
    close_conn(&c);
}

/* A hung server: an operation fails by its timeout, polls never wait, and
 * destroy with an operation in flight returns at once. */
static void test_server_hung(void **state)
{
    rs_server *rs = *state;
    conn c;
    open_conn(&c, rs, "hung:", 200, 0);
    assert_int_equal(save_sync(&c, 1, "a", "v", 1), PKV_OK);
    rs_stop_process(rs);
    const char *keys[1] = {"a"};
    char out[8];
    uint64_t size;
    uint64_t t0 = now_ms();
    assert_int_equal(c.store.load(c.store.user, 2, keys, 1, out, sizeof out,
                                  &size),
                     PKV_OK);
    pkv_store_done d;
    uint64_t longest = 0;
    uint32_t n = 0;
    while (n == 0 && now_ms() - t0 < 3000) {
        uint64_t p0 = now_ms();
        n = c.store.poll(c.store.user, &d, 1);
        if (now_ms() - p0 > longest)
            longest = now_ms() - p0;
    }
    uint64_t took = now_ms() - t0;
    assert_int_equal(n, 1);
    assert_int_equal(d.ticket, 2);
    assert_int_equal(d.status, PKV_ERR_STORE);
    assert_true(took >= 150 && took < 1500);
    assert_true(longest < 100);
    assert_int_equal(get_stats(&c).connected, 1); /* the saves' */

    sleep_ms(150); /* retry_ms: the next op connects (the kernel accepts) */
    assert_int_equal(c.store.load(c.store.user, 3, keys, 1, out, sizeof out,
                                  &size),
                     PKV_OK);
    wait_commands(&c, 3);
    t0 = now_ms();
    close_conn(&c);
    assert_true(now_ms() - t0 < 150);
    rs_continue(rs);
}

/* No server at create: create succeeds, operations fail; once a server
 * is up, they succeed. */
static void test_server_down_at_create(void **state)
{
    rs_server *rs = *state;
    rs_kill(rs); /* its port is now free */
    conn c;
    open_conn(&c, rs, "down:", 300, 0);
    const char *keys[1] = {"a"};
    char out[8];
    uint64_t size;
    assert_int_equal(load_sync(&c, 1, keys, 1, out, sizeof out, &size),
                     PKV_ERR_STORE);
    sleep_ms(150);
    assert_int_equal(load_sync(&c, 2, keys, 1, out, sizeof out, &size),
                     PKV_ERR_STORE);
    pkv_redis_stats s = get_stats(&c);
    assert_int_equal(s.connected, 0);
    assert_int_equal(s.connects, 0);
    assert_true(s.connect_failures >= 2);
    assert_int_equal(s.errors, 2);
    /* Backoff: operations every 10 ms for 1.5 s try to connect only after
     * waits of 200, 400, 800 ms (each 75-125%), not every retry_ms (15
     * attempts). */
    uint64_t attempts = s.connect_failures, start = now_ms();
    for (uint64_t t = 10; t < 160; t++) {
        assert_int_equal(load_sync(&c, t, keys, 1, out, sizeof out, &size),
                         PKV_ERR_STORE);
        sleep_ms(10);
    }
    uint64_t elapsed = now_ms() - start;
    s = get_stats(&c);
    /* The most attempts the waits allow in that time (a loaded machine
     * stretches the loop): each at least 75% of 200, 400, 800 ... ms. */
    uint64_t allowed = 1, waited = 0;
    for (uint64_t w = 150; waited + w <= elapsed; w *= 2) {
        waited += w;
        allowed++;
    }
    print_message("server down: %llu connection attempts in %llu ms "
                  "(backoff allows %llu)\n",
                  (unsigned long long)(s.connect_failures - attempts),
                  (unsigned long long)elapsed, (unsigned long long)allowed);
    assert_true(s.connect_failures - attempts >= 2 &&
                s.connect_failures - attempts <= allowed + 1);

    /* Back up: within the last wait (at most 5 s), saves go through, and
     * the loads, whose connection was in its wait, connect at once. */
    assert_int_equal(rs_restart(rs), 0);
    uint64_t ticket = 200;
    while (save_sync(&c, ticket, "a", "up", 2) != PKV_OK) {
        assert_true(ticket++ < 260);
        sleep_ms(100);
    }
    assert_int_equal(load_sync(&c, 4, keys, 1, out, sizeof out, &size),
                     PKV_OK);
    assert_int_equal(size, 2);
    s = get_stats(&c);
    assert_int_equal(s.connected, 2);
    assert_int_equal(s.connects, 2);
    close_conn(&c);
}

/* An error reply (full memory) fails the op, not the connection. */
static void test_error_reply(void **state)
{
    rs_server *rs = *state;
    conn c;
    open_conn(&c, rs, "oom:", 500, 0);
    assert_int_equal(save_sync(&c, 1, "a", "v", 1), PKV_OK);
    redisReply *r = rs_command(rs, "CONFIG SET maxmemory 1");
    assert_non_null(r);
    freeReplyObject(r);
    assert_int_equal(save_sync(&c, 2, "b", "v", 1), PKV_ERR_STORE);
    r = rs_command(rs, "LPUSH oom:list x"); /* refused too: no memory */
    assert_non_null(r);
    freeReplyObject(r);
    r = rs_command(rs, "CONFIG SET maxmemory 0");
    assert_non_null(r);
    freeReplyObject(r);
    r = rs_command(rs, "LPUSH oom:list x");
    assert_non_null(r);
    freeReplyObject(r);
    /* MGET answers nil for a key of another type. */
    const char *keys[2] = {"a", "list"};
    char out[2][8];
    uint64_t sizes[2];
    assert_int_equal(load_sync(&c, 3, keys, 2, out, 8, sizes), PKV_OK);
    assert_int_equal(sizes[0], 1);
    assert_int_equal(sizes[1], 0);
    assert_int_equal(save_sync(&c, 4, "b", "v", 1), PKV_OK);
    pkv_redis_stats s = get_stats(&c);
    assert_int_equal(s.connects, 2);
    assert_int_equal(s.connected, 2);
    assert_int_equal(s.errors, 1);
    close_conn(&c);
}

/* Destroyed before the engine that holds its store (the engine's part
 * played by the callbacks, as pkv_engine_create and destroy call them):
 * the connector is closed, not freed, until the engine detaches; what
 * the engine still calls works or fails cleanly (the sanitizer builds:
 * no use after free, no leak). */
static void test_destroy_before_engine(void **state)
{
    (void)state;
    conn c;
    open_conn(&c, &shared, "dbe:", 500, 0);
    assert_non_null(c.store.attach);
    assert_non_null(c.store.detach);
    c.store.attach(c.store.user);
    assert_int_equal(save_sync(&c, 1, "k", "v", 1), PKV_OK);
    const char *keys[1] = {"k"};
    char out[8];
    uint64_t size;
    assert_int_equal(load_sync(&c, 2, keys, 1, out, sizeof out, &size),
                     PKV_OK);
    /* Finished, not polled yet when the host destroys the connector. */
    assert_int_equal(c.store.save(c.store.user, 3, "k", "w", 1), PKV_OK);
    wait_commands(&c, 3);
    sleep_ms(50);
    pkv_redis_destroy(c.redis);
    print_message("%s\n", pkv_redis_last_error());
    assert_non_null(strstr(pkv_redis_last_error(), "PKV_ERR_BAD_STATE"));
    assert_non_null(strstr(pkv_redis_last_error(), "1 engine(s) still"));
    /* The engine goes on: its poll finds what finished, new operations
     * fail at once, cancel is harmless. */
    pkv_store_done d[2];
    assert_int_equal(c.store.poll(c.store.user, d, 2), 1);
    assert_int_equal(d[0].ticket, 3);
    assert_int_equal(c.store.load(c.store.user, 4, keys, 1, out, sizeof out,
                                  &size),
                     PKV_ERR_STORE);
    assert_int_equal(c.store.save(c.store.user, 5, "k", "x", 1),
                     PKV_ERR_STORE);
    c.store.cancel(c.store.user, 4);
    assert_int_equal(c.store.poll(c.store.user, d, 2), 0);
    c.store.detach(c.store.user); /* frees it */

    /* No engine attached, or the last one gone: destroy frees at once. */
    open_conn(&c, &shared, "dbe:", 500, 0);
    c.store.attach(c.store.user);
    c.store.detach(c.store.user);
    close_conn(&c);
}

/* ------------------------------------------------- AUTH, ACL, SELECT */

/* requirepass: a connector without the password, or with a wrong one, is
 * refused (the message names AUTH, never the password); with it, values
 * round-trip. */
static void test_auth_password(void **state)
{
    rs_server *rs = *state;
    assert_int_equal(rs_require_password(rs, "s3cret-pw"), 0);
    const char *keys[1] = {"k"};
    char out[8];
    uint64_t size;

    conn none;
    open_conn_auth(&none, rs, "pw:", NULL, NULL, 0);
    assert_int_equal(save_sync(&none, 1, "k", "v", 1), PKV_ERR_STORE);
    close_conn(&none);

    conn wrong;
    open_conn_auth(&wrong, rs, "pw:", NULL, "not-the-s3cret", 0);
    assert_int_equal(save_sync(&wrong, 1, "k", "v", 1), PKV_ERR_STORE);
    pkv_redis_stats s = get_stats(&wrong);
    assert_int_equal(s.connected, 0);
    assert_int_equal(s.connects, 0);
    assert_true(s.auth_failures >= 1);
    assert_true(s.connect_failures >= s.auth_failures);
    const char *why = connection_error(&wrong);
    print_message("wrong password: %s\n", why);
    assert_non_null(strstr(why, "AUTH refused"));
    assert_non_null(strstr(why, "WRONGPASS"));
    assert_null(strstr(why, "not-the-s3cret"));
    close_conn(&wrong);

    conn right;
    open_conn_auth(&right, rs, "pw:", NULL, "s3cret-pw", 0);
    assert_int_equal(save_sync(&right, 1, "k", "value", 5), PKV_OK);
    assert_int_equal(load_sync(&right, 2, keys, 1, out, sizeof out, &size),
                     PKV_OK);
    assert_int_equal(size, 5);
    assert_memory_equal(out, "value", 5);
    s = get_stats(&right);
    assert_int_equal(s.auth_failures, 0);
    assert_int_equal(s.connects, 2);
    assert_string_equal(connection_error(&right), "");
    close_conn(&right);
}

/* requirepass, and a connector given no password: Redis answers a small
 * command NOAUTH and closes a connection that sends a large one
 * unauthenticated. Every failure is counted as an authentication failure
 * or a close under a command (never an idle close), and
 * pkv_redis_connection_error names the missing password. */
static void test_missing_password(void **state)
{
    rs_server *rs = *state;
    assert_int_equal(rs_require_password(rs, "needed-pw"), 0);
    conn c;
    open_conn_auth(&c, rs, "np:", NULL, NULL, 0);
    enum { SAVES = 32, BIG = 64 << 10 };
    unsigned char *big = calloc(1, BIG);
    assert_non_null(big);
    for (uint64_t t = 1; t <= SAVES; t++)
        assert_int_equal(save_sync(&c, t, "k", big, BIG), PKV_ERR_STORE);
    free(big);
    pkv_redis_stats s = get_stats(&c);
    const char *why = connection_error(&c);
    print_message("%d large SETs without the password: auth_failures %llu, "
                  "command_closes %llu, idle_closes %llu, connects %llu; "
                  "%s\n",
                  SAVES, (unsigned long long)s.auth_failures,
                  (unsigned long long)s.command_closes,
                  (unsigned long long)s.idle_closes,
                  (unsigned long long)s.connects, why);
    assert_true(s.auth_failures + s.command_closes >= SAVES);
    assert_int_equal(s.idle_closes, 0);
    assert_int_equal(s.errors, SAVES);
    assert_non_null(strstr(why, "pkv_redis_params.password"));
    const char *keys[1] = {"k"};
    char out[8];
    uint64_t size;
    uint64_t before = s.auth_failures;
    assert_int_equal(load_sync(&c, 100, keys, 1, out, sizeof out, &size),
                     PKV_ERR_STORE);
    why = connection_error(&c);
    print_message("a load without the password: %s\n", why);
    assert_non_null(strstr(why, "MGET refused: NOAUTH"));
    assert_non_null(strstr(why, "pkv_redis_params.password"));
    assert_int_equal(get_stats(&c).auth_failures, before + 1);
    close_conn(&c);
}

/* An ACL user with rights on lim:* keys, MGET and SET only: it works
 * within them; a key outside is refused (an error reply: the op fails,
 * the connection stays); SELECT, which it may not run, refuses the
 * connection; a wrong password for the user too. */
static void test_auth_acl_user(void **state)
{
    rs_server *rs = *state;
    admin(rs, "ACL SETUSER pkvuser on >user-pw resetkeys ~lim:* "
              "-@all +mget +set");
    const char *keys[1] = {"k"};
    char out[8];
    uint64_t size;

    conn ok;
    open_conn_auth(&ok, rs, "lim:", "pkvuser", "user-pw", 0);
    assert_int_equal(save_sync(&ok, 1, "k", "acl", 3), PKV_OK);
    assert_int_equal(load_sync(&ok, 2, keys, 1, out, sizeof out, &size),
                     PKV_OK);
    assert_int_equal(size, 3);
    assert_int_equal(get_stats(&ok).auth_failures, 0);
    close_conn(&ok);

    conn outside;
    open_conn_auth(&outside, rs, "other:", "pkvuser", "user-pw", 0);
    assert_int_equal(save_sync(&outside, 1, "k", "acl", 3), PKV_ERR_STORE);
    pkv_redis_stats s = get_stats(&outside);
    assert_int_equal(s.connects, 2);
    assert_int_equal(s.connected, 2);
    assert_int_equal(s.auth_failures, 0);
    close_conn(&outside);

    conn select;
    open_conn_auth(&select, rs, "lim:", "pkvuser", "user-pw", 2);
    assert_int_equal(save_sync(&select, 1, "k", "acl", 3), PKV_ERR_STORE);
    s = get_stats(&select);
    assert_int_equal(s.connects, 0);
    assert_true(s.auth_failures >= 1);
    const char *why = connection_error(&select);
    print_message("SELECT without the right: %s\n", why);
    assert_non_null(strstr(why, "SELECT refused"));
    assert_non_null(strstr(why, "NOPERM"));
    close_conn(&select);

    conn wrong;
    open_conn_auth(&wrong, rs, "lim:", "pkvuser", "other-pw", 0);
    assert_int_equal(save_sync(&wrong, 1, "k", "acl", 3), PKV_ERR_STORE);
    assert_true(get_stats(&wrong).auth_failures >= 1);
    why = connection_error(&wrong);
    assert_non_null(strstr(why, "AUTH refused"));
    assert_null(strstr(why, "other-pw"));
    close_conn(&wrong);
}

/* SELECT: a connector on database 3 and one on 0 share a server and a
 * prefix, not keys. */
static void test_select_isolates(void **state)
{
    (void)state;
    conn db3, db0;
    open_conn_auth(&db3, &shared, "sel:", NULL, NULL, 3);
    open_conn_auth(&db0, &shared, "sel:", NULL, NULL, 0);
    const char *keys[1] = {"k"};
    char out[8];
    uint64_t size;
    assert_int_equal(save_sync(&db3, 1, "k", "three", 5), PKV_OK);
    assert_int_equal(load_sync(&db0, 1, keys, 1, out, sizeof out, &size),
                     PKV_OK);
    assert_int_equal(size, 0);
    assert_int_equal(load_sync(&db3, 2, keys, 1, out, sizeof out, &size),
                     PKV_OK);
    assert_int_equal(size, 5);
    redisReply *r = rs_command(&shared, "GET sel:k");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_NIL);
    freeReplyObject(r);
    close_conn(&db3);
    close_conn(&db0);
}

/* A connection killed by the server (CLIENT KILL) is made again with
 * AUTH and SELECT before the next command: the value saved in database 2
 * as the ACL user is found again, nothing failed. */
static void test_auth_reconnect(void **state)
{
    rs_server *rs = *state;
    assert_int_equal(rs_require_password(rs, "admin-pw"), 0);
    admin(rs, "ACL SETUSER pkvuser on >user-pw resetkeys ~rc:* -@all "
              "+mget +set +select");
    conn c;
    open_conn_auth(&c, rs, "rc:", "pkvuser", "user-pw", 2);
    assert_int_equal(save_sync(&c, 1, "k", "again", 5), PKV_OK);
    admin(rs, "CLIENT KILL USER pkvuser");
    const char *keys[1] = {"k"};
    char out[8];
    uint64_t size;
    assert_int_equal(load_sync(&c, 2, keys, 1, out, sizeof out, &size),
                     PKV_OK);
    assert_int_equal(size, 5);
    assert_memory_equal(out, "again", 5);
    /* Both connections were killed; the loads' was found and made
     * again. */
    pkv_redis_stats s = get_stats(&c);
    assert_int_equal(s.connects, 3);
    assert_int_equal(s.idle_closes, 1);
    assert_int_equal(s.errors, 0);
    assert_int_equal(s.auth_failures, 0);
    close_conn(&c);
}

/* A server that answers AUTH with the password it was sent: the message
 * does not quote it. */
static void test_auth_echo(void **state)
{
    (void)state;
    hostile h;
    hostile_start(&h, "-ERR echo: AUTH hush-pw-1\r\n", "x", 300);
    rs_server fake = {0};
    fake.port = h.port;
    conn c;
    open_conn_auth(&c, &fake, "", NULL, "hush-pw-1", 0);
    assert_int_equal(save_sync(&c, 1, "k", "v", 1), PKV_ERR_STORE);
    const char *why = connection_error(&c);
    print_message("an echoing server: %s\n", why);
    assert_non_null(strstr(why, "AUTH refused"));
    assert_null(strstr(why, "hush-pw-1"));
    close_conn(&c);
    hostile_stop(&h);
}

/* ----------------------------------------------------------------- TLS */

/* TLS through stunnel (pkv_redis.h, "TLS"): a redis-server that speaks
 * TLS only on its TLS port, with a self-signed certificate made here, and
 * stunnel in client mode on loopback verifying it (rs_tls_start); the
 * connector, plain TCP to stunnel, stores and loads through it, AUTH
 * included. The same connector aimed at the TLS port itself gets
 * nothing. Fails without stunnel4 or openssl (tests/deps.sh installs
 * both): a skip would hide that CI never ran it. */
static void test_tls_stunnel(void **state)
{
    (void)state;
    uint64_t t0 = now_ms();
    rs_tls t;
    assert_int_equal(rs_tls_start(&t), 0);
    assert_int_equal(rs_require_password(&t.server, "tls-pw"), 0);
    rs_server via = {0};
    via.port = t.tunnel_port;
    conn c;
    open_conn_auth(&c, &via, "tls:", NULL, "tls-pw", 0);
    char value[4096];
    fill((unsigned char *)value, sizeof value, 5);
    assert_int_equal(save_sync(&c, 1, "k", value, sizeof value), PKV_OK);
    const char *keys[1] = {"k"};
    char out[sizeof value];
    uint64_t size;
    assert_int_equal(load_sync(&c, 2, keys, 1, out, sizeof out, &size),
                     PKV_OK);
    assert_int_equal(size, sizeof value);
    assert_memory_equal(out, value, sizeof value);
    assert_int_equal(get_stats(&c).connects, 2);
    close_conn(&c);

    /* Plain text to the TLS port: no connection stands. */
    rs_server direct = {0};
    direct.port = t.tls_port;
    open_conn_auth(&c, &direct, "tls:", NULL, "tls-pw", 0);
    assert_int_equal(save_sync(&c, 1, "k", "v", 1), PKV_ERR_STORE);
    assert_int_equal(get_stats(&c).connects, 0);
    print_message("plain text to the TLS port: %s\n", connection_error(&c));
    close_conn(&c);
    rs_tls_stop(&t);
    print_message("TLS through stunnel: %llu ms, certificate included\n",
                  (unsigned long long)(now_ms() - t0));
}

/* A Unix socket instead of TCP. */
static void test_unix_socket(void **state)
{
    (void)state;
    char dir[] = "/tmp/pkv-redis-sock-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/redis.sock", dir);
    const char *extra[] = {"--unixsocket", path, "--unixsocketperm", "700",
                           NULL};
    rs_server rs;
    assert_int_equal(rs_start(&rs, extra), 0);
    pkv_redis_params p;
    pkv_redis_params_init(&p);
    p.host = NULL;
    p.unix_path = path;
    p.key_prefix = "unix:";
    conn c;
    assert_int_equal(pkv_redis_create(&p, &c.redis), PKV_OK);
    memset(&c.store, 0, sizeof c.store);
    c.store.struct_size = sizeof c.store;
    assert_int_equal(pkv_redis_store(c.redis, &c.store), PKV_OK);
    assert_int_equal(save_sync(&c, 1, "k", "over unix", 9), PKV_OK);
    redisReply *r = rs_command(&rs, "GET unix:k");
    assert_non_null(r);
    assert_string_equal(r->str, "over unix");
    freeReplyObject(r);
    close_conn(&c);
    rs_stop(&rs);
    unlink(path);
    rmdir(dir);
}

/* ------------------------------------------------------------- threads */

/* The engine's side of many operations against the worker: random loads,
 * saves, cancels and polls. Every op not cancelled is reported once; no
 * cancelled one is, and its buffer keeps what was written after cancel. */
static void test_stress(void **state)
{
    (void)state;
    enum { N = 3000, SIZE = 48 };
    enum { ISSUED = 1, CANCELLED = 2, REPORTED = 3 };
    static unsigned char out[N][SIZE];
    static uint64_t sizes[N];
    static int st[N];
    conn c;
    open_conn(&c, &shared, "stress:", 2000, 0);
    unsigned char value[SIZE];
    fill(value, SIZE, 5);
    unsigned seed = 12345;
    uint32_t issued = 0, finished = 0;
    pkv_store_done done[8];
    while (finished < N) {
        seed = seed * 1103515245u + 12345u;
        unsigned pick = (seed >> 16) % 10;
        if (pick < 5 && issued < N) {
            uint32_t i = issued++;
            char key[16];
            snprintf(key, sizeof key, "k%u", i % 50);
            const char *keys[1] = {key};
            pkv_status s = i % 2
                               ? c.store.save(c.store.user, i, key, value,
                                              SIZE)
                               : c.store.load(c.store.user, i, keys, 1,
                                              out[i], SIZE, &sizes[i]);
            assert_int_equal(s, PKV_OK);
            st[i] = ISSUED;
        } else if (pick < 7 && issued > 0) {
            uint32_t i = (seed >> 4) % issued;
            if (st[i] == ISSUED) {
                c.store.cancel(c.store.user, i);
                st[i] = CANCELLED;
                finished++;
                memset(out[i], 0x5A, SIZE);
                sizes[i] = 999;
            }
        } else {
            uint32_t n = c.store.poll(c.store.user, done, 8);
            for (uint32_t k = 0; k < n; k++) {
                uint64_t t = done[k].ticket;
                assert_true(t < issued);
                assert_int_equal(st[t], ISSUED);
                assert_int_equal(done[k].status, PKV_OK);
                st[t] = REPORTED;
                finished++;
            }
            if (issued == N && n == 0)
                sleep_ms(1);
        }
    }
    for (uint32_t i = 0; i < N; i++)
        if (st[i] == CANCELLED) {
            assert_true(all_bytes(out[i], SIZE, 0x5A));
            assert_int_equal(sizes[i], 999);
        }
    assert_int_equal(c.store.poll(c.store.user, done, 8), 0);
    close_conn(&c);
}

/* The server's misfortunes, one every 50 to 300 ms, on a thread of
 * their own while the engine's side runs (test_chaos). */
typedef struct chaos {
    rs_server *rs;
    pthread_mutex_t lock;
    int stop;
    unsigned seed;
    unsigned kills, freezes, client_kills;
} chaos;

static int chaos_stopped(chaos *x)
{
    pthread_mutex_lock(&x->lock);
    int stop = x->stop;
    pthread_mutex_unlock(&x->lock);
    return stop;
}

static void *chaos_main(void *arg)
{
    chaos *x = arg;
    while (!chaos_stopped(x)) {
        x->seed = x->seed * 1103515245u + 12345u;
        unsigned r = x->seed >> 16;
        sleep_ms(50 + (long)(r % 250));
        switch (r % 4) {
        case 0: /* killed, restarted empty a moment later */
            rs_kill(x->rs);
            sleep_ms((long)(r % 100));
            if (rs_restart(x->rs) != 0)
                return NULL;
            x->kills++;
            break;
        case 1: /* hung a while */
            rs_stop_process(x->rs);
            sleep_ms(50 + (long)(r % 300));
            rs_continue(x->rs);
            x->freezes++;
            break;
        case 2: { /* every client's connection cut */
            redisReply *reply = rs_command(x->rs, "CLIENT KILL TYPE normal");
            if (reply != NULL)
                freeReplyObject(reply);
            x->client_kills++;
            break;
        }
        default: /* a quiet moment */
            break;
        }
    }
    return NULL;
}

/* The connector under kill, restart, freeze and CLIENT KILL chaos for
 * 6 s (the ThreadSanitizer pass runs it): random loads, saves, cancels
 * and polls from the engine's side, and halfway the connector destroyed
 * with operations in flight and made again. Every op not cancelled or
 * dropped by that destroy is reported once (a load that hits holds its
 * key's value); no cancelled or dropped op is, and its buffer keeps what
 * was written after; when the chaos ends, operations succeed again. */
static void test_chaos(void **state)
{
    rs_server *rs = *state;
    enum { N = 20000, SIZE = 64, KEYS = 40, MS = 6000 };
    enum { ISSUED = 1, GONE = 2, REPORTED = 3 };
    static unsigned char out[N][SIZE];
    static uint64_t sizes[N];
    static int st[N];
    unsigned char values[KEYS][SIZE];
    for (unsigned k = 0; k < KEYS; k++)
        fill(values[k], SIZE, k);
    conn c;
    open_conn(&c, rs, "chaos:", 200, 0);
    chaos x = {rs, PTHREAD_MUTEX_INITIALIZER, 0, 777, 0, 0, 0};
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, chaos_main, &x), 0);
    unsigned seed = 4242;
    uint32_t issued = 0, ok = 0, failed = 0;
    int remade = 0;
    pkv_store_done done[8];
    uint64_t start = now_ms();
    while (now_ms() - start < MS && issued < N) {
        seed = seed * 1103515245u + 12345u;
        unsigned pick = (seed >> 16) % 10;
        if (!remade && now_ms() - start > MS / 2) {
            /* Destroyed with ops in flight: they are dropped unreported,
             * their buffers never touched again. */
            close_conn(&c);
            for (uint32_t i = 0; i < issued; i++)
                if (st[i] == ISSUED) {
                    st[i] = GONE;
                    memset(out[i], 0x5A, SIZE);
                    sizes[i] = 999;
                }
            open_conn(&c, rs, "chaos:", 200, 0);
            remade = 1;
        } else if (pick < 5) {
            uint32_t i = issued++;
            unsigned k = (seed >> 8) % KEYS;
            char key[16];
            snprintf(key, sizeof key, "k%u", k);
            const char *keys[1] = {key};
            pkv_status r = i % 2 ? c.store.save(c.store.user, i, key,
                                                values[k], SIZE)
                                 : c.store.load(c.store.user, i, keys, 1,
                                                out[i], SIZE, &sizes[i]);
            assert_int_equal(r, PKV_OK);
            st[i] = ISSUED;
        } else if (pick < 6 && issued > 0) {
            uint32_t i = (seed >> 4) % issued;
            if (st[i] == ISSUED) {
                c.store.cancel(c.store.user, i);
                st[i] = GONE;
                memset(out[i], 0x5A, SIZE);
                sizes[i] = 999;
            }
        } else {
            uint32_t n = c.store.poll(c.store.user, done, 8);
            for (uint32_t j = 0; j < n; j++) {
                uint64_t t = done[j].ticket;
                assert_true(t < issued);
                assert_int_equal(st[t], ISSUED);
                st[t] = REPORTED;
                if (done[j].status == PKV_OK)
                    ok++;
                else
                    failed++;
            }
            if (n == 0)
                sleep_ms(1);
        }
    }
    pthread_mutex_lock(&x.lock);
    x.stop = 1;
    pthread_mutex_unlock(&x.lock);
    assert_int_equal(pthread_join(thread, NULL), 0);
    /* A server the chaos thread restarted died with that thread
     * (PR_SET_PDEATHSIG follows the thread that forked): start it again
     * from this one. */
    rs_kill(rs);
    assert_int_equal(rs_restart(rs), 0);
    /* Everything still in flight is reported within its deadlines. */
    uint64_t end = now_ms() + 10000;
    uint32_t pending = 0;
    for (uint32_t i = 0; i < issued; i++)
        pending += st[i] == ISSUED;
    while (pending > 0 && now_ms() < end) {
        uint32_t n = c.store.poll(c.store.user, done, 8);
        for (uint32_t j = 0; j < n; j++) {
            uint64_t t = done[j].ticket;
            assert_int_equal(st[t], ISSUED);
            st[t] = REPORTED;
            pending--;
            ok += done[j].status == PKV_OK;
            failed += done[j].status != PKV_OK;
        }
        if (n == 0)
            sleep_ms(1);
    }
    assert_int_equal(pending, 0);
    assert_int_equal(c.store.poll(c.store.user, done, 8), 0);
    uint32_t hits = 0;
    for (uint32_t i = 0; i < issued; i++) {
        if (st[i] == GONE) {
            assert_true(all_bytes(out[i], SIZE, 0x5A));
            assert_int_equal(sizes[i], 999);
        } else if (i % 2 == 0 && st[i] == REPORTED && sizes[i] == SIZE) {
            int match = 0;
            for (unsigned k = 0; k < KEYS && !match; k++)
                match = memcmp(out[i], values[k], SIZE) == 0;
            assert_true(match);
            hits++;
        }
    }
    print_message("chaos: %u kills, %u freezes, %u CLIENT KILLs; %u ops, "
                  "%u succeeded (%u loads hit), %u failed\n",
                  x.kills, x.freezes, x.client_kills, (unsigned)issued,
                  (unsigned)ok, (unsigned)hits, (unsigned)failed);
    assert_true(ok > 0 && failed > 0);
    /* The chaos over: saves and loads work again, within the backoff. */
    const char *keys[1] = {"after"};
    char value[8];
    uint64_t size;
    uint64_t ticket = N;
    while (save_sync(&c, ticket, "after", "calm", 4) != PKV_OK) {
        assert_true(ticket++ < N + 100);
        sleep_ms(100);
    }
    while (load_sync(&c, ++ticket, keys, 1, value, sizeof value, &size) !=
           PKV_OK)
        assert_true(ticket < N + 200);
    assert_int_equal(size, 4);
    close_conn(&c);
}

int main(void)
{
    if (!rs_available()) {
        printf("test_redis: skipped: %s not found (install redis-server, "
               "or set PKV_REDIS_SERVER)\n",
               rs_binary());
        return RS_SKIP;
    }
    /* One test, or a pattern of them, by name. */
    if (getenv("PKV_TEST_FILTER") != NULL)
        cmocka_set_test_filter(getenv("PKV_TEST_FILTER"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_params),
        cmocka_unit_test(test_bad_ops),
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_long_value),
        cmocka_unit_test(test_large_values),
        cmocka_unit_test(test_many_keys),
        cmocka_unit_test(test_prefix),
        cmocka_unit_test(test_ttl),
        cmocka_unit_test(test_poll_order),
        cmocka_unit_test(test_ticket_in_flight),
        cmocka_unit_test(test_idle_close),
        cmocka_unit_test(test_hostile_set_reply),
        cmocka_unit_test(test_hostile_drip),
        cmocka_unit_test(test_slow_reader),
        cmocka_unit_test(test_forgotten_connection),
        cmocka_unit_test(test_cancel_done),
        cmocka_unit_test(test_destroy_busy),
        cmocka_unit_test(test_destroy_before_engine),
        cmocka_unit_test(test_unix_socket),
        cmocka_unit_test(test_stress),
        cmocka_unit_test_setup_teardown(test_load_first, private_setup,
                                        private_teardown),
        cmocka_unit_test_setup_teardown(test_cancel_queued, private_setup,
                                        private_teardown),
        cmocka_unit_test_setup_teardown(test_cancel_load_in_flight,
                                        private_setup, private_teardown),
        cmocka_unit_test_setup_teardown(test_server_killed, private_setup,
                                        private_teardown),
        cmocka_unit_test_setup_teardown(test_server_hung, private_setup,
                                        private_teardown),
        cmocka_unit_test_setup_teardown(test_server_down_at_create,
                                        private_setup, private_teardown),
        cmocka_unit_test_setup_teardown(test_error_reply, private_setup,
                                        private_teardown),
        cmocka_unit_test_setup_teardown(test_auth_password, private_setup,
                                        private_teardown),
        cmocka_unit_test_setup_teardown(test_missing_password,
                                        private_setup, private_teardown),
        cmocka_unit_test_setup_teardown(test_auth_acl_user, private_setup,
                                        private_teardown),
        cmocka_unit_test(test_select_isolates),
        cmocka_unit_test_setup_teardown(test_auth_reconnect, private_setup,
                                        private_teardown),
        cmocka_unit_test(test_auth_echo),
        cmocka_unit_test(test_tls_stunnel),
        cmocka_unit_test_setup_teardown(test_chaos, private_setup,
                                        private_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
