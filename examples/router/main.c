/* SPDX-License-Identifier: MIT */
/*
 * pkv-router: OpenAI's API in front of several pkv-server processes,
 * each request sent to the one where it costs least in tokens: the
 * prompt's tokens past the prefix its KV cache holds, as the backends' KV
 * events tell (vLLM's wire format), plus those its requests in flight
 * were sent to compute (route.c).
 *
 *   pkv-router --backend URL[,EVENTS[,REPLAY]] ... [--model gemma3|smollm2 |
 *              --weights PATH] [--policy prefix|round-robin]
 *              [--host ADDR] [--port N] [--max-clients N]
 *              [--max-body BYTES] [--max-answer BYTES] [--timeout S]
 *              [--max-blocks N] [--lookup-timeout MS]
 *
 * URL is a backend's http://HOST:PORT, EVENTS the ZeroMQ endpoint its
 * KV events are published on (tcp://HOST:PORT), REPLAY its replay
 * socket (pkv-server --kv-events-replay), asked at start for what the
 * backend kept and after a gap for what was missed. When the index finds
 * no block of a prompt (a backend without EVENTS, a restart without
 * replay, events lost), the backends' prefix lookups are asked
 * (lookup.h). The model (the
 * backends' own GGUF) gives the tokenizer and the chat template that
 * read a prompt as the backends do; without it only prompts given as
 * token ids are routed by prefix, the rest by load. It prints
 * "pkv-router: listening on http://ADDR:PORT" once it serves, and ends
 * on SIGINT or SIGTERM.
 */
#define _POSIX_C_SOURCE 200809L /* sigaction, nanosleep */
#include "args.h"
#include "http.h"
#include "router.h"
#include "subscribe.h"
#include "weights.h"

#include <curl/curl.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct options {
    const char *model, *weights, *host;
    const char *specs[RT_MAX_BACKENDS];
    uint32_t num_backends, max_clients, max_body, max_answer, timeout_s;
    uint32_t max_blocks, lookup_timeout_ms;
    uint16_t port;
    int policy;
} options;

static int usage(FILE *out, int code)
{
    fprintf(out,
            "usage: pkv-router --backend URL[,EVENTS[,REPLAY]] ... [--model "
            "gemma3|smollm2 | --weights PATH]\n"
            "                  [--policy prefix|round-robin] [--host ADDR] "
            "[--port N]\n"
            "                  [--max-clients N] [--max-body BYTES] "
            "[--max-answer BYTES]\n"
            "                  [--timeout S] [--max-blocks N] "
            "[--lookup-timeout MS]\n"
            "OpenAI's /v1/completions and /v1/chat/completions, each "
            "request sent to\nthe backend where it costs least in tokens: "
            "the prompt's tokens past the\nprefix its KV events say it "
            "holds, plus those its requests in flight were\nsent to "
            "compute (ties: the fewest in flight); GET /health, /metrics.\n"
            "--backend http://HOST:PORT[,tcp://HOST:PORT[,tcp://HOST:PORT]]"
            ": a\n  pkv-server, the ZeroMQ endpoint of its KV events and "
            "of their replay\n  (1 to %d backends).\n"
            "--lookup-timeout MS: a prompt the events say nothing of is "
            "asked of\n  the backends' prefix lookups (POST "
            "/pkv/lookup/...), each given MS\n  milliseconds (default "
            "250; 0: never asked).\n"
            "--model, --weights: the backends' GGUF, whose tokenizer and "
            "chat\n  template read the prompts (without: only token-id "
            "prompts are routed\n  by prefix).\n"
            "--policy round-robin: in turn, ignoring the index (to compare "
            "with).\n"
            "--host 127.0.0.1 and --port 8000 by default; --port 0 takes a "
            "free port.\n"
            "Limits: --max-clients connections (default 256), --max-body "
            "bytes of a\n  request (default 1048576), --max-answer bytes "
            "of a whole answer\n  (default 16777216), --timeout seconds "
            "of a request (default 600),\n  --max-blocks indexed per "
            "backend (default 1048576).\n",
            RT_MAX_BACKENDS);
    return code;
}

