/* SPDX-License-Identifier: MIT */
/*
 * Engines sharing blocks through a real redis-server (libpkv_redis), which
 * the test starts on a free loopback port and stops. Two processes: this
 * program runs itself again as the first engine (--peer), which computes
 * a prompt and saves its blocks; the second engine, here, must load them
 * (its first step computes one row), its KV must be the peer's byte for
 * byte (the exports of the two sequences are equal) and its outputs the
 * peer's, both checked against dense attention (ch_step). Both backends,
 * f16 and U8, and across backends. Then the server misbehaves: killed
 * during a load and during saves, restarted, frozen (timeouts on either
 * side), values flipped byte by byte, truncated, from another geometry,
 * salt or prompt, evicted under maxmemory: no wrong row, no lost
 * sequence, no stall, and the stats say what happened. Engines share
 * blocks through a TLS tunnel to a TLS-only server. Last, the engine
 * fuzzer runs its inputs against the server.
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep, posix_spawn */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "pkv/pkv_redis.h"
#include "redis_server.h"
#include "check_host_cmocka.h"
#include "hash_model.h"

#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

enum { PROMPT = 41 }; /* 10 full blocks of 4 before the last token */

static rs_server server;

static void sleep_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* A command (rs_command's format and arguments) that must be answered
 * without an error. */
#define COMMAND(...)                                                     \
    do {                                                                 \
        redisReply *reply_ = rs_command(&server, __VA_ARGS__);           \
        assert_non_null(reply_);                                         \
        assert_int_not_equal(reply_->type, REDIS_REPLY_ERROR);           \
        freeReplyObject(reply_);                                         \
    } while (0)

/* An engine of params p with a Redis connector to port. */
typedef struct redis_host {
    ch_host host;
    pkv_redis *redis;
    pkv_store store;
} redis_host;

static void rh_connect(redis_host *h, int port, uint32_t timeout_ms)
{
    pkv_redis_params rp;
    assert_int_equal(pkv_redis_params_init(&rp), PKV_OK);
    rp.port = (uint32_t)port;
    rp.timeout_ms = timeout_ms;
    rp.retry_ms = 10;
    assert_int_equal(pkv_redis_create(&rp, &h->redis), PKV_OK);
    assert_int_equal(pkv_store_init(&h->store), PKV_OK);
    assert_int_equal(pkv_redis_store(h->redis, &h->store), PKV_OK);
}

static void rh_start(redis_host *h, pkv_engine_params p)
{
    p.store = &h->store;
    ch_cmocka_init(&h->host, &p, hm_tolerance(p.kv_dtype));
}

static void rh_init(redis_host *h, pkv_engine_params p, int port)
{
    rh_connect(h, port, 1000);
    rh_start(h, p);
}

static void rh_free(redis_host *h)
{
    ch_free(&h->host);
    pkv_redis_destroy(h->redis);
}

static pkv_engine_stats stats_of(redis_host *h)
{
    pkv_engine_stats s;
    pkv_engine_stats_init(&s);
    assert_int_equal(pkv_engine_get_stats(h->host.engine, &s), PKV_OK);
    return s;
}

static void rh_run(redis_host *h)
{
    ch_run_idle(&h->host);
}

static pkv_seq_id add(redis_host *h, const int32_t *prompt, uint64_t salt)
{
    return ch_add_salted(&h->host, prompt, PROMPT, 3, salt);
}

static uint32_t first_rows(redis_host *h, pkv_seq_id id)
{
    return ch_first_rows(&h->host, id);
}

/* Step until id's prompt is computed and it sampled (it decodes), then
 * export it (malloc'd, *size bytes). */
static uint8_t *export_after_prompt(redis_host *h, pkv_seq_id id,
                                    size_t *size, uint32_t *first)
{
    *first = first_rows(h, id);
    for (uint32_t i = 0; i < 1000; i++) {
        const uint32_t *blocks;
        uint32_t nb, nt;
        assert_int_equal(pkv_engine_get_block_table(h->host.engine, id,
                                                    &blocks, &nb, &nt),
                         PKV_OK);
        if (nt == PROMPT)
            break;
        ch_step(&h->host, NULL);
    }
    size_t need = 0;
    assert_int_equal(pkv_seq_export(h->host.engine, id, NULL, 0, &need),
                     PKV_OK);
    uint8_t *data = malloc(need);
    assert_non_null(data);
    assert_int_equal(pkv_seq_export(h->host.engine, id, data, need, size),
                     PKV_OK);
    return data;
}

static pkv_engine_params params_of(int32_t backend, int32_t dtype)
{
    pkv_engine_params p = hm_params(backend);
    p.kv_dtype = dtype;
    return p;
}

/* The same outputs at every position both recorded, within the dtype's
 * tolerance (rows computed in a prefill and in a decode step may round
 * differently). */
static void same_outputs(const ch_seq *a, const float *b_out,
                         const uint8_t *b_recorded, uint32_t positions,
                         size_t per_position, float tolerance)
{
    uint32_t compared = 0;
    for (uint32_t pos = 0; pos < positions && pos < a->record_capacity;
         pos++) {
        if (!a->recorded[pos] || !b_recorded[pos])
            continue;
        for (size_t i = 0; i < per_position; i++) {
            float d = a->sample_out[pos * per_position + i] -
                      b_out[pos * per_position + i];
            assert_true(d <= tolerance && -d <= tolerance);
        }
        compared++;
    }
    assert_true(compared >= 3); /* the prompt's last row, then decoding */
}

/* ---------------------------------------------------------------- peer */

static size_t per_position(const pkv_engine_params *p)
{
    return (size_t)p->num_layers * p->num_q_heads * p->head_dim;
}

/* --peer PORT BACKEND DTYPE OUT: compute the prompt with saves to Redis,
 * checking every row, and write to OUT the export taken after the prompt,
 * then the outputs it recorded: u64 bytes, the export, u64 positions,
 * their recorded flags, their floats. Exit 0 on success. */
static int peer(int port, int32_t backend, int32_t dtype, const char *out)
{
    redis_host a;
    pkv_engine_params p = params_of(backend, dtype);
    rh_init(&a, p, port);
    a.host.record_samples = 1;
    int32_t *prompt = hm_prompt(PROMPT, 7);
    pkv_seq_id id = add(&a, prompt, 0);
    size_t size;
    uint32_t first;
    uint8_t *exported = export_after_prompt(&a, id, &size, &first);
    rh_run(&a);
    pkv_engine_stats s = stats_of(&a);
    const ch_seq *seq = ch_find(&a.host, id);
    uint64_t n = size, positions = seq->record_capacity;
    size_t floats = positions * per_position(&p);
    FILE *f = fopen(out, "wb");
    int ok = f != NULL && s.store_saves == PROMPT / 4 && first == PROMPT &&
             fwrite(&n, sizeof n, 1, f) == 1 &&
             fwrite(exported, 1, size, f) == size &&
             fwrite(&positions, sizeof positions, 1, f) == 1 &&
             fwrite(seq->recorded, 1, positions, f) == positions &&
             fwrite(seq->sample_out, sizeof(float), floats, f) == floats;
    if (f != NULL && fclose(f) != 0)
        ok = 0;
    free(exported);
    free(prompt);
    rh_free(&a);
    return ok ? 0 : 1;
}

/* Run this program as the peer; assert it succeeded. */
static void run_peer(int32_t backend, int32_t dtype, const char *out)
{
    char port[16], be[16], dt[16];
    snprintf(port, sizeof port, "%d", server.port);
    snprintf(be, sizeof be, "%d", (int)backend);
    snprintf(dt, sizeof dt, "%d", (int)dtype);
    char *argv[] = {(char *)"/proc/self/exe", (char *)"--peer", port, be, dt,
                    (char *)out, NULL};
    pid_t pid;
    assert_int_equal(posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv,
                                 environ),
                     0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* A whole file (malloc'd). */
static uint8_t *slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *d = malloc(n > 0 ? (size_t)n : 1);
    assert_non_null(d);
    assert_int_equal(fread(d, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return d;
}

static int has_opencl(void)
{
    pkv_engine_params p = params_of(PKV_BACKEND_KIND_OPENCL, PKV_KV_DTYPE_F16);
    pkv_engine *e = NULL;
    if (pkv_engine_create(&p, &e) != PKV_OK)
        return 0;
    pkv_engine_destroy(e);
    return 1;
}

/* The peer (backend a) computes the prompt; this process (backend b)
 * loads it: one row computed, the same KV bytes, the same outputs. */
static void share(int32_t backend_a, int32_t backend_b, int32_t dtype)
{
    COMMAND("FLUSHALL");
    char out[128];
    snprintf(out, sizeof out, "%s/peer.out", server.dir);
    run_peer(backend_a, dtype, out);
    size_t size;
    uint8_t *file = slurp(out, &size);
    uint64_t n, positions;
    memcpy(&n, file, sizeof n);
    const uint8_t *peer_export = file + sizeof n;
    memcpy(&positions, peer_export + n, sizeof positions);
    const uint8_t *recorded = peer_export + n + sizeof positions;
    const float *outputs = (const float *)(const void *)(recorded + positions);

    redis_host b;
    pkv_engine_params p = params_of(backend_b, dtype);
    rh_init(&b, p, server.port);
    b.host.record_samples = 1;
    int32_t *prompt = hm_prompt(PROMPT, 7);
    pkv_seq_id id = add(&b, prompt, 0);
    size_t mine_size;
    uint32_t first;
    uint8_t *mine = export_after_prompt(&b, id, &mine_size, &first);
    assert_int_equal(first, 1);
    assert_int_equal(mine_size, n);
    assert_memory_equal(mine, peer_export, n);
    rh_run(&b);
    pkv_engine_stats s = stats_of(&b);
    assert_int_equal(s.store_hit_blocks, PROMPT / 4);
    assert_int_equal(s.store_damaged + s.store_mismatched, 0);
    same_outputs(ch_find(&b.host, id), outputs, recorded,
                 (uint32_t)positions, per_position(&p),
                 2 * hm_tolerance(dtype));
    rh_free(&b);
    free(mine);
    free(prompt);
    free(file);
}

static void test_two_processes(void **state)
{
    (void)state;
    const int32_t dtypes[] = {PKV_KV_DTYPE_F16, PKV_KV_DTYPE_U8};
    int opencl = has_opencl();
    for (size_t d = 0; d < 2; d++) {
        share(PKV_BACKEND_KIND_CPU, PKV_BACKEND_KIND_CPU, dtypes[d]);
        if (!opencl)
            continue;
        share(PKV_BACKEND_KIND_OPENCL, PKV_BACKEND_KIND_OPENCL, dtypes[d]);
        share(PKV_BACKEND_KIND_CPU, PKV_BACKEND_KIND_OPENCL, dtypes[d]);
    }
    if (!opencl)
        print_message("no OpenCL device: the CPU backend only\n");
}

/* ------------------------------------------------------------- faults */

/* An engine of this process computes prompt (salt) and saves it. */
static void fill(const int32_t *prompt, uint64_t salt, pkv_engine_params p)
{
    redis_host a;
    rh_init(&a, p, server.port);
    ch_add_salted(&a.host, prompt, PROMPT, 3, salt);
    rh_run(&a);
    assert_int_equal(stats_of(&a).store_saves, PROMPT / 4);
    rh_free(&a);
}

/* A fresh engine serves prompt: its stats; *rows the rows of its first
 * step. */
static pkv_engine_stats serve(const int32_t *prompt, pkv_engine_params p,
                              uint32_t *rows)
{
    redis_host b;
    rh_init(&b, p, server.port);
    pkv_seq_id id = add(&b, prompt, 0);
    *rows = first_rows(&b, id);
    rh_run(&b);
    pkv_engine_stats s = stats_of(&b);
    rh_free(&b);
    return s;
}

/* The key under which the store holds block j of the prompt last
 * filled (FLUSHALL before it): the one whose value's index is j. */
static char *key_of_block(uint32_t j)
{
    redisReply *keys = rs_command(&server, "KEYS pkv1:*");
    assert_non_null(keys);
    char *found = NULL;
    for (size_t i = 0; i < keys->elements && found == NULL; i++) {
        redisReply *v = rs_command(&server, "GETRANGE %s 44 47",
                                   keys->element[i]->str);
        assert_non_null(v);
        const uint8_t *b = (const uint8_t *)v->str;
        uint32_t index = (uint32_t)b[0] | (uint32_t)b[1] << 8 |
                         (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
        if (index == j)
            found = strdup(keys->element[i]->str);
        freeReplyObject(v);
    }
    freeReplyObject(keys);
    assert_non_null(found);
    return found;
}

static void set_value(const char *key, const void *value, size_t size)
{
    redisReply *r = rs_command(&server, "SET %s %b", key, value, size);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
}

/* Block 2 is bad: blocks 0 and 1 load, the rest is computed. */
static void expect_bad_block2(const int32_t *prompt, pkv_engine_params p,
                              int damaged)
{
    uint32_t rows;
    pkv_engine_stats s = serve(prompt, p, &rows);
    assert_int_equal(rows, PROMPT - 8);
    assert_int_equal(s.store_hit_blocks, 2);
    assert_int_equal(s.store_damaged, damaged ? 1 : 0);
    assert_int_equal(s.store_mismatched, damaged ? 0 : 1);
}

/* Values changed in Redis: every byte of block 2's flipped in turn,
 * truncated, extended; values of another geometry, salt, block and
 * prompt under its key. */
static void test_bad_values(void **state)
{
    (void)state;
    pkv_engine_params p = params_of(PKV_BACKEND_KIND_CPU, PKV_KV_DTYPE_U8);
    int32_t *prompt = hm_prompt(PROMPT, 7);
    int32_t *other = hm_prompt(PROMPT, 9);
    COMMAND("FLUSHALL");
    fill(prompt, 0, p);
    char *key = key_of_block(2);
    redisReply *v = rs_command(&server, "GET %s", key);
    assert_non_null(v);
    size_t size = v->len;
    uint8_t *whole = malloc(size + 1);
    assert_non_null(whole);
    memcpy(whole, v->str, size);
    whole[size] = 0;
    freeReplyObject(v);
    for (size_t i = 0; i < size; i++) {
        whole[i] ^= (uint8_t)(1u << (i % 8));
        set_value(key, whole, size);
        whole[i] ^= (uint8_t)(1u << (i % 8));
        expect_bad_block2(prompt, p, 1);
    }
    const size_t cuts[] = {1, size / 2, size - 1, size + 1};
    for (size_t c = 0; c < 4; c++) {
        set_value(key, whole, cuts[c]);
        expect_bad_block2(prompt, p, 1);
    }
    /* Imposters: intact values of other blocks, copied under the key. */
    char *next = key_of_block(3);
    COMMAND("COPY %s %s REPLACE", next, key);
    expect_bad_block2(prompt, p, 0);
    free(next);
    pkv_engine_params q = p; /* another geometry, values of one size */
    q.num_layers = 4;
    q.num_kv_heads = 1;
    q.num_q_heads = 2;
    const struct {
        const int32_t *prompt;
        uint64_t salt;
        const pkv_engine_params *params;
    } imposters[] = {{prompt, 1, &p}, {other, 0, &p}, {prompt, 0, &q}};
    for (size_t i = 0; i < 3; i++) {
        COMMAND("FLUSHALL");
        fill(imposters[i].prompt, imposters[i].salt, *imposters[i].params);
        char *theirs = key_of_block(2);
        redisReply *t = rs_command(&server, "GET %s", theirs);
        assert_non_null(t);
        assert_int_equal(t->len, size);
        uint8_t *copy = malloc(size);
        assert_non_null(copy);
        memcpy(copy, t->str, size);
        freeReplyObject(t);
        free(theirs);
        fill(prompt, 0, p);
        set_value(key, copy, size);
        free(copy);
        expect_bad_block2(prompt, p, 0);
    }
    free(key);
    free(whole);
    free(prompt);
    free(other);
}

/* With a deployment key, through a real redis-server: a second engine
 * with the key loads every block; names and values show no token of
 * the prompt; an engine with another key only misses; a value changed
 * in Redis, or another block's sealed value moved under its key, is a
 * counted miss and the block is computed, every row checked. */
static void test_sealed(void **state)
{
    (void)state;
    pkv_engine_params p = params_of(PKV_BACKEND_KIND_CPU, PKV_KV_DTYPE_F16);
    p.seal_key = ch_seal_key;
    int32_t *prompt = hm_prompt(PROMPT, 7);
    COMMAND("FLUSHALL");
    fill(prompt, 0, p);
    uint32_t rows;
    pkv_engine_stats s = serve(prompt, p, &rows);
    assert_int_equal(rows, 1);
    assert_int_equal(s.store_hit_blocks, PROMPT / 4);
    /* Any 2 consecutive token ids of the prompt, as stored unsealed. */
    redisReply *keys = rs_command(&server, "KEYS *");
    assert_non_null(keys);
    assert_int_equal(keys->elements, PROMPT / 4);
    uint8_t pair[8];
    for (int i = 0; i < 8; i++)
        pair[i] = (uint8_t)((uint32_t)prompt[i / 4 + 5] >> (8 * (i % 4)));
    char **names = calloc(keys->elements, sizeof *names);
    assert_non_null(names);
    for (size_t i = 0; i < keys->elements; i++) {
        names[i] = strdup(keys->element[i]->str);
        assert_non_null(strstr(names[i], "pkvs:"));
        redisReply *v = rs_command(&server, "GET %s", names[i]);
        assert_non_null(v);
        for (size_t at = 0; at + 8 <= v->len; at++)
            assert_true(memcmp(v->str + at, pair, 8) != 0);
        freeReplyObject(v);
    }
    pkv_engine_params other = p;
    other.seal_key = ch_other_seal_key;
    s = serve(prompt, other, &rows);
    assert_int_equal(rows, PROMPT);
    assert_int_equal(s.store_hit_blocks + s.store_damaged, 0);
    /* A flipped byte in one value, then another value moved under a
     * key: the first is damaged, a miss; nothing after it loads. */
    for (int how = 0; how < 2; how++) {
        COMMAND("FLUSHALL");
        fill(prompt, 0, p);
        redisReply *v = rs_command(&server, "GET %s", names[0]);
        assert_non_null(v);
        size_t len = v->len;
        uint8_t *bytes = malloc(len);
        assert_non_null(bytes);
        memcpy(bytes, v->str, len);
        freeReplyObject(v);
        if (how == 0) {
            bytes[len / 2] ^= 0x10;
            set_value(names[0], bytes, len);
        } else {
            set_value(names[1], bytes, len); /* names[0]'s under [1] */
        }
        free(bytes);
        s = serve(prompt, p, &rows);
        assert_int_equal(s.store_damaged, 1);
        assert_true(s.store_hit_blocks < PROMPT / 4);
        assert_int_equal(rows, PROMPT - 4 * s.store_hit_blocks);
    }
    for (size_t i = 0; i < keys->elements; i++)
        free(names[i]);
    free(names);
    freeReplyObject(keys);
    free(prompt);
}

/* How much of a prompt the store holds, by names: the engine's keys
 * (sealed or not) counted on the server, leading, with no value read;
 * a prompt that leaves the stored one at block 3 counts 3; another
 * salt, none; a dead server is an error, a restarted one counts again. */
static void count_held(const pkv_engine_params *p, const char *scheme)
{
    int32_t *prompt = hm_prompt(PROMPT, 21);
    COMMAND("FLUSHALL");
    fill(prompt, 0, *p);
    redis_host h;
    rh_init(&h, *p, server.port);
    enum { CAP = PROMPT / 4 + 2 };
    char *keys = malloc(CAP * PKV_STORE_KEY_MAX);
    const char *names[CAP];
    assert_non_null(keys);
    for (uint32_t i = 0; i < CAP; i++)
        names[i] = keys + (size_t)i * PKV_STORE_KEY_MAX;
    uint32_t n = 0, held = 99;
    assert_int_equal(pkv_engine_store_keys(h.host.engine, prompt, PROMPT, 0,
                                           keys, CAP, &n),
                     PKV_OK);
    assert_int_equal(n, PROMPT / 4);
    assert_memory_equal(names[0], scheme, 5);
    pkv_redis_stats before;
    pkv_redis_stats_init(&before);
    assert_int_equal(pkv_redis_get_stats(h.redis, &before), PKV_OK);
    assert_int_equal(pkv_redis_count_prefix(h.redis, names, n, &held),
                     PKV_OK);
    assert_int_equal(held, PROMPT / 4);
    pkv_redis_stats after;
    pkv_redis_stats_init(&after);
    assert_int_equal(pkv_redis_get_stats(h.redis, &after), PKV_OK);
    assert_int_equal(after.bytes_read, before.bytes_read); /* no value */
    /* A capacity under the prompt's blocks: that many keys. */
    assert_int_equal(pkv_engine_store_keys(h.host.engine, prompt, PROMPT, 0,
                                           keys, 2, &n),
                     PKV_OK);
    assert_int_equal(n, 2);
    /* Leaves the stored prompt in block 3: its first 3 blocks held. */
    prompt[13] = (prompt[13] + 1) % 1000;
    assert_int_equal(pkv_engine_store_keys(h.host.engine, prompt, PROMPT, 0,
                                           keys, CAP, &n),
                     PKV_OK);
    assert_int_equal(pkv_redis_count_prefix(h.redis, names, n, &held),
                     PKV_OK);
    assert_int_equal(held, 3);
    assert_int_equal(pkv_engine_store_keys(h.host.engine, prompt, PROMPT, 5,
                                           keys, CAP, &n),
                     PKV_OK);
    assert_int_equal(pkv_redis_count_prefix(h.redis, names, n, &held),
                     PKV_OK);
    assert_int_equal(held, 0);
    /* Bad arguments. */
    assert_int_equal(pkv_redis_count_prefix(h.redis, names, n, NULL),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(pkv_redis_count_prefix(h.redis, NULL, 1, &held),
                     PKV_ERR_INVALID_ARGUMENT);
    const char *empty[1] = {""};
    assert_int_equal(pkv_redis_count_prefix(h.redis, empty, 1, &held),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(pkv_redis_count_prefix(h.redis, names, 0, &held),
                     PKV_OK);
    assert_int_equal(held, 0);
    /* The server down: an error, not a count; back: counts again. */
    rs_kill(&server);
    held = 99;
    assert_int_equal(pkv_redis_count_prefix(h.redis, names, n, &held),
                     PKV_ERR_STORE);
    assert_int_equal(held, 0);
    assert_int_equal(rs_restart(&server), 0);
    sleep_ms(50); /* past retry_ms */
    assert_int_equal(pkv_redis_count_prefix(h.redis, names, n, &held),
                     PKV_OK);
    assert_int_equal(held, 0); /* restarted empty */
    free(keys);
    rh_free(&h);
    free(prompt);
}

static void test_count_prefix(void **state)
{
    (void)state;
    pkv_engine_params p = params_of(PKV_BACKEND_KIND_CPU, PKV_KV_DTYPE_F16);
    count_held(&p, "pkv1:");
    p.seal_key = ch_seal_key;
    count_held(&p, "pkvs:");
    /* An engine without a store has no keys to give. */
    ch_host h;
    pkv_engine_params plain = params_of(PKV_BACKEND_KIND_CPU,
                                        PKV_KV_DTYPE_F16);
    ch_cmocka_init(&h, &plain, hm_tolerance(plain.kv_dtype));
    int32_t t[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    char key[PKV_STORE_KEY_MAX];
    uint32_t n = 7;
    assert_int_equal(pkv_engine_store_keys(h.engine, t, 9, 0, key, 1, &n),
                     PKV_ERR_BAD_STATE);
    assert_int_equal(n, 0);
    ch_free(&h);
}

/* The server killed while a load is in flight (frozen first, so that the
 * load is surely in flight), then restarted empty: the prompt is
 * computed; once the connector reconnects, saves and hits work again. */
static void test_kill_during_load(void **state)
{
    (void)state;
    pkv_engine_params p = params_of(PKV_BACKEND_KIND_CPU, PKV_KV_DTYPE_F16);
    int32_t *prompt = hm_prompt(PROMPT, 7);
    COMMAND("FLUSHALL");
    fill(prompt, 0, p);
    redis_host b;
    rh_init(&b, p, server.port);
    rs_stop_process(&server);
    pkv_seq_id id = add(&b, prompt, 0);
    ch_step(&b.host, NULL); /* asks: the load goes out */
    assert_int_equal(stats_of(&b).num_loading, 1);
    sleep_ms(50);
    rs_kill(&server);
    assert_int_equal(first_rows(&b, id), PROMPT);
    rh_run(&b); /* its saves fail: nobody listens */
    pkv_engine_stats s = stats_of(&b);
    assert_int_equal(s.store_load_failures + s.store_timeouts, 1);
    assert_int_equal(s.store_hit_blocks, 0);
    assert_int_equal(s.store_saves + s.store_save_failures, PROMPT / 4);
    assert_int_equal(rs_restart(&server), 0);
    /* The same engine: its connector reconnects; the restarted server is
     * empty, so the prompt misses and is saved; a new engine then hits. */
    pkv_seq_id again = add(&b, prompt, 0);
    assert_int_equal(first_rows(&b, again), 1); /* its own prefix cache */
    rh_run(&b);
    rh_free(&b);
    int32_t *fresh = hm_prompt(PROMPT, 12);
    fill(fresh, 0, p); /* saves through a new connection */
    uint32_t rows;
    s = serve(fresh, p, &rows);
    assert_int_equal(rows, 1);
    free(fresh);
    free(prompt);
}

/* The server frozen while saves are in flight, then killed: the saves
 * fail, the engine goes idle (no stall), every row was right. */
static void test_kill_during_save(void **state)
{
    (void)state;
    pkv_engine_params p = params_of(PKV_BACKEND_KIND_CPU, PKV_KV_DTYPE_F16);
    int32_t *prompt = hm_prompt(PROMPT, 13);
    redis_host a;
    rh_init(&a, p, server.port);
    add(&a, prompt, 0);
    rs_stop_process(&server);
    for (int i = 0; i < 20; i++)
        ch_step(&a.host, NULL); /* computes, samples, ends; saves wait */
    assert_true(pkv_engine_has_work(a.host.engine));
    rs_kill(&server);
    rh_run(&a);
    pkv_engine_stats s = stats_of(&a);
    assert_int_equal(s.store_saves, 0);
    assert_int_equal(s.store_save_failures, PROMPT / 4);
    rh_free(&a);
    assert_int_equal(rs_restart(&server), 0);
    free(prompt);
}

/* A frozen server: the engine's deadline (100 ms, the connector's 2 s)
 * or the connector's (50 ms, the engine's 1 s) ends the wait. */
static void test_slow_server(void **state)
{
    (void)state;
    pkv_engine_params p = params_of(PKV_BACKEND_KIND_CPU, PKV_KV_DTYPE_F16);
    int32_t *prompt = hm_prompt(PROMPT, 7);
    COMMAND("FLUSHALL");
    fill(prompt, 0, p);
    for (int engine_first = 0; engine_first < 2; engine_first++) {
        redis_host b;
        rh_connect(&b, server.port, engine_first ? 2000 : 50);
        b.store.timeout_ms = engine_first ? 100 : 1000;
        rh_start(&b, p);
        rs_stop_process(&server);
        pkv_seq_id id = add(&b, prompt, 0);
        assert_int_equal(first_rows(&b, id), PROMPT);
        pkv_engine_stats s = stats_of(&b);
        assert_int_equal(s.store_timeouts, engine_first ? 1 : 0);
        assert_int_equal(s.store_load_failures, engine_first ? 0 : 1);
        rs_continue(&server);
        rh_run(&b);
        rh_free(&b);
    }
    free(prompt);
}

/* The connector destroyed before its engine, in the middle of a prompt
 * (pkv_redis.h forbids the order): the engine holds it, so it is closed,
 * not freed; the engine's loads and saves fail, it computes and ends
 * every sequence, and its destroy frees the connector (the sanitizer
 * builds: no use after free, no leak). */
static void test_connector_destroyed_first(void **state)
{
    (void)state;
    pkv_engine_params p = params_of(PKV_BACKEND_KIND_CPU, PKV_KV_DTYPE_F16);
    COMMAND("FLUSHALL");
    int32_t *prompt = hm_prompt(PROMPT, 17);
    fill(prompt, 0, p);
    redis_host b;
    rh_init(&b, p, server.port);
    pkv_seq_id id = add(&b, prompt, 0);
    ch_step(&b.host, NULL); /* asks: the load goes out */
    pkv_redis_destroy(b.redis);
    assert_non_null(strstr(pkv_redis_last_error(), "still use"));
    b.redis = NULL;
    int32_t *second = hm_prompt(PROMPT, 18);
    pkv_seq_id other = add(&b, second, 0);
    rh_run(&b);
    assert_true(ch_find(&b.host, id)->ended);
    assert_true(ch_find(&b.host, other)->ended);
    pkv_engine_stats s = stats_of(&b);
    print_message("after the connector's destroy: %llu load failures, "
                  "%llu timeouts, %llu save failures\n",
                  (unsigned long long)s.store_load_failures,
                  (unsigned long long)s.store_timeouts,
                  (unsigned long long)s.store_save_failures);
    assert_int_equal(s.store_saves, 0);
    rh_free(&b); /* the engine's destroy frees the connector */
    free(second);
    free(prompt);
}

/* Two engines given one connector's store (pkv_redis.h forbids it):
 * their tickets collide, and cancel and poll match by ticket alone. The
 * connector refuses a ticket already in flight, so the misuse costs
 * misses, failed saves and timeouts, never memory (the sanitizer builds)
 * or a wrong row (the check host). */
static void test_two_engines_one_store(void **state)
{
    (void)state;
    pkv_engine_params p = params_of(PKV_BACKEND_KIND_CPU, PKV_KV_DTYPE_F16);
    COMMAND("FLUSHALL");
    int32_t *prompts[4];
    for (uint64_t i = 0; i < 4; i++)
        prompts[i] = hm_prompt(PROMPT, 11 + i % 2); /* two prompts, twice */
    /* Stored already: both engines load them, under the same tickets. */
    fill(prompts[0], 0, p);
    fill(prompts[1], 0, p);
    redis_host a;
    rh_init(&a, p, server.port);
    ch_host b;
    p.store = &a.store;
    ch_cmocka_init(&b, &p, hm_tolerance(p.kv_dtype));
    for (uint64_t i = 0; i < 4; i++) {
        ch_add_salted(&a.host, prompts[i], PROMPT, 3, 0);
        ch_add_salted(&b, prompts[i], PROMPT, 3, 0);
    }
    /* A frozen server keeps the first engine's loads in the connector
     * while the second sends the same tickets: they collide whatever the
     * machine's timing. */
    rs_stop_process(&server);
    ch_step(&a.host, NULL);
    ch_step(&b, NULL);
    rs_continue(&server);
    for (int steps = 0; pkv_engine_has_work(a.host.engine) ||
                        pkv_engine_has_work(b.engine);
         steps++) {
        assert_true(steps < 20000);
        const pkv_batch *ba = NULL, *bb = NULL;
        if (pkv_engine_has_work(a.host.engine))
            ch_step(&a.host, &ba);
        if (pkv_engine_has_work(b.engine))
            ch_step(&b, &bb);
        if ((ba == NULL || ba->num_tokens == 0) &&
            (bb == NULL || bb->num_tokens == 0))
            sleep_ms(1);
    }
    ch_check_idle(&a.host);
    ch_check_idle(&b);
    pkv_engine_stats sa = stats_of(&a), sb;
    pkv_engine_stats_init(&sb);
    assert_int_equal(pkv_engine_get_stats(b.engine, &sb), PKV_OK);
    /* Tickets collided (the engines number theirs alike) and were
     * refused. A ticket one engine sends after the other's same ticket
     * left the connector can still have its result polled by the other
     * and wait out its deadline; what the refusal guarantees is that no
     * engine's buffers are written after it gave them up (the sanitizer
     * builds run this test). */
    pkv_redis_stats rs;
    pkv_redis_stats_init(&rs);
    assert_int_equal(pkv_redis_get_stats(a.redis, &rs), PKV_OK);
    print_message("two engines, one connector: %llu refused or failed "
                  "commands; hits %llu + %llu blocks, load failures %llu + "
                  "%llu\n",
                  (unsigned long long)rs.errors,
                  (unsigned long long)sa.store_hit_blocks,
                  (unsigned long long)sb.store_hit_blocks,
                  (unsigned long long)sa.store_load_failures,
                  (unsigned long long)sb.store_load_failures);
    assert_true(rs.errors > 0);
    ch_free(&b);
    rh_free(&a);
    for (int i = 0; i < 4; i++)
        free(prompts[i]);
}

/* maxmemory with LRU eviction while prompts are saved: later requests hit
 * what is left and compute the rest, rows right either way. */
static void test_eviction(void **state)
{
    (void)state;
    pkv_engine_params p = params_of(PKV_BACKEND_KIND_CPU, PKV_KV_DTYPE_F16);
    COMMAND("FLUSHALL");
    redisReply *used = rs_command(&server, "INFO memory");
    assert_non_null(used);
    const char *at = strstr(used->str, "used_memory:");
    assert_non_null(at);
    long long base = atoll(at + strlen("used_memory:"));
    freeReplyObject(used);
    /* Room for about three quarters of what the prompts save (a value
     * and its key take about 850 bytes here): LRU in Redis samples, so
     * with less room the first block of every prompt (without which no
     * block of it can hit) may be gone. */
    enum { PROMPTS = 30 };
    COMMAND("CONFIG SET maxmemory %lld", base + 200000);
    COMMAND("CONFIG SET maxmemory-policy allkeys-lru");
    redis_host a, b;
    rh_init(&a, p, server.port);
    int32_t *prompts[PROMPTS];
    for (uint32_t i = 0; i < PROMPTS; i++) {
        prompts[i] = hm_prompt(PROMPT, 100 + i);
        add(&a, prompts[i], 0);
        rh_run(&a);
    }
    /* Newest first: the first requests find their blocks, and their
     * own saves do not push those out before they are asked. */
    rh_init(&b, p, server.port);
    for (uint32_t i = PROMPTS; i-- > 0;) {
        add(&b, prompts[i], 0);
        rh_run(&b);
    }
    pkv_engine_stats s = stats_of(&b);
    assert_true(s.store_hit_blocks > 0);
    assert_true(s.store_hit_blocks < PROMPTS * (PROMPT / 4));
    redisReply *stats = rs_command(&server, "INFO stats");
    assert_non_null(stats);
    at = strstr(stats->str, "evicted_keys:");
    assert_non_null(at);
    assert_true(atoll(at + strlen("evicted_keys:")) > 0);
    freeReplyObject(stats);
    rh_free(&a);
    rh_free(&b);
    COMMAND("CONFIG SET maxmemory 0");
    for (uint32_t i = 0; i < PROMPTS; i++)
        free(prompts[i]);
}

/* A connector for h through the TLS tunnel of t, with AUTH. */
static void rh_connect_tls(redis_host *h, const rs_tls *t,
                           const char *password)
{
    pkv_redis_params rp;
    assert_int_equal(pkv_redis_params_init(&rp), PKV_OK);
    rp.port = (uint32_t)t->tunnel_port;
    rp.password = password;
    rp.retry_ms = 10;
    assert_int_equal(pkv_redis_create(&rp, &h->redis), PKV_OK);
    assert_int_equal(pkv_store_init(&h->store), PKV_OK);
    assert_int_equal(pkv_redis_store(h->redis, &h->store), PKV_OK);
}

/* TLS end to end (pkv_redis.h, "TLS"): engines whose connectors reach a
 * redis-server that takes TLS only, through a stunnel tunnel verifying
 * its certificate, with AUTH and a deployment key: one computes a prompt
 * and saves its blocks, a second with a connector of its own loads them
 * all and computes one row, every row checked against dense attention;
 * the server holds sealed names only. Fails without stunnel4 or openssl
 * (tests/deps.sh installs both). */
static void test_tls_engines(void **state)
{
    (void)state;
    rs_tls t;
    assert_int_equal(rs_tls_start(&t), 0);
    assert_int_equal(rs_require_password(&t.server, "e2e-pw"), 0);
    pkv_engine_params p = params_of(PKV_BACKEND_KIND_CPU, PKV_KV_DTYPE_F16);
    p.seal_key = ch_seal_key;
    p.seal_key_size = 32;
    int32_t *prompt = hm_prompt(PROMPT, 23);
    redis_host a, b;
    rh_connect_tls(&a, &t, "e2e-pw");
    rh_start(&a, p);
    add(&a, prompt, 0);
    rh_run(&a);
    assert_int_equal(stats_of(&a).store_saves, PROMPT / 4);
    rh_free(&a);
    rh_connect_tls(&b, &t, "e2e-pw");
    rh_start(&b, p);
    pkv_seq_id id = add(&b, prompt, 0);
    assert_int_equal(first_rows(&b, id), 1);
    rh_run(&b);
    pkv_engine_stats s = stats_of(&b);
    assert_int_equal(s.store_hit_blocks, PROMPT / 4);
    assert_int_equal(s.store_damaged + s.store_mismatched, 0);
    rh_free(&b);
    redisReply *keys = rs_command(&t.server, "KEYS *");
    assert_non_null(keys);
    assert_int_equal(keys->elements, PROMPT / 4);
    for (size_t i = 0; i < keys->elements; i++)
        assert_memory_equal(keys->element[i]->str, "pkvs:", 5);
    freeReplyObject(keys);
    rs_tls_stop(&t);
    free(prompt);
}

/* The engine fuzzer's seeded inputs with their store on this server
 * (fuzz_engine.c under PKV_FUZZ_REDIS): every row, batch and invariant
 * checked, as with the in-process store. */
static void test_fuzz(void **state)
{
    (void)state;
    char port[16];
    snprintf(port, sizeof port, "%d", server.port);
    char *argv[] = {(char *)PKV_FUZZ_REDIS_BINARY, (char *)"--ops",
                    (char *)"30000", NULL};
    assert_int_equal(setenv("PKV_FUZZ_REDIS_PORT", port, 1), 0);
    pid_t pid;
    assert_int_equal(posix_spawn(&pid, PKV_FUZZ_REDIS_BINARY, NULL, NULL,
                                 argv, environ),
                     0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    unsetenv("PKV_FUZZ_REDIS_PORT");
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    redisReply *keys = rs_command(&server, "DBSIZE");
    assert_non_null(keys);
    assert_true(keys->integer > 0); /* the inputs saved blocks */
    freeReplyObject(keys);
}

static int start_server(void **state)
{
    (void)state;
    return rs_start(&server, NULL) == 0 ? 0 : -1;
}

static int stop_server(void **state)
{
    (void)state;
    rs_stop(&server);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 6 && strcmp(argv[1], "--peer") == 0)
        return peer(atoi(argv[2]), (int32_t)atoi(argv[3]),
                    (int32_t)atoi(argv[4]), argv[5]);
    if (!rs_available()) {
        fprintf(stderr, "redis-server not found: skipped\n");
        return RS_SKIP;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_processes),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_sealed),
        cmocka_unit_test(test_kill_during_load),
        cmocka_unit_test(test_kill_during_save),
        cmocka_unit_test(test_slow_server),
        cmocka_unit_test(test_two_engines_one_store),
        cmocka_unit_test(test_connector_destroyed_first),
        cmocka_unit_test(test_eviction),
        cmocka_unit_test(test_tls_engines),
        cmocka_unit_test(test_count_prefix),
        cmocka_unit_test(test_fuzz),
    };
    return cmocka_run_group_tests(tests, start_server, stop_server);
}
