/* SPDX-License-Identifier: MIT */
/*
 * pkv-server: a GGUF model (as pkv-gguf runs it) served over HTTP with
 * OpenAI's API, its KV cache in pkv.
 *
 *   pkv-server [--model gemma3|smollm2 | --weights PATH] [--name NAME]
 *              [--host ADDR] [--port N] [--kv f32|f16|u8|u4|u8k-u4v]
 *              [--backend auto|cpu|opencl] [--threads N] [--ctx N]
 *              [--kv-tokens N] [--max-requests N] [--max-clients N]
 *              [--max-body BYTES] [--max-tokens N] [--timeout S]
 *              [--http-threads N] [--kv-events ENDPOINT]
 *              [--kv-events-replay ENDPOINT] [--store HOST:PORT]
 *
 * POST /v1/completions and /v1/chat/completions (streamed with "stream":
 * true), their prefix lookups (POST /pkv/lookup/v1/completions and
 * /pkv/lookup/v1/chat/completions: lookup.h), GET /v1/models, /health
 * and /metrics. Listens on 127.0.0.1 by
 * default; --port 0 (the default 8080 otherwise) takes a free port. It
 * prints "pkv-server: listening on http://ADDR:PORT" once it serves, and
 * ends on SIGINT or SIGTERM: requests in flight then end with 503.
 * --kv-events publishes the engine's KV events over ZeroMQ in vLLM's
 * wire format (events.h), for a KV-aware router. --store shares the
 * prompts' blocks through a Redis server with every host naming the
 * same weights (host/store.h): a fleet's servers load what another
 * computed.
 *
 * Threads: libmicrohttpd's (--http-threads) read, parse and tokenize
 * requests and write answers; the main thread runs the step loop, the
 * only one calling pkv and the model (server.h, http.h, job.h).
 */
#define _POSIX_C_SOURCE 200809L /* sigaction */
#include "args.h"
#include "events.h"
#include "host.h"
#include "http.h"
#include "server.h"
#include "store.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct options {
    const char *model, *weights, *name, *kv_events, *kv_events_replay;
    const char *store; /* HOST:PORT of a Redis sharing blocks, or NULL */
    srv_http_options http;
    int32_t kv_dtype, backend;
    uint32_t threads, ctx, kv_tokens, max_requests, max_tokens, timeout_s;
    uint32_t max_body;
} options;

static int usage(FILE *out, int code)
{
    fprintf(out,
            "usage: pkv-server [--model gemma3|smollm2 | --weights PATH] "
            "[--name NAME]\n"
            "                  [--host ADDR] [--port N] "
            "[--kv f32|f16|u8|u4|u8k-u4v]\n"
            "                  [--backend auto|cpu|opencl] [--threads N] "
            "[--ctx N]\n"
            "                  [--kv-tokens N] [--max-requests N] "
            "[--max-clients N]\n"
            "                  [--max-body BYTES] [--max-tokens N] "
            "[--timeout S]\n"
            "                  [--http-threads N] [--kv-events ENDPOINT]\n"
            "                  [--kv-events-replay ENDPOINT] [--store "
            "HOST:PORT]\n"
            "OpenAI's API over HTTP: POST /v1/completions and\n"
            "/v1/chat/completions (\"stream\": true for server-sent "
            "events),\nGET /v1/models, /health, /metrics (Prometheus).\n"
            "POST /pkv/lookup/v1/completions, "
            "/pkv/lookup/v1/chat/completions: the\n  same bodies, "
            "answered {\"prompt_tokens\", \"cached_tokens\", "
            "\"store_tokens\"}:\n  how much of the prompt the KV cache "
            "and the store hold (nothing\n  is run; store_tokens absent "
            "without --store, null when the store\n  could not be "
            "asked).\n"
            "--name: the model's name in requests and answers (default\n"
            "  the --model name, or the file's name).\n"
            "--host 127.0.0.1 and --port 8080 by default; --port 0 takes "
            "a free port.\n"
            "--ctx N: tokens a sequence holds, prompt and answer (default\n"
            "  4096, at most the model's context).\n"
            "--kv-tokens N: the KV cache, in tokens over every sequence\n"
            "  (default 16384).\n"
            "Limits: --max-requests in flight (default 64; 429 beyond),\n"
            "  --max-clients connections (default 256), --max-body bytes\n"
            "  of a request (default 1048576; 413 beyond), --max-tokens a\n"
            "  request may ask for (default 4096), --timeout seconds a\n"
            "  request may take (default 600; 504 beyond), idle\n"
            "  connections closed after 60 s.\n"
            "--kv-events ENDPOINT: publish the KV cache's blocks as they are\n"
            "  stored and evicted, in vLLM's KV-events format (msgpack over\n"
            "  ZeroMQ PUB, e.g. tcp://*:5557 or ipc:///run/pkv/events: "
            "bound when it\n  holds '*' or '::' or is ipc:// or inproc://, "
            "else connected).\n"
            "--kv-events-replay ENDPOINT: a ROUTER that sends the last 1024\n"
            "  messages again from a sequence number on (vLLM's replay).\n"
            "--store HOST:PORT: share the prompts' KV blocks through a "
            "Redis server\n  with the other hosts of these weights.\n"
            "Ends on SIGINT or SIGTERM.\n");
    return code;
}