static int parse_value(options *o, const char *a, const char *v)
{
    uint32_t u;
    if (strcmp(a, "--backend") == 0) {
        if (o->num_backends == RT_MAX_BACKENDS)
            return host_bad_arg("pkv-router", a, v, "at most 64 backends");
        if (strncmp(v, "http://", 7) != 0 || strpbrk(v, "\"\\\n ") != NULL)
            return host_bad_arg("pkv-router", a, v,
                                "http://HOST:PORT[,tcp://HOST:PORT[,tcp://"
                                "HOST:PORT]]");
        o->specs[o->num_backends++] = v;
    } else if (strcmp(a, "--model") == 0) {
        char *path = gg_default_weights_path(v);
        if (path == NULL)
            return host_bad_arg("pkv-router", a, v, "gemma3 or smollm2");
        free(path);
        o->model = v;
    } else if (strcmp(a, "--weights") == 0) {
        o->weights = v;
    } else if (strcmp(a, "--host") == 0) {
        o->host = v;
    } else if (strcmp(a, "--policy") == 0) {
        if (strcmp(v, "prefix") != 0 && strcmp(v, "round-robin") != 0)
            return host_bad_arg("pkv-router", a, v, "prefix or round-robin");
        o->policy = strcmp(v, "prefix") == 0 ? RT_POLICY_PREFIX
                                             : RT_POLICY_ROUND_ROBIN;
    } else if (host_parse_u32(v, &u) != 0 ||
               (u == 0 && strcmp(a, "--port") != 0 &&
                strcmp(a, "--lookup-timeout") != 0)) {
        return host_bad_arg("pkv-router", a, v, "a whole number >= 1");
    } else if (strcmp(a, "--port") == 0) {
        if (u > 65535)
            return host_bad_arg("pkv-router", a, v, "0 to 65535");
        o->port = (uint16_t)u;
    } else if (strcmp(a, "--max-clients") == 0) {
        o->max_clients = u;
    } else if (strcmp(a, "--max-body") == 0) {
        o->max_body = u;
    } else if (strcmp(a, "--max-answer") == 0) {
        o->max_answer = u;
    } else if (strcmp(a, "--timeout") == 0) {
        o->timeout_s = u;
    } else if (strcmp(a, "--lookup-timeout") == 0) {
        if (u > 60000)
            return host_bad_arg("pkv-router", a, v, "0 to 60000");
        o->lookup_timeout_ms = u;
    } else {
        o->max_blocks = u; /* --max-blocks */
    }
    return 0;
}

