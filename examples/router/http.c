/* SPDX-License-Identifier: MIT */
/* pkv-router's HTTP front (http.h). */
#define _POSIX_C_SOURCE 200809L /* open_memstream, strdup */
#include "http.h"

#include "forward.h"
#include "lookup.h"
#include "prompt.h"
#include "request.h"

#include <microhttpd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A stream's answer held at once: curl's writes between two reads. */
#define STREAM_HOLD (1u << 20)
/* libmicrohttpd's buffer for a stream's chunks. */
#define STREAM_BLOCK 4096
#define IDLE_TIMEOUT_S 60u

/* A request as it arrives. */
typedef struct rt_call {
    int kind; /* SRV_COMPLETION, SRV_CHAT */
    char *body;
    size_t len;
    int too_large;
} rt_call;

/* A streamed answer, owned by its libmicrohttpd response. */
typedef struct rt_stream {
    rt_router *r;
    int backend;
    uint32_t charged; /* the route's (rt_route_done) */
    int error_sent;
    rt_forward fwd;
} rt_stream;

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status,
                                 char *body, size_t len, const char *type)
{
    if (body == NULL)
        return MHD_NO; /* out of memory: libmicrohttpd closes it */
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        len, body, MHD_RESPMEM_MUST_FREE);
    if (resp == NULL) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    enum MHD_Result ok = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return ok;
}

/* An error in OpenAI's shape, answered by the router itself; 5xx ones
 * counted. */
static enum MHD_Result send_error(rt_router *r, struct MHD_Connection *c,
                                  unsigned status, const char *code,
                                  const char *what)
{
    srv_error e;
    srv_error_set(&e, status,
                  status >= 500 ? "server_error" : "invalid_request_error",
                  code, NULL, "%s", what);
    if (status >= 500) {
        pthread_mutex_lock(&r->lock);
        r->errors++;
        pthread_mutex_unlock(&r->lock);
    }
    char *body = srv_error_body(&e);
    return send_text(c, status, body, body ? strlen(body) : 0,
                     "application/json");
}

static int backend_up(const rt_backend *b, double now)
{
    return b->down_until <= now;
}