/* One option with a value; -1 on a bad value. */
static int parse_value(options *o, const char *a, const char *v)
{
    uint32_t u;
    if (strcmp(a, "--model") == 0) {
        char *path = gg_default_weights_path(v);
        if (path == NULL)
            return host_bad_arg("pkv-server", a, v, "gemma3 or smollm2");
        free(path);
        o->model = v;
    } else if (strcmp(a, "--weights") == 0) {
        o->weights = v;
    } else if (strcmp(a, "--name") == 0) {
        o->name = v;
    } else if (strcmp(a, "--host") == 0) {
        o->http.host = v;
    } else if (strcmp(a, "--kv-events") == 0) {
        o->kv_events = v;
    } else if (strcmp(a, "--kv-events-replay") == 0) {
        o->kv_events_replay = v;
    } else if (strcmp(a, "--store") == 0) {
        o->store = v;
    } else if (strcmp(a, "--kv") == 0) {
        if (host_parse_kv(v, &o->kv_dtype) != 0)
            return host_bad_arg("pkv-server", a, v,
                                "f32, f16, u8, u4 or u8k-u4v");
    } else if (strcmp(a, "--backend") == 0) {
        if (host_parse_backend(v, &o->backend) != 0)
            return host_bad_arg("pkv-server", a, v, "auto, cpu or opencl");
    } else if (host_parse_u32(v, &u) != 0 ||
               (u == 0 && strcmp(a, "--port") != 0 &&
                strcmp(a, "--threads") != 0)) {
        return host_bad_arg("pkv-server", a, v, "a whole number >= 1");
    } else if (strcmp(a, "--port") == 0) {
        if (u > 65535)
            return host_bad_arg("pkv-server", a, v, "0 to 65535");
        o->http.port = (uint16_t)u;
    } else if (strcmp(a, "--threads") == 0) {
        o->threads = u;
    } else if (strcmp(a, "--ctx") == 0) {
        if (u < 4)
            return host_bad_arg("pkv-server", a, v, "4 or more");
        o->ctx = u;
    } else if (strcmp(a, "--kv-tokens") == 0) {
        o->kv_tokens = u;
    } else if (strcmp(a, "--max-requests") == 0) {
        o->max_requests = u;
    } else if (strcmp(a, "--max-clients") == 0) {
        o->http.max_clients = u;
    } else if (strcmp(a, "--max-body") == 0) {
        o->max_body = u;
    } else if (strcmp(a, "--max-tokens") == 0) {
        o->max_tokens = u;
    } else if (strcmp(a, "--timeout") == 0) {
        o->timeout_s = u;
    } else {
        o->http.threads = u; /* --http-threads */
    }
    return 0;
}

/* 0, 1 for --help, or -1 after printing what is wrong. */
static int parse_options(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->http.host = "127.0.0.1";
    o->http.port = 8080;
    o->http.max_clients = 256;
    o->http.threads = 1;
    o->http.idle_timeout = 60;
    o->kv_dtype = PKV_KV_DTYPE_F16;
    o->backend = PKV_BACKEND_KIND_AUTO;
    o->ctx = 4096;
    o->kv_tokens = 16384;
    o->max_requests = 64;
    o->max_tokens = 4096;
    o->timeout_s = 600;
    o->max_body = 1u << 20;
    static const char *const with_value[] = {
        "--model",     "--weights",      "--name",        "--host",
        "--port",      "--kv",           "--backend",     "--threads",
        "--ctx",       "--kv-tokens",    "--max-requests", "--max-clients",
        "--max-body",  "--max-tokens",   "--timeout",     "--http-threads",
        "--kv-events", "--kv-events-replay", "--store"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
            return 1;
        if (host_option_with_value(
                "pkv-server", a, v, with_value,
                sizeof with_value / sizeof *with_value) != 0)
            return -1;
        i++;
        if (parse_value(o, a, v) != 0)
            return -1;
    }
    if (o->kv_events_replay != NULL && o->kv_events == NULL) {
        fprintf(stderr, "pkv-server: --kv-events-replay needs --kv-events\n");
        return -1;
    }
    if (o->model != NULL && o->weights != NULL) {
        fprintf(stderr, "pkv-server: --model and --weights exclude each "
                        "other\n");
        return -1;
    }
    return 0;
}

static volatile sig_atomic_t stop_asked;

static void on_signal(int sig)
{
    (void)sig;
    stop_asked = 1;
}

static void catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);
}

/* The name the API knows the model by: --name, --model's, or the file's
 * name without .gguf (points into weights, or a static string). */