/* 0, 1 for --help, or -1 after printing what is wrong. */
static int parse_options(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8000;
    o->max_clients = 256;
    o->max_body = 1u << 20;
    o->max_answer = 16u << 20;
    o->timeout_s = 600;
    o->max_blocks = 1u << 20;
    o->lookup_timeout_ms = 250;
    static const char *const with_value[] = {
        "--backend",   "--model",    "--weights",    "--host",
        "--port",      "--policy",   "--max-clients", "--max-body",
        "--max-answer", "--timeout", "--max-blocks", "--lookup-timeout"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
            return 1;
        if (host_option_with_value("pkv-router", a, v, with_value,
                                   sizeof with_value / sizeof *with_value) !=
            0)
            return -1;
        i++;
        if (parse_value(o, a, v) != 0)
            return -1;
    }
    if (o->model != NULL && o->weights != NULL) {
        fprintf(stderr, "pkv-router: --model and --weights exclude each "
                        "other\n");
        return -1;
    }
    if (o->num_backends == 0) {
        fprintf(stderr, "pkv-router: no --backend\n");
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

/* Each --backend URL[,EVENTS[,REPLAY]] split in place into the router's backends
 * (specs point into argv). */
static int make_backends(rt_router *r, const options *o, char **copies)
{
    r->backends = calloc(o->num_backends, sizeof *r->backends);
    if (r->backends == NULL)
        return -1;
    r->num_backends = o->num_backends;
    for (uint32_t b = 0; b < o->num_backends; b++) {
        char *spec = copies[b] = strdup(o->specs[b]);
        if (spec == NULL)
            return -1;
        char *comma = strchr(spec, ',');
        char *replay = comma != NULL ? strchr(comma + 1, ',') : NULL;
        if (comma != NULL)
            *comma = '\0';
        if (replay != NULL)
            *replay++ = '\0';
        size_t n = strlen(spec);
        while (n > 7 && spec[n - 1] == '/')
            spec[--n] = '\0';
        r->backends[b].url = spec;
        r->backends[b].events = comma != NULL ? comma + 1 : NULL;
        r->backends[b].replay = replay;
    }
    return 0;
}

/* The tokenizer and chat template of the model, when one is named. */
static int load_model(const options *o, gg_file *file, gg_tokenizer *tok,
                      rt_router *r)
{
    if (o->model == NULL && o->weights == NULL)
        return 0;
    char *path = o->weights ? strdup(o->weights)
                            : gg_default_weights_path(o->model);
    char err[512];
    int rc = -1;
    if (path == NULL) {
        gg_fail(err, sizeof err, "out of memory");
    } else if (gg_file_open(file, path, err, sizeof err) == 0) {
        rc = gg_tokenizer_init(tok, file, err, sizeof err);
        if (rc != 0)
            gg_file_close(file);
    }
    if (rc != 0) {
        fprintf(stderr, "pkv-router: %s: %s\n", path ? path : "model", err);
    } else {
        r->tok = tok;
        r->chat = gg_chat_detect(&file->config, tok);
    }
    free(path);
    return rc;
}

int main(int argc, char **argv)
{
    options o;
    int asked = parse_options(argc, argv, &o);
    if (asked != 0)
        return asked > 0 ? usage(stdout, 0) : usage(stderr, 2);
    catch_signals();
    rt_router r;
    memset(&r, 0, sizeof r);
    gg_file file;
    gg_tokenizer tok;
    memset(&file, 0, sizeof file);
    memset(&tok, 0, sizeof tok);
    char *copies[RT_MAX_BACKENDS] = {0};
    r.policy = o.policy;
    r.max_body = o.max_body;
    r.max_answer = o.max_answer;
    r.timeout_s = o.timeout_s;
    r.lookup_timeout_ms = o.lookup_timeout_ms;
    int rc = 1;
    if (make_backends(&r, &o, copies) != 0 ||
        rt_index_init(&r.index, r.num_backends, o.max_blocks) != 0 ||
        pthread_mutex_init(&r.lock, NULL) != 0) {
        fprintf(stderr, "pkv-router: out of memory\n");
        return 1;
    }
    if (load_model(&o, &file, &tok, &r) != 0)
        return 1;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    rt_subscriber sub;
    if (rt_subscriber_start(&sub, &r) == 0) {
        uint16_t port = o.port;
        struct MHD_Daemon *d = rt_http_start(&r, o.host, &port,
                                             o.max_clients);
        if (d != NULL) {
            printf("pkv-router: listening on http://%s:%u (%u backends, "
                   "policy %s, prompts read %s)\n",
                   o.host, port, r.num_backends,
                   r.policy == RT_POLICY_PREFIX ? "prefix" : "round-robin",
                   r.tok ? r.chat.kind != GG_CHAT_NONE
                               ? "with the model's tokenizer and chat "
                                 "template"
                               : "with the model's tokenizer"
                         : "as token ids only");
            fflush(stdout);
            while (!stop_asked) {
                struct timespec t = {0, 100 * 1000 * 1000};
                nanosleep(&t, NULL);
            }
            rt_http_stop(d);
            printf("pkv-router: stopped\n");
            rc = 0;
        }
        rt_subscriber_stop(&sub);
    }
    curl_global_cleanup();
    if (r.tok != NULL) {
        gg_tokenizer_free(&tok);
        gg_file_close(&file);
    }
    rt_index_free(&r.index);
    pthread_mutex_destroy(&r.lock);
    for (uint32_t b = 0; b < r.num_backends; b++)
        free(copies[b]);
    free(r.backends);
    return rc;
}