/* Prometheus' text format. */
static char *metrics(rt_router *r, size_t *len)
{
    static const char *const per_backend[][3] = {
        {"requests_total", "counter", "requests sent to the backend"},
        {"prefix_matched_tokens_total", "counter",
         "prompt tokens the index found cached on the backend chosen"},
        {"in_flight", "gauge", "requests in flight"},
        {"backend_failures_total", "counter",
         "requests the backend could not take (unreachable, 503, failed)"},
        {"backend_up", "gauge", "0 while the backend is skipped"},
        {"index_blocks", "gauge", "blocks the index holds for it"},
        {"event_batches_total", "counter", "KV event batches read"},
        {"event_gaps_total", "counter",
         "sequence gaps (the backend's blocks were forgotten)"},
        {"event_bad_total", "counter", "messages not read as documented"},
        {"event_replayed_total", "counter",
         "messages applied from the backend's replay socket"},
    };
    char *text = NULL;
    FILE *out = open_memstream(&text, len);
    if (out == NULL)
        return NULL;
    double now = rt_now_s();
    size_t blocks[RT_MAX_BACKENDS];
    for (uint32_t b = 0; b < r->num_backends; b++)
        blocks[b] = rt_index_count(&r->index, b);
    pthread_mutex_lock(&r->lock);
    for (size_t m = 0; m < sizeof per_backend / sizeof *per_backend; m++) {
        fprintf(out, "# HELP pkv_router_%s %s\n# TYPE pkv_router_%s %s\n",
                per_backend[m][0], per_backend[m][2], per_backend[m][0],
                per_backend[m][1]);
        for (uint32_t b = 0; b < r->num_backends; b++) {
            const rt_backend *c = &r->backends[b];
            uint64_t v[] = {c->requests,       c->matched_tokens,
                            c->in_flight,      c->failures,
                            (uint64_t)backend_up(c, now),
                            blocks[b],         c->event_batches,
                            c->event_gaps,     c->event_bad,
                            c->event_replayed};
            fprintf(out, "pkv_router_%s{backend=\"%s\"} %llu\n",
                    per_backend[m][0], c->url, (unsigned long long)v[m]);
        }
    }
    const struct {
        const char *name, *help;
        uint64_t v;
    } totals[] = {
        {"prompt_tokens_total", "prompt tokens of the requests routed",
         r->prompt_tokens},
        {"fallbacks_total",
         "requests routed by load alone (prompt not read, or neither the "
         "index nor the backends' lookups found a block of it)",
         r->fallbacks},
        {"lookups_total",
         "prompts asked of the backends (the index found no block of "
         "them on a backend up)",
         r->lookups},
        {"lookup_matched_tokens_total",
         "prompt tokens the lookups found on the backend chosen (its "
         "cache or the store)",
         r->lookup_matched_tokens},
        {"lookup_unanswered_total",
         "backends asked that gave no lookup answer in time (down, "
         "an error, not a pkv-server)",
         r->lookup_unanswered},
        {"retries_total", "requests sent again to another backend",
         r->retries},
        {"errors_total", "5xx answers and stream errors of the router",
         r->errors},
    };
    for (size_t m = 0; m < sizeof totals / sizeof *totals; m++)
        fprintf(out,
                "# HELP pkv_router_%s %s\n# TYPE pkv_router_%s counter\n"
                "pkv_router_%s %llu\n",
                totals[m].name, totals[m].help, totals[m].name,
                totals[m].name, (unsigned long long)totals[m].v);
    pthread_mutex_unlock(&r->lock);
    if (fclose(out) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

static enum MHD_Result answer_get(rt_router *r, struct MHD_Connection *c,
                                  const char *url)
{
    if (strcmp(url, "/health") == 0) {
        double now = rt_now_s();
        int up = 0;
        pthread_mutex_lock(&r->lock);
        for (uint32_t b = 0; b < r->num_backends; b++)
            up += backend_up(&r->backends[b], now);
        pthread_mutex_unlock(&r->lock);
        char *body = NULL;
        size_t len = 0;
        FILE *out = open_memstream(&body, &len);
        if (out == NULL)
            return MHD_NO;
        fprintf(out, "{\"status\":\"%s\",\"backends_up\":%d}",
                up ? "ok" : "no backend up", up);
        if (fclose(out) != 0) {
            free(body);
            return MHD_NO;
        }
        return send_text(c, up ? 200 : 503, body, len, "application/json");
    }
    if (strcmp(url, "/metrics") == 0) {
        size_t len = 0;
        char *text = metrics(r, &len);
        return send_text(c, 200, text, len, "text/plain; version=0.0.4");
    }
    return send_error(r, c, 404, "not_found", "no such path");
}

static ssize_t read_stream(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    rt_stream *s = cls;
    size_t n = rt_forward_read(&s->fwd, buf, max);
    if (n > 0)
        return (ssize_t)n;
    if (s->fwd.result == CURLE_OK || s->error_sent)
        return MHD_CONTENT_READER_END_OF_STREAM;
    /* The backend failed mid-answer: the client learns it in the stream,
     * as an OpenAI-shaped error event. */
    s->error_sent = 1;
    srv_error e;
    srv_error_set(&e, 502, "server_error", "backend_failed", NULL,
                  "the backend failed mid-answer: %s",
                  curl_easy_strerror(s->fwd.result));
    char *body = srv_error_body(&e);
    int len = body ? snprintf(buf, max, "data: %s\n\n", body) : -1;
    free(body);
    pthread_mutex_lock(&s->r->lock);
    s->r->errors++;
    pthread_mutex_unlock(&s->r->lock);
    return len > 0 && (size_t)len < max ? len
                                        : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void free_stream(void *cls)
{
    rt_stream *s = cls;
    /* A client that left ends a transfer not done: not the backend's
     * failure. */
    int failed = s->fwd.done && s->fwd.result != CURLE_OK &&
                 s->fwd.result != CURLE_OPERATION_TIMEDOUT;
    rt_route_done(s->r, s->backend, s->charged, failed);
    rt_forward_free(&s->fwd);
    free(s);
}

/* The backend's answer, whole or as a stream (s then owned by the
 * response). */
static enum MHD_Result relay(struct MHD_Connection *c, rt_stream *s,
                             int stream)
{
    rt_forward *f = &s->fwd;
    const char *type =
        f->content_type[0] ? f->content_type : "application/json";
    struct MHD_Response *resp;
    if (!stream) {
        resp = MHD_create_response_from_buffer(
            f->len - f->sent, f->data ? f->data + f->sent : (char *)"",
            MHD_RESPMEM_MUST_COPY);
        rt_route_done(s->r, s->backend, s->charged, 0);
        if (resp != NULL)
            MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                                    type);
        enum MHD_Result ok = resp != NULL
                                 ? MHD_queue_response(c, (unsigned)f->status,
                                                      resp)
                                 : MHD_NO;
        MHD_destroy_response(resp);
        rt_forward_free(f);
        free(s);
        return ok;
    }
    resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK,
                                             read_stream, s, free_stream);
    if (resp == NULL) {
        free_stream(s);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)f->status, resp);
    MHD_destroy_response(resp);
    return ok;
}

/* Send the request to the backends the policy picks, in turn, until one
 * answers. */