static const char *model_name(const options *o, const char *weights,
                              char *buf, size_t size)
{
    if (o->name != NULL)
        return o->name;
    if (o->weights == NULL)
        return o->model ? o->model : "gemma3";
    const char *base = strrchr(weights, '/');
    snprintf(buf, size, "%s", base ? base + 1 : weights);
    size_t n = strlen(buf);
    if (n > 5 && strcmp(buf + n - 5, ".gguf") == 0)
        buf[n - 5] = '\0';
    return buf;
}

/* Serve until a signal: the engine, the HTTP side, the loop. */
static int serve(const options *o, srv_server *s, gg_model *m,
                 const char *weights)
{
    host_store store = {0};
    if (o->store != NULL) {
        char name[256];
        gg_store_model_name(m, weights, name, sizeof name);
        if (host_store_open(&store, "pkv-server", o->store, name) != 0)
            return 1;
    }
    srv_events *ev = NULL;
    if (o->kv_events != NULL &&
        (ev = srv_events_open(o->kv_events, o->kv_events_replay, "")) ==
            NULL) {
        host_store_close(&store);
        return 1;
    }
    gg_kv_choice kv = {.dtype = o->kv_dtype,
                       .key_quant = PKV_QUANT_GROUP_PER_CHANNEL,
                       .backend = o->backend,
                       .events = ev != NULL ? srv_events_publish : NULL,
                       .events_user = ev};
    pkv_engine_params p;
    uint32_t blocks = (o->kv_tokens + GG_BLOCK_SIZE - 1) / GG_BLOCK_SIZE + 1;
    pkv_engine *e = gg_engine_create(&p, m, &kv, s->ctx, blocks, 256,
                                     o->store != NULL ? &store.store : NULL);
    gg_host h = {0};
    int rc = 1;
    if (e == NULL) {
        srv_events_close(ev);
        host_store_close(&store);
        return 1;
    }
    if (ev != NULL)
        srv_events_set_medium(ev, pkv_engine_backend_name(e));
    if (gg_host_init(&h, m, p.max_batch_tokens) != 0) {
        fprintf(stderr, "pkv-server: out of memory\n");
        goto out;
    }
    s->engine = e;
    s->store = o->store != NULL ? &store : NULL;
    uint16_t port;
    struct MHD_Daemon *d = srv_http_start(s, &o->http, &port);
    if (d == NULL)
        goto out;
    printf("pkv-server: listening on http://%s:%u (model %s, chat "
           "template %s, context %u, KV %s on %s, %u blocks of %u tokens)\n",
           o->http.host, port, s->model_name, s->chat.name, s->ctx,
           host_kv_name(p.kv_dtype), pkv_engine_backend_name(e),
           p.num_blocks, GG_BLOCK_SIZE);
    if (ev != NULL)
        printf("pkv-server: KV events on %s\n", o->kv_events);
    if (o->store != NULL)
        printf("pkv-server: KV store %s\n", o->store);
    fflush(stdout);
    rc = srv_loop_run(s, e, &h.model, &stop_asked);
    srv_http_stop(d);
    printf("pkv-server: stopped\n");
out:
    gg_host_free(&h);
    pkv_engine_destroy(e);
    srv_events_close(ev);
    host_store_close(&store);
    return rc;
}

int main(int argc, char **argv)
{
    options o;
    int asked = parse_options(argc, argv, &o);
    if (asked != 0)
        return asked > 0 ? usage(stdout, 0) : usage(stderr, 2);
    catch_signals();
    gg_loaded loaded;
    if (gg_load(&loaded, "pkv-server", o.model, o.weights, o.threads) != 0)
        return 1;
    const gg_model *m = &loaded.model;
    srv_server s;
    memset(&s, 0, sizeof s);
    char name[256];
    s.tok = &loaded.tok;
    s.chat = gg_chat_detect(&m->config, s.tok);
    s.stop_ids[0] = m->config.eos;
    s.num_stop_ids = 1;
    if (s.chat.kind != GG_CHAT_NONE && s.chat.end != m->config.eos)
        s.stop_ids[s.num_stop_ids++] = s.chat.end;
    s.model_name = model_name(&o, loaded.weights, name, sizeof name);
    s.ctx = o.ctx < m->config.context_length ? o.ctx
                                              : m->config.context_length;
    s.limits = (srv_limits){o.max_tokens, s.ctx, 256, 256,
                            m->config.vocab_size, s.model_name};
    s.max_body = o.max_body;
    s.max_jobs = o.max_requests;
    s.timeout_s = o.timeout_s;
    s.started = (long long)time(NULL);
    int rc = 1;
    if (srv_server_init(&s) != 0) {
        fprintf(stderr, "pkv-server: cannot make a lock\n");
    } else {
        rc = serve(&o, &s, &loaded.model, loaded.weights);
        srv_server_free(&s);
    }
    gg_unload(&loaded);
    return rc;
}
