/* SPDX-License-Identifier: MIT */
/*
 * pkv-bench store: time to first token of a 2,000-token shared prompt on
 * a cold engine (A), which computes it and saves its blocks to Redis
 * through libpkv_redis, against a second engine (B, a new engine with a
 * new connector, as another server process would be) that loads them;
 * then how fast the blocks come: the engine's wait, the connector alone,
 * and redis-benchmark against the same server. The host is restart's
 * (the llama example's seeded model, CPU backend), f16 and u8 KV. Every
 * run must sample the same first token.
 *
 * The server: a redis-server this bench starts (tests/redis_server.c: a
 * free loopback port, no persistence; skipped without redis-server), or
 * --redis HOST:PORT (then every key is under a prefix of this run's,
 * given an expiry and deleted at the end: nothing else on that server is
 * touched).
 */
#define _POSIX_C_SOURCE 200809L /* fork, nanosleep, clock_gettime */
#include "attend.h"
#include "bench.h"
#include "bench_llama.h"
#include "model.h"
#include "sample.h"

#include "pkv/pkv.h"
#include "pkv/pkv_redis.h"

#include "redis_server.h" /* tests/: the redis-server we start */

#include <hiredis/hiredis.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum {
    BLOCK = 16,       /* llama_engine_params' block size */
    CHUNK = 512,      /* prompt rows per step, as restart */
    CONNECT_WAIT_MS = 2000,
    RAW_LOADS = 9,    /* connector-alone loads, median */
    PREFIX_MAX = 64,  /* pkv_redis_params.key_prefix */
    FULL_KEY = PREFIX_MAX + (int)PKV_STORE_KEY_MAX,
    DEL_BATCH = 128
};

/* Between polls of a load in flight (the engine's empty steps and the
 * connector-alone loop alike): a short sleep, not a spin, so that on 2
 * cores the stepping thread leaves one to redis-server and the
 * connector's worker. Linux's default 50 us timer slack comes on top. */
#define POLL_NAP_US 20L

/* redis-benchmark's requests: about a second each on a 2-core machine. */
#define RB_GETS 100000
#define RB_GETS_QUICK 10000
#define RB_MGETS 2000
#define RB_MGETS_QUICK 200
#define RB_PIPELINE "16"