static enum MHD_Result forward(rt_router *r, struct MHD_Connection *c,
                               const rt_call *call, const char *url)
{
    rt_prompt p;
    rt_prompt_read(r, call->kind, call->body, call->len, &p);
    rt_match m;
    uint8_t ask[RT_MAX_BACKENDS / 8];
    if (rt_route_match(r, p.tokens, p.num_tokens, &m, ask))
        rt_lookup_ask(r, url, call->body, call->len, ask, &m);
    uint8_t tried[RT_MAX_BACKENDS / 8] = {0};
    int b;
    uint32_t charged;
    enum MHD_Result ok = MHD_NO;
    int answered = 0;
    while (!answered && (b = rt_route(r, &m, tried, &charged)) >= 0) {
        tried[b / 8] |= (uint8_t)(1u << (b % 8));
        rt_stream *s = calloc(1, sizeof *s);
        if (s == NULL || rt_forward_start(&s->fwd, r->backends[b].url, url,
                                          call->body, call->len,
                                          r->timeout_s,
                                          p.stream ? STREAM_HOLD
                                                   : r->max_answer) != 0) {
            free(s);
            rt_route_done(r, b, charged, 0);
            ok = send_error(r, c, 500, NULL, "out of memory");
            answered = 1;
            break;
        }
        s->r = r;
        s->backend = b;
        s->charged = charged;
        rt_forward *f = &s->fwd;
        rt_forward_wait(f, !p.stream);
        CURLcode why = f->result;
        int timed_out = why == CURLE_OPERATION_TIMEDOUT;
        /* Nothing went to the client yet: another backend may answer. */
        int again = f->done &&
                    ((why != CURLE_OK && !timed_out &&
                      why != CURLE_WRITE_ERROR &&
                      (!p.stream || f->received == 0)) ||
                     (why == CURLE_OK && f->status == 503));
        if (again) {
            rt_route_done(r, b, charged, 1);
            rt_forward_free(f);
            free(s);
            pthread_mutex_lock(&r->lock);
            r->retries++;
            pthread_mutex_unlock(&r->lock);
            continue;
        }
        answered = 1;
        if (f->done && why != CURLE_OK && (!p.stream || f->received == 0)) {
            char what[256];
            snprintf(what, sizeof what, "the backend %s: %s",
                     r->backends[b].url,
                     why == CURLE_WRITE_ERROR ? "answered more than the "
                                                "router holds"
                                              : curl_easy_strerror(why));
            rt_route_done(r, b, charged, 0);
            rt_forward_free(f);
            free(s);
            ok = send_error(r, c, timed_out ? 504 : 502,
                            timed_out ? "timeout" : "backend_failed", what);
        } else {
            ok = relay(c, s, p.stream);
        }
    }
    if (!answered)
        ok = send_error(r, c, 502, "backend_unavailable",
                        "no backend could take the request: each was "
                        "unreachable or unavailable");
    rt_prompt_free(&p);
    return ok;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c,
                              const char *url, const char *method,
                              const char *version, const char *upload,
                              size_t *upload_size, void **con_cls)
{
    (void)version;
    rt_router *r = cls;
    rt_call *call = *con_cls;
    int kind = strcmp(url, "/v1/completions") == 0        ? SRV_COMPLETION
               : strcmp(url, "/v1/chat/completions") == 0 ? SRV_CHAT
                                                          : -1;
    if (strcmp(method, "POST") != 0 || kind < 0) {
        if (strcmp(method, "GET") == 0 && kind < 0)
            return answer_get(r, c, url);
        return send_error(r, c, kind < 0 ? 404 : 405,
                          kind < 0 ? "not_found" : "method_not_allowed",
                          kind < 0 ? "no such path"
                                   : "this path takes POST");
    }
    if (call == NULL) {
        call = *con_cls = calloc(1, sizeof *call);
        if (call == NULL)
            return MHD_NO;
        call->kind = kind;
        return MHD_YES;
    }
    if (*upload_size > 0) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (call->too_large || n > r->max_body - call->len) {
            call->too_large = 1;
            return MHD_YES;
        }
        char *grown = realloc(call->body, call->len + n + 1);
        if (grown == NULL)
            return MHD_NO;
        call->body = grown;
        memcpy(call->body + call->len, upload, n);
        call->len += n;
        return MHD_YES;
    }
    if (call->too_large)
        return send_error(r, c, 413, "request_too_large",
                          "the request body is larger than the router "
                          "takes");
    if (call->body == NULL)
        return send_error(r, c, 400, "invalid_json", "the body is empty");
    return forward(r, c, call, url);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode why)
{
    (void)cls;
    (void)c;
    (void)why;
    rt_call *call = *con_cls;
    if (call != NULL) {
        free(call->body);
        free(call);
        *con_cls = NULL;
    }
}

struct MHD_Daemon *rt_http_start(rt_router *r, const char *host,
                                 uint16_t *port, uint32_t max_clients)
{
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons(*port);
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        fprintf(stderr, "pkv-router: --host %s: expected an IPv4 address\n",
                host);
        return NULL;
    }
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
            MHD_USE_ERROR_LOG,
        *port, NULL, NULL, handle, r, MHD_OPTION_SOCK_ADDR, &addr,
        MHD_OPTION_NOTIFY_COMPLETED, completed, NULL,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)max_clients,
        MHD_OPTION_CONNECTION_TIMEOUT, IDLE_TIMEOUT_S, MHD_OPTION_END);
    if (d == NULL) {
        fprintf(stderr, "pkv-router: cannot listen on %s:%u\n", host,
                (unsigned)*port);
        return NULL;
    }
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    if (info != NULL)
        *port = info->port;
    return d;
}

void rt_http_stop(struct MHD_Daemon *d)
{
    if (d != NULL)
        MHD_stop_daemon(d);
}