static void nap_us(long us)
{
    struct timespec ts = {0, us * 1000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---------------------------------------------------------------- server */

/* The server: a redis-server of tests/redis_server.c's (rs), or --redis's
 * (rs zeroed). The bench's own commands go to host:port in both. */
typedef struct server {
    rs_server rs;
    char host[256];
    int port;
    char version[32];   /* redis_version of INFO server */
} server;

/* One command (as redisCommandArgv; lens NULL: strlen) on a connection of
 * its own, 2 s timeout: the reply, or NULL. Not one connection for the
 * whole run: an external server's idle timeout could close it. */
static redisReply *command(const server *sv, int argc, const char **argv,
                           const size_t *lens)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout(sv->host, sv->port, tv);
    redisReply *r = NULL;
    if (c != NULL && c->err == 0 && redisSetTimeout(c, tv) == REDIS_OK)
        r = redisCommandArgv(c, argc, argv, lens);
    redisFree(c);
    return r;
}

/* 1 if the server answers PING; its version goes to sv->version. */
static int server_answers(server *sv)
{
    const char *ping[] = {"PING"}, *info[] = {"INFO", "server"};
    redisReply *r = command(sv, 1, ping, NULL);
    int ok = r != NULL && r->type == REDIS_REPLY_STATUS &&
             strcmp(r->str, "PONG") == 0;
    freeReplyObject(r);
    r = ok ? command(sv, 2, info, NULL) : NULL;
    const char *v = r != NULL && r->type == REDIS_REPLY_STRING
                        ? strstr(r->str, "redis_version:")
                        : NULL;
    if (v != NULL)
        sscanf(v + 14, "%31[^\r\n]", sv->version);
    freeReplyObject(r);
    return ok;
}

/* --redis HOST:PORT (the last ':' splits, so "::1:6379" works): 0 when
 * it answers PING, 2 for a malformed spec, 1 when nothing answers. */
static int server_external(server *sv, const char *spec)
{
    const char *colon = strrchr(spec, ':');
    char *end = NULL;
    long port = colon != NULL ? strtol(colon + 1, &end, 10) : 0;
    size_t host_len = colon != NULL ? (size_t)(colon - spec) : 0;
    if (colon == NULL || end == colon + 1 || *end != '\0' || port < 1 ||
        port > 65535 || host_len == 0 || host_len >= sizeof sv->host) {
        fprintf(stderr, "store: --redis %s: expected HOST:PORT\n", spec);
        return 2;
    }
    memcpy(sv->host, spec, host_len);
    sv->host[host_len] = '\0';
    sv->port = (int)port;
    if (!server_answers(sv)) {
        fprintf(stderr, "store: no Redis server answers PING at %s\n",
                spec);
        return 1;
    }
    return 0;
}

/* Our own server (loopback, a free port, no persistence, killed with the
 * bench): 0, RS_SKIP without redis-server, 1 when it did not start. */
static int server_start(server *sv)
{
    int rc = rs_start(&sv->rs, NULL);
    if (rc == RS_SKIP)
        return RS_SKIP;
    snprintf(sv->host, sizeof sv->host, "127.0.0.1");
    sv->port = sv->rs.port;
    return rc == 0 && server_answers(sv) ? 0 : 1;
}

/* ------------------------------------------------------------- key lists */

/* Full keys (key_prefix included), for deletion and redis-benchmark. */
typedef struct key_list {
    char (*keys)[FULL_KEY];
    uint32_t count, capacity;
} key_list;

static int key_add(key_list *l, const char *prefix, const char *key)
{
    if (l->count == l->capacity) {
        uint32_t capacity = l->capacity * 2 + 64;
        void *grown = realloc(l->keys, capacity * sizeof *l->keys);
        if (grown == NULL)
            return -1;
        l->keys = grown;
        l->capacity = capacity;
    }
    snprintf(l->keys[l->count++], FULL_KEY, "%s%s", prefix, key);
    return 0;
}

static void key_list_free(key_list *l)
{
    free(l->keys);
    memset(l, 0, sizeof *l);
}

/* DEL every key of l on sv (--redis: leave the server as we found it). */
static void delete_keys(const server *sv, const key_list *l)
{
    const char *argv[DEL_BATCH + 1] = {"DEL"};
    for (uint32_t at = 0; at < l->count; at += DEL_BATCH) {
        int n = 1;
        for (uint32_t i = at; i < l->count && n <= DEL_BATCH; i++)
            argv[n++] = l->keys[i];
        freeReplyObject(command(sv, n, argv, NULL));
    }
}

/* ------------------------------------------------------- recording store */

/*
 * The engine's store: the connector's callbacks, passed through, with the
 * first load's keys noted (for the connector alone and redis-benchmark's
 * MGET) and the saved keys kept for cleanup.
 */
typedef struct rec_store {
    pkv_store inner;      /* pkv_redis's callbacks and user */
    const char *prefix;   /* the connector's key_prefix */
    key_list *saved;      /* full keys saved, or NULL */
    int loaded;           /* the first load was noted */
    uint32_t num_keys;
    char (*keys)[PKV_STORE_KEY_MAX]; /* the first load's keys */
} rec_store;

static pkv_status rec_load(void *user, uint64_t ticket,
                           const char *const *keys, uint32_t num_keys,
                           void *values, size_t value_size, uint64_t *sizes)
{
    rec_store *r = user;
    pkv_status st = r->inner.load(r->inner.user, ticket, keys, num_keys,
                                  values, value_size, sizes);
    if (st == PKV_OK && !r->loaded) {
        r->keys = calloc(num_keys, sizeof *r->keys);
        if (r->keys != NULL) {
            for (uint32_t i = 0; i < num_keys; i++)
                snprintf(r->keys[i], PKV_STORE_KEY_MAX, "%s", keys[i]);
            r->num_keys = num_keys;
        }
        r->loaded = 1;
    }
    return st;
}

static pkv_status rec_save(void *user, uint64_t ticket, const char *key,
                           const void *value, size_t value_size)
{
    rec_store *r = user;
    if (r->saved != NULL && key_add(r->saved, r->prefix, key) != 0)
        return PKV_ERR_OUT_OF_MEMORY;
    return r->inner.save(r->inner.user, ticket, key, value, value_size);
}

static uint32_t rec_poll(void *user, pkv_store_done *done, uint32_t capacity)
{
    rec_store *r = user;
    return r->inner.poll(r->inner.user, done, capacity);
}

static void rec_cancel(void *user, uint64_t ticket)
{
    rec_store *r = user;
    r->inner.cancel(r->inner.user, ticket);
}

/* The connector counts the engines on it (pkv_store.attach). */
static void rec_attach(void *user)
{
    rec_store *r = user;
    if (r->inner.attach != NULL)
        r->inner.attach(r->inner.user);
}

static void rec_detach(void *user)
{
    rec_store *r = user;
    if (r->inner.detach != NULL)
        r->inner.detach(r->inner.user);
}

/* A connector to sv under prefix, connected (so that no run times the
 * connection itself: a server keeps its connector). NULL on failure. */
static pkv_redis *connector(const server *sv, const char *prefix,
                            int external)
{
    pkv_redis_params p;
    pkv_redis_params_init(&p);
    p.host = sv->host;
    p.port = (uint32_t)sv->port;
    p.key_prefix = prefix;
    /* On a server not ours, keys of a run that crashed expire. */
    p.ttl_seconds = external ? 3600u : 0u;
    pkv_redis *r = NULL;
    if (pkv_redis_create(&p, &r) != PKV_OK) {
        fprintf(stderr, "store: %s\n", pkv_redis_last_error());
        return NULL;
    }
    pkv_redis_stats st;
    pkv_redis_stats_init(&st);
    for (int waited = 0; waited < CONNECT_WAIT_MS; waited++) {
        pkv_redis_get_stats(r, &st);
        if (st.connected)
            return r;
        nap_us(1000);
    }
    fprintf(stderr, "store: the connector did not connect to %s:%d\n",
            sv->host, sv->port);
    pkv_redis_destroy(r);
    return NULL;
}

/* ------------------------------------------------------------ the engine */

static pkv_engine *create_engine(const llama_config *c, int32_t dtype,
                                 uint32_t prompt_len, const pkv_store *store,
                                 const uint8_t *seal_key)
{
    pkv_engine_params p;
    llama_engine_params(&p, c);
    p.kv_dtype = dtype;
    p.seal_key = seal_key;
    p.backend = PKV_BACKEND_KIND_CPU;
    p.max_batch_tokens = CHUNK;
    p.num_blocks = 2 * (prompt_len / BLOCK + 1) + 8;
    p.store = store;
    pkv_engine *e = NULL;
    if (pkv_engine_create(&p, &e) != PKV_OK) {
        fprintf(stderr, "store: %s\n", pkv_last_error());
        return NULL;
    }
    return e;
}

/* One prompt's first token and where its time went. */
typedef struct ttft {
    double total;   /* seconds from adding the prompt to its first token */
    double to_rows; /* ... to the end of the first step_begin with rows */
    double begin;   /* that step_begin alone (it installs a landed load) */
    double forward; /* the forward passes up to the first token */
    double drain;   /* first token to pkv_engine_has_work 0: saves land */
    uint32_t steps; /* steps with rows up to the first token */
    uint32_t rows;  /* their rows */
    int32_t first;
} ttft;

/* Add the prompt (one new token), step until the engine has no work
 * (its saves landed). 0 on success. */
static int run_prompt(const llama_model *m, llama_scratch *s, float *logits,
                      pkv_engine *e, const int32_t *prompt,
                      uint32_t prompt_len, uint64_t salt, ttft *t)
{
    const llama_config *c = &m->config;
    llama_pkv_attend actx = {e, c};
    pkv_seq_params sp;
    pkv_seq_params_init(&sp);
    sp.prompt = prompt;
    sp.prompt_len = prompt_len;
    sp.max_new_tokens = 1;
    sp.cache_salt = salt;
    memset(t, 0, sizeof *t);
    t->first = -1;
    pkv_seq_id id;
    double t0 = bench_now_s(), t_first = 0;
    if (pkv_seq_add(e, &sp, &id) != PKV_OK)
        return 1;
    while (pkv_engine_has_work(e)) {
        const pkv_batch *b;
        double tb = bench_now_s();
        if (pkv_engine_step_begin(e, &b) != PKV_OK)
            return 1;
        double te = bench_now_s();
        if (b->num_tokens == 0) {
            /* A load or the saves in flight: nothing to run yet. */
            if (pkv_engine_step_end(e, NULL, NULL, 0) != PKV_OK)
                return 1;
            nap_us(POLL_NAP_US);
            continue;
        }
        if (t->first < 0 && t->steps++ == 0) {
            t->to_rows = te - t0;
            t->begin = te - tb;
        }
        if (t->first < 0)
            t->rows += b->num_tokens;
        if (llama_forward(m, s, b->num_tokens, b->token_ids, b->positions,
                          llama_attend_pkv, &actx, b->sample_rows,
                          b->num_samples, logits) != 0)
            return 1;
        if (t->first < 0)
            t->forward += bench_now_s() - te;
        int32_t sampled = 0;
        if (b->num_samples == 1) {
            sampled = host_sample(logits, c->vocab_size, 0.0f, 1.0f, NULL);
            if (t->first < 0) {
                t->first = sampled;
                t_first = bench_now_s();
                t->total = t_first - t0;
            }
        }
        if (pkv_engine_step_end(e, &sampled, NULL, b->num_samples) != PKV_OK)
            return 1;
    }
    t->drain = bench_now_s() - t_first;
    return t->first < 0;
}

static pkv_engine_stats stats_of(const pkv_engine *e)
{
    pkv_engine_stats st;
    pkv_engine_stats_init(&st);
    pkv_engine_get_stats(e, &st);
    return st;
}

/* -------------------------------------------------------- redis-benchmark */

/* path of name on $PATH, into buf; 0 if found. */
static int find_program(const char *name, char *buf, size_t cap)
{
    const char *path = getenv("PATH");
    if (path == NULL)
        path = "/usr/bin:/bin";
    while (*path != '\0') {
        size_t len = strcspn(path, ":");
        if (len > 0 && (size_t)snprintf(buf, cap, "%.*s/%s", (int)len, path,
                                        name) < cap &&
            access(buf, X_OK) == 0)
            return 0;
        path += len + (path[len] == ':');
    }
    return -1;
}

/* Run argv[0] with its stdout into out (cap bytes, NUL-terminated, the
 * rest read and dropped); its exit status, or -1. */
static int run_capture(char *const *argv, char *out, size_t cap)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) { /* async-signal-safe calls only: connector threads */
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    size_t n = 0;
    for (;;) {
        char sink[4096];
        int full = n + 1 >= cap;
        ssize_t got = full ? read(fds[0], sink, sizeof sink)
                           : read(fds[0], out + n, cap - 1 - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        if (!full)
            n += (size_t)got;
    }
    out[n] = '\0';
    close(fds[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Requests per second of --csv output's last test line
 * ("NAME","rps",...), or 0. */
static double csv_rps(const char *csv)
{
    double rps = 0;
    for (const char *line = csv; *line != '\0';) {
        const char *next = strchr(line, '\n');
        const char *sep = strstr(line, "\",\"");
        if (line[0] == '"' && strncmp(line, "\"test\"", 6) != 0 &&
            sep != NULL && (next == NULL || sep < next))
            rps = strtod(sep + 3, NULL);
        if (next == NULL)
            break;
        line = next + 1;
    }
    return rps;
}

/* redis-benchmark's figures at one value size. */
typedef struct rb_result {
    int ran;         /* 0: redis-benchmark missing or failed */
    double get1_rps; /* GET of one value as redis-benchmark runs it by
                        default: 50 clients, one request in flight each */
    double get_rps;  /* the same, -P 16: Redis's ceiling here */
    double mget_rps; /* MGET of the prompt's keys, 1 client, no -P */
} rb_result;

/*
 * GET: redis-benchmark's -t get reads a key no test wrote (every reply a
 * nil: no value bytes), so it runs as a custom command on a key of
 * value_size bytes set here, under prefix. MGET: the connector's own
 * command, the same keys, one connection, one command at a time.
 */
static void redis_bench(const server *sv, const char *prefix,
                        size_t value_size, const key_list *mget_keys,
                        int quick, rb_result *out)
{
    memset(out, 0, sizeof *out);
    char bin[512];
    if (find_program("redis-benchmark", bin, sizeof bin) != 0) {
        printf("store: redis-benchmark not found (Debian package "
               "redis-tools): its comparison skipped\n");
        return;
    }
    char key[FULL_KEY + 4];
    snprintf(key, sizeof key, "%srb", prefix);
    char *value = malloc(value_size);
    redisReply *r = NULL;
    if (value != NULL) {
        memset(value, 'x', value_size);
        const char *set_argv[] = {"SET", key, value, "EX", "3600"};
        size_t lens[] = {3, strlen(key), value_size, 2, 4};
        r = command(sv, 5, set_argv, lens);
    }
    int set = r != NULL && r->type == REDIS_REPLY_STATUS;
    freeReplyObject(r);
    free(value);
    size_t cap = 1u << 18;
    char *csv = malloc(cap);
    char port[16], gets[16], mgets[16];
    snprintf(port, sizeof port, "%d", sv->port);
    snprintf(gets, sizeof gets, "%d", quick ? RB_GETS_QUICK : RB_GETS);
    snprintf(mgets, sizeof mgets, "%d", quick ? RB_MGETS_QUICK : RB_MGETS);
    char *get_argv[] = {bin,  "-h", (char *)sv->host, "-p", port, "-n",
                        gets, "-P", RB_PIPELINE,      "-q", "--csv",
                        "GET", key, NULL};
    if (set && csv != NULL && run_capture(get_argv, csv, cap) == 0)
        out->get_rps = csv_rps(csv);
    char *get1_argv[] = {bin,  "-h", (char *)sv->host, "-p", port, "-n",
                         gets, "-q", "--csv",          "GET", key, NULL};
    if (set && csv != NULL && run_capture(get1_argv, csv, cap) == 0)
        out->get1_rps = csv_rps(csv);
    size_t argc = 11 + (size_t)mget_keys->count;
    char **mget_argv = calloc(argc + 1, sizeof *mget_argv);
    if (csv != NULL && mget_argv != NULL) {
        char *fixed[] = {bin,   "-h",  (char *)sv->host, "-p", port,
                         "-c",  "1",   "-n",             mgets, "-q",
                         "--csv"};
        memcpy(mget_argv, fixed, sizeof fixed);
        mget_argv[11] = "MGET";
        for (uint32_t i = 0; i < mget_keys->count; i++)
            mget_argv[12 + i] = mget_keys->keys[i];
        mget_argv[argc] = NULL;
        if (run_capture(mget_argv, csv, cap) == 0)
            out->mget_rps = csv_rps(csv);
    }
    free(mget_argv);
    free(csv);
    const char *del_argv[] = {"DEL", key};
    freeReplyObject(command(sv, 2, del_argv, NULL));
    out->ran = out->get_rps > 0 && out->get1_rps > 0 && out->mget_rps > 0;
    if (!out->ran)
        printf("store: redis-benchmark failed: its comparison skipped\n");
}

/* ------------------------------------------------------- connector alone */

/* The connector's load of keys (one MGET), called directly and polled
 * as the engine polls, RAW_LOADS times on one new connector: the first's
 * seconds (a new connection's, as the second engine's load was), the
 * median, and the bytes of one. 0 on success. */
static int raw_loads(const server *sv, const char *prefix, int external,
                     const rec_store *from, size_t value_size,
                     double *first, double *seconds, uint64_t *bytes)
{
    pkv_redis *redis = connector(sv, prefix, external);
    if (redis == NULL)
        return 1;
    pkv_store s;
    pkv_store_init(&s);
    pkv_redis_store(redis, &s);
    uint32_t n = from->num_keys;
    const char **keys = calloc(n, sizeof *keys);
    void *values = malloc((size_t)n * value_size);
    uint64_t *sizes = calloc(n, sizeof *sizes);
    double t[RAW_LOADS];
    int rc = keys == NULL || values == NULL || sizes == NULL;
    for (uint32_t i = 0; rc == 0 && i < n; i++)
        keys[i] = from->keys[i];
    for (int k = 0; rc == 0 && k < RAW_LOADS; k++) {
        uint64_t ticket = (uint64_t)k + 1;
        pkv_store_done done = {0, PKV_ERR_STORE, 0};
        double t0 = bench_now_s();
        rc = s.load(s.user, ticket, keys, n, values, value_size, sizes) !=
             PKV_OK;
        while (rc == 0 && s.poll(s.user, &done, 1) == 0) {
            nap_us(POLL_NAP_US);
            rc = bench_now_s() - t0 > 10.0;
        }
        t[k] = bench_now_s() - t0;
        rc = rc || done.ticket != ticket || done.status != PKV_OK;
        *bytes = 0;
        for (uint32_t i = 0; rc == 0 && i < n; i++) {
            rc = sizes[i] != value_size;
            *bytes += sizes[i];
        }
    }
    if (rc != 0) {
        fprintf(stderr, "store: the connector's own load failed\n");
    } else {
        *first = t[0];
        *seconds = bench_median(t, RAW_LOADS);
    }
    free(keys);
    free(values);
    free(sizes);
    pkv_redis_destroy(redis);
    return rc;
}

/* -------------------------------------------------------------- the runs */

enum { MAX_RUNS = 99 };

/* One KV dtype's figures. */
typedef struct dtype_result {
    const char *name;
    const uint8_t *seal_key; /* pkv_engine_params.seal_key, or NULL */
    int cold_runs, hit_runs;
    double cold, hit;          /* median TTFT, seconds */
    double hit_to_rows, hit_begin, hit_forward; /* medians, seconds */
    double hit_wait;           /* median store_wait_us, seconds */
    double hit_new, hit_wait_new; /* the connector's first load's */
    double cold_wait;          /* A's miss: median store_wait_us */
    double drain;              /* A: first token to saves landed, median */
    uint32_t hit_steps, hit_rows;
    int32_t first;
    uint64_t saves, save_bytes;           /* A, one run */
    uint64_t hit_blocks, query_blocks, load_bytes; /* B, one run */
    size_t value_size;
    double raw_first;          /* connector alone, first load, seconds */
    double raw;                /* connector alone, median seconds */
    uint64_t raw_bytes;
    rb_result rb;
} dtype_result;

typedef struct store_ctx {
    const bench_options *opt;
    const llama_model *m;
    llama_scratch *s;
    float *logits;
    const int32_t *prompt;
    uint32_t prompt_len;
    server *sv;
    int external;
    unsigned long stamp; /* this run's, in every key prefix */
} store_ctx;

/* A's and B's counters that must hold, or the figures mean nothing. */
static int check_cold(const pkv_engine_stats *a, uint32_t saves)
{
    if (a->store_saves == saves && a->store_save_failures == 0 &&
        a->store_saves_skipped == 0 && a->store_hit_blocks == 0)
        return 0;
    fprintf(stderr, "store: cold engine: %llu saves (%u expected), %llu "
                    "failed, %llu skipped, %llu blocks hit\n",
            (unsigned long long)a->store_saves, (unsigned)saves,
            (unsigned long long)a->store_save_failures,
            (unsigned long long)a->store_saves_skipped,
            (unsigned long long)a->store_hit_blocks);
    return 1;
}

static int check_hit(const pkv_engine_stats *b, uint32_t blocks)
{
    if (b->store_hit_blocks == blocks && b->store_query_blocks == blocks &&
        b->store_timeouts == 0 && b->store_load_failures == 0 &&
        b->store_damaged == 0 && b->store_mismatched == 0)
        return 0;
    fprintf(stderr, "store: second engine: %llu of %llu blocks hit (%u "
                    "expected); %llu timeouts, %llu failures, %llu "
                    "damaged, %llu mismatched\n",
            (unsigned long long)b->store_hit_blocks,
            (unsigned long long)b->store_query_blocks, (unsigned)blocks,
            (unsigned long long)b->store_timeouts,
            (unsigned long long)b->store_load_failures,
            (unsigned long long)b->store_damaged,
            (unsigned long long)b->store_mismatched);
    return 1;
}

/* An engine on a new connector of its own under prefix, through a
 * recording store (saved: keys saved are added there, or NULL). */
typedef struct store_engine {
    pkv_redis *redis;
    rec_store rec;
    pkv_store outer;
    pkv_engine *e;
} store_engine;

static int engine_open(const store_ctx *x, const dtype_result *r,
                       int32_t dtype, const char *prefix, key_list *saved,
                       store_engine *se)
{
    memset(se, 0, sizeof *se);
    se->redis = connector(x->sv, prefix, x->external);
    if (se->redis == NULL)
        return 1;
    pkv_store_init(&se->rec.inner);
    pkv_redis_store(se->redis, &se->rec.inner);
    se->rec.prefix = prefix;
    se->rec.saved = saved;
    se->outer = se->rec.inner;
    se->outer.user = &se->rec;
    se->outer.load = rec_load;
    se->outer.save = rec_save;
    se->outer.poll = rec_poll;
    se->outer.cancel = rec_cancel;
    se->outer.attach = rec_attach;
    se->outer.detach = rec_detach;
    se->e = create_engine(&x->m->config, dtype, x->prompt_len, &se->outer,
                          r->seal_key);
    return se->e == NULL;
}

/* The engine, then its connector; the recorded keys stay (rec.keys). */
static void engine_close(store_engine *se)
{
    pkv_engine_destroy(se->e);
    pkv_redis_destroy(se->redis);
    se->e = NULL;
    se->redis = NULL;
}

/* The store counters of one request: after - before. */
static pkv_engine_stats stats_delta(const pkv_engine_stats *after,
                                    const pkv_engine_stats *before)
{
    pkv_engine_stats d = *after;
    d.store_saves -= before->store_saves;
    d.store_save_bytes -= before->store_save_bytes;
    d.store_save_failures -= before->store_save_failures;
    d.store_saves_skipped -= before->store_saves_skipped;
    d.store_hit_blocks -= before->store_hit_blocks;
    d.store_query_blocks -= before->store_query_blocks;
    d.store_load_bytes -= before->store_load_bytes;
    d.store_wait_us -= before->store_wait_us;
    d.store_timeouts -= before->store_timeouts;
    d.store_load_failures -= before->store_load_failures;
    d.store_damaged -= before->store_damaged;
    d.store_mismatched -= before->store_mismatched;
    return d;
}

/* se's engine serves the prompt under salt (a tenant): its first token
 * (t) and the store counters of this request alone (st). 0 on success. */
static int serve(const store_ctx *x, store_engine *se, uint64_t salt,
                 ttft *t, pkv_engine_stats *st)
{
    pkv_engine_stats before = stats_of(se->e);
    int rc = run_prompt(x->m, x->s, x->logits, se->e, x->prompt,
                        x->prompt_len, salt, t);
    if (rc != 0)
        fprintf(stderr, "store: %s\n", pkv_engine_last_error(se->e));
    pkv_engine_stats after = stats_of(se->e);
    *st = stats_delta(&after, &before);
    return rc;
}

/* The first token a run sampled must be every run's. */
static int same_first(const dtype_result *r, int32_t first, const char *who)
{
    if (first == r->first)
        return 0;
    fprintf(stderr, "store: %s: %s sampled %d, the first cold engine %d\n",
            r->name, who, (int)first, (int)r->first);
    return 1;
}

static int run_dtype(const store_ctx *x, int32_t dtype, dtype_result *r)
{
    uint32_t saves = x->prompt_len / BLOCK;
    uint32_t blocks = (x->prompt_len - 1) / BLOCK; /* B's: all but the
                                                      last token's */
    int n = r->cold_runs; /* tenants: salts 0 .. n - 1 */
    double cold[MAX_RUNS], drain[MAX_RUNS], cold_wait[MAX_RUNS];
    double hit[MAX_RUNS], to_rows[MAX_RUNS], begin[MAX_RUNS];
    double fwd[MAX_RUNS], wait[MAX_RUNS];
    key_list saved = {NULL, 0, 0};
    key_list loaded = {NULL, 0, 0};
    char prefix[PREFIX_MAX + 1];
    snprintf(prefix, sizeof prefix, "pkv-bench:%lu:%ld:%s:", x->stamp,
             (long)getpid(), r->name);
    store_engine se;
    ttft t;
    pkv_engine_stats st;
    int rc = 0;
    /* Cold engines, one per tenant: each finds nothing of its salt. */
    for (int k = 0; rc == 0 && k < n; k++) {
        bench_progress("store: %s, cold engine %d of %d", r->name, k + 1,
                       n);
        rc = engine_open(x, r, dtype, prefix, &saved, &se) ||
             serve(x, &se, (uint64_t)k, &t, &st) || check_cold(&st, saves);
        engine_close(&se);
        free(se.rec.keys); /* A's miss: nothing to keep */
        if (rc == 0 && k == 0)
            r->first = t.first;
        rc = rc || same_first(r, t.first, "a cold engine");
        cold[k] = t.total;
        drain[k] = t.drain;
        cold_wait[k] = 1e-6 * (double)st.store_wait_us;
        r->saves = st.store_saves;
        r->save_bytes = st.store_save_bytes;
    }
    /* The second engine, a new one on a new connector, serves the
     * tenants in turn: its first request is a new server's (a new
     * connection, whose socket buffers and the server's for it have still
     * to grow, and new buffers for the values), the others a server's
     * that has been up a while: the medians. */
    if (rc == 0)
        rc = engine_open(x, r, dtype, prefix, NULL, &se);
    for (int k = 0; rc == 0 && k < n; k++) {
        bench_progress("store: %s, second engine, request %d of %d",
                       r->name, k + 1, n);
        rc = serve(x, &se, (uint64_t)k, &t, &st) || check_hit(&st, blocks) ||
             same_first(r, t.first, "the second engine");
        if (rc != 0)
            break;
        if (k == 0) {
            r->hit_new = t.total;
            r->hit_wait_new = 1e-6 * (double)st.store_wait_us;
            continue;
        }
        hit[k - 1] = t.total;
        to_rows[k - 1] = t.to_rows;
        begin[k - 1] = t.begin;
        fwd[k - 1] = t.forward;
        wait[k - 1] = 1e-6 * (double)st.store_wait_us;
        r->hit_steps = t.steps;
        r->hit_rows = t.rows;
        r->hit_blocks = st.store_hit_blocks;
        r->query_blocks = st.store_query_blocks;
        r->load_bytes = st.store_load_bytes;
    }
    engine_close(&se);
    rec_store rec = se.rec; /* the first request's load: its keys */
    if (rc == 0 && (rec.keys == NULL || rec.num_keys != blocks)) {
        fprintf(stderr, "store: the second engine's load was not seen\n");
        rc = 1;
    }
    if (rc == 0) {
        r->cold = bench_median(cold, (size_t)n);
        r->drain = bench_median(drain, (size_t)n);
        r->cold_wait = bench_median(cold_wait, (size_t)n);
        r->hit = bench_median(hit, (size_t)r->hit_runs);
        r->hit_to_rows = bench_median(to_rows, (size_t)r->hit_runs);
        r->hit_begin = bench_median(begin, (size_t)r->hit_runs);
        r->hit_forward = bench_median(fwd, (size_t)r->hit_runs);
        r->hit_wait = bench_median(wait, (size_t)r->hit_runs);
        r->value_size = (size_t)(r->load_bytes / r->hit_blocks);
        bench_progress("store: %s, the connector alone and redis-benchmark",
                       r->name);
        rc = raw_loads(x->sv, prefix, x->external, &rec, r->value_size,
                       &r->raw_first, &r->raw, &r->raw_bytes);
    }
    for (uint32_t i = 0; rc == 0 && i < rec.num_keys; i++)
        rc = key_add(&loaded, prefix, rec.keys[i]);
    if (rc == 0)
        redis_bench(x->sv, prefix, r->value_size, &loaded, x->opt->quick,
                    &r->rb);
    if (x->external)
        delete_keys(x->sv, &saved);
    free(rec.keys);
    key_list_free(&saved);
    key_list_free(&loaded);
    return rc;
}

/* ---------------------------------------------------------------- report */

static double gbps(double bytes, double seconds)
{
    return seconds > 0 ? bytes / seconds / 1e9 : 0;
}

static void print_table(const store_ctx *x, const dtype_result *r, int n)
{
    const llama_config *c = &x->m->config;
    printf("store: first token of a %u-token prompt (llama dim %u, %u "
           "layers, block %d,\n",
           (unsigned)x->prompt_len, (unsigned)c->dim,
           (unsigned)c->num_layers, BLOCK);
    printf("CPU backend), for %d tenants (salts): a cold engine per tenant "
           "computes it\nand saves its blocks to Redis; a second engine "
           "serves the tenants in turn,\nloading them. \"new conn\": its "
           "first request (a new engine, connection and\nbuffers); the "
           "hit medians are its %d others'. Redis %s at\n%s:%d%s.\n",
           r[0].cold_runs, r[0].hit_runs, x->sv->version, x->sv->host,
           x->sv->port, x->external ? "" : " (started by pkv-bench)");
    printf("\n  kv      cold ms   hit ms  cold/hit  new conn ms  blocks "
           "hit/saved  saved bytes  loaded bytes\n");
    for (int i = 0; i < n; i++) {
        char blocks[48];
        snprintf(blocks, sizeof blocks, "%llu/%llu",
                 (unsigned long long)r[i].hit_blocks,
                 (unsigned long long)r[i].saves);
        printf("  %-7s %7.1f %8.1f %8.1fx %12.1f %17s %12llu %13llu\n",
               r[i].name, 1e3 * r[i].cold, 1e3 * r[i].hit,
               r[i].cold / r[i].hit, 1e3 * r[i].hit_new, blocks,
               (unsigned long long)r[i].save_bytes,
               (unsigned long long)r[i].load_bytes);
    }
    printf("\n  a hit, ms: to its first rows (of which: the wait for the "
           "load, then the\n  step_begin that verifies and installs it), "
           "the forward pass of the rows\n  left; the cold engine's miss "
           "(the same MGET, no values) for comparison\n");
    printf("  kv      to rows    wait  install  rows  forward    total  "
           "cold's miss\n");
    for (int i = 0; i < n; i++)
        printf("  %-7s %7.2f %7.2f %8.2f %5u %8.2f %8.2f %12.2f\n",
               r[i].name, 1e3 * r[i].hit_to_rows, 1e3 * r[i].hit_wait,
               1e3 * r[i].hit_begin, (unsigned)r[i].hit_rows,
               1e3 * r[i].hit_forward, 1e3 * r[i].hit,
               1e3 * r[i].cold_wait);
    printf("\n  loads, GB/s: the engine (load bytes / its wait, median; "
           "\"new conn\": its first\n  request's), the connector alone "
           "(one MGET, polled: first on a new\n  connection, median warm), "
           "redis-benchmark\n");
    printf("  kv      value B  engine  new conn  conn 1st  conn warm  rb GET  "
           "rb GET -P16  rb MGET -c1  eng/GET  eng/GET-P16\n");
    for (int i = 0; i < n; i++) {
        double eng = gbps((double)r[i].load_bytes, r[i].hit_wait);
        double eng_new = gbps((double)r[i].load_bytes, r[i].hit_wait_new);
        double first = gbps((double)r[i].raw_bytes, r[i].raw_first);
        double raw = gbps((double)r[i].raw_bytes, r[i].raw);
        double get = r[i].rb.get_rps * (double)r[i].value_size / 1e9;
        double get1 = r[i].rb.get1_rps * (double)r[i].value_size / 1e9;
        double mget = r[i].rb.mget_rps * (double)r[i].load_bytes / 1e9;
        printf("  %-7s %7zu %7.2f %9.2f %9.2f %10.2f ", r[i].name,
               r[i].value_size, eng, eng_new, first, raw);
        if (r[i].rb.ran)
            printf("%7.2f %12.2f %12.2f %8.2f %12.2f\n", get1, get, mget,
                   eng / get1, eng / get);
        else
            printf("%7s %12s %12s %8s %12s\n", "-", "-", "-", "-", "-");
    }
    printf("\n  rb GET: redis-benchmark's GET of one value of that size as "
           "it runs by\n  default (50 clients, one request in flight each), "
           "and with -P " RB_PIPELINE " (16 in\n  flight each: what Redis "
           "can serve here); rb MGET: the connector's command,\n  an MGET "
           "of the prompt's %llu keys, one client, no pipelining. Polls "
           "every %ld us.\n",
           (unsigned long long)r[0].hit_blocks, POLL_NAP_US);
}

static void print_json(const store_ctx *x, const dtype_result *r)
{
    FILE *j = x->opt->json;
    double eng = gbps((double)r->load_bytes, r->hit_wait);
    double first = gbps((double)r->raw_bytes, r->raw_first);
    double raw = gbps((double)r->raw_bytes, r->raw);
    double get = r->rb.get_rps * (double)r->value_size / 1e9;
    double get1 = r->rb.get1_rps * (double)r->value_size / 1e9;
    double mget = r->rb.mget_rps * (double)r->load_bytes / 1e9;
    fprintf(j,
            "{\"bench\":\"store\",\"kv\":\"%s\",\"sealed\":%s,"
            "\"prompt_tokens\":%u,"
            "\"server\":\"%s\",\"redis_version\":\"%s\","
            "\"cold_runs\":%d,\"hit_runs\":%d,\"first_token\":%d,"
            "\"cold_ms\":%.3f,\"hit_ms\":%.3f,\"speedup\":%.2f,"
            "\"blocks_saved\":%llu,\"save_bytes\":%llu,"
            "\"blocks_hit\":%llu,\"load_bytes\":%llu,\"value_bytes\":%zu,"
            "\"hit_to_rows_ms\":%.3f,\"hit_wait_ms\":%.3f,"
            "\"hit_install_ms\":%.3f,\"hit_rows\":%u,"
            "\"hit_forward_ms\":%.3f,\"cold_miss_wait_ms\":%.3f,"
            "\"hit_new_connection_ms\":%.3f,"
            "\"store_new_connection_gbps\":%.4f,"
            "\"cold_drain_ms\":%.3f,\"store_gbps\":%.4f,"
            "\"connector_first_ms\":%.3f,\"connector_first_gbps\":%.4f,"
            "\"connector_ms\":%.3f,\"connector_gbps\":%.4f,",
            r->seal_key != NULL ? "f16" : r->name,
            r->seal_key != NULL ? "true" : "false", (unsigned)x->prompt_len,
            x->external ? "external" : "started", x->sv->version,
            r->cold_runs, r->hit_runs, (int)r->first, 1e3 * r->cold,
            1e3 * r->hit, r->cold / r->hit, (unsigned long long)r->saves,
            (unsigned long long)r->save_bytes,
            (unsigned long long)r->hit_blocks,
            (unsigned long long)r->load_bytes, r->value_size,
            1e3 * r->hit_to_rows, 1e3 * r->hit_wait, 1e3 * r->hit_begin,
            (unsigned)r->hit_rows, 1e3 * r->hit_forward,
            1e3 * r->cold_wait, 1e3 * r->hit_new,
            gbps((double)r->load_bytes, r->hit_wait_new), 1e3 * r->drain,
            eng, 1e3 * r->raw_first,
            first, 1e3 * r->raw, raw);
    if (r->rb.ran)
        fprintf(j,
                "\"rb_get_default_rps\":%.1f,\"rb_get_default_gbps\":%.4f,"
                "\"rb_get_rps\":%.1f,\"rb_get_gbps\":%.4f,"
                "\"rb_pipeline\":" RB_PIPELINE ",\"rb_clients\":50,"
                "\"rb_mget_rps\":%.1f,\"rb_mget_gbps\":%.4f,"
                "\"store_vs_rb_get_default\":%.3f,"
                "\"store_vs_rb_get\":%.3f,\"connector_vs_rb_get\":%.3f}\n",
                r->rb.get1_rps, get1, r->rb.get_rps, get, r->rb.mget_rps,
                mget, eng / get1, eng / get, raw / get);
    else
        fprintf(j, "\"rb_get_default_rps\":null,"
                   "\"rb_get_default_gbps\":null,"
                   "\"store_vs_rb_get_default\":null,"
                   "\"rb_get_rps\":null,\"rb_get_gbps\":null,"
                   "\"rb_mget_rps\":null,\"rb_mget_gbps\":null,"
                   "\"store_vs_rb_get\":null,"
                   "\"connector_vs_rb_get\":null}\n");
}

int bench_store(const bench_options *opt)
{
    llama_config c = bench_restart_config();
    uint32_t prompt_len = opt->prompt ? opt->prompt : 2000;
    /* One block to load at least; room for the one new token. */
    if (prompt_len < BLOCK + 1 || prompt_len + 1 > c.seq_len) {
        fprintf(stderr, "store: --prompt %u: from %d to %u tokens\n",
                (unsigned)prompt_len, BLOCK + 1, (unsigned)c.seq_len - 1);
        return 2;
    }
    /* Tenants: cold engines, and the second engine's requests (the
     * first a new server's, the others the medians). */
    int hits = opt->runs ? (int)opt->runs : opt->quick ? 2 : 5;
    if (hits < 2 || hits > MAX_RUNS) {
        fprintf(stderr, "store: --runs %d: from 2 to %d\n", hits, MAX_RUNS);
        return 2;
    }
    server sv;
    memset(&sv, 0, sizeof sv);
    int up = opt->redis != NULL ? server_external(&sv, opt->redis)
                                : server_start(&sv);
    if (up == RS_SKIP) {
        /* As isa without ocloc: nothing to measure, so that pkv-bench all
         * goes on. */
        printf("store: skipped: no redis-server (install redis-server or "
               "use --redis HOST:PORT)\n");
        return 0;
    }
    if (up != 0)
        return up;
    llama_model m;
    llama_scratch s;
    int model = llama_model_init_random(&m, &c, 7) == 0;
    int scratch = model && llama_scratch_init(&s, &c, CHUNK) == 0;
    float *logits = malloc((size_t)c.vocab_size * sizeof *logits);
    int32_t *prompt = malloc(prompt_len * sizeof *prompt);
    int rc = !scratch || logits == NULL || prompt == NULL;
    /* restart's prompt (same seed), so the two benches' colds compare. */
    uint64_t rng = 5;
    for (uint32_t i = 0; rc == 0 && i < prompt_len; i++)
        prompt[i] = (int32_t)(host_rand(&rng) % c.vocab_size);
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    store_ctx x = {opt, &m, &s, logits, prompt, prompt_len, &sv,
                   opt->redis != NULL,
                   (unsigned long)wall.tv_sec * 1000ul +
                       (unsigned long)(wall.tv_nsec / 1000000)};
    /* f16 again with a deployment key: what sealing costs the path. */
    static const uint8_t bench_key[32] = {
        0x70, 0x6b, 0x76, 0x2d, 0x62, 0x65, 0x6e, 0x63, 0x68, 0x2d, 0x73,
        0x65, 0x61, 0x6c, 0x2d, 0x6b, 0x65, 0x79, 0x2d, 0x6e, 0x6f, 0x74,
        0x2d, 0x73, 0x65, 0x63, 0x72, 0x65, 0x74, 0x2d, 0x30, 0x31};
    dtype_result r[3];
    memset(r, 0, sizeof r);
    const char *names[3] = {"f16", "u8", "f16+key"};
    const int32_t dtypes[3] = {PKV_KV_DTYPE_F16, PKV_KV_DTYPE_U8,
                               PKV_KV_DTYPE_F16};
    const int rows = 3;
    for (int i = 0; i < rows && rc == 0; i++) {
        r[i].name = names[i];
        r[i].seal_key = i == 2 ? bench_key : NULL;
        r[i].cold_runs = hits;     /* tenants */
        r[i].hit_runs = hits - 1;  /* the second engine's after its first */
        rc = run_dtype(&x, dtypes[i], &r[i]);
    }
    if (rc == 0) {
        print_table(&x, r, rows);
        for (int i = 0; i < rows && opt->json != NULL; i++)
            print_json(&x, &r[i]);
    }
    rs_stop(&sv.rs);
    if (scratch)
        llama_scratch_free(&s);
    if (model)
        llama_model_free(&m);
    free(logits);
    free(prompt);
    return rc;
}
