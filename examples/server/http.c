/* SPDX-License-Identifier: MIT */
/* pkv-server's HTTP side on libmicrohttpd (http.h). */
#define _POSIX_C_SOURCE 200809L /* strdup, nanosleep */
#include "http.h"

#include "lookup.h"
#include "prepare.h"
#include "reply.h"

#include <microhttpd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Queue body (freed here) with status and content type. */
static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status,
                                 char *body, const char *type)
{
    if (body == NULL)
        return MHD_NO; /* out of memory: libmicrohttpd closes it */
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (r == NULL) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status,
                                 char *body)
{
    return send_text(c, status, body, "application/json");
}

static enum MHD_Result send_error(struct MHD_Connection *c,
                                  const srv_error *e)
{
    return send_json(c, e->status, srv_error_body(e));
}

/* A request refused before it became a job. */
static enum MHD_Result refuse(srv_server *s, struct MHD_Connection *c,
                              unsigned status, const char *code,
                              const char *what)
{
    srv_error e;
    srv_error_set(&e, status, "invalid_request_error", code, NULL, "%s",
                  what);
    srv_server_rejected(s);
    return send_error(c, &e);
}

/* The lookup's paths: the API path whose body they take, behind this
 * prefix (lookup.h). */
#define LOOKUP_PREFIX "/pkv/lookup"

/* A path taking POST: its request kind, and whether it is the lookup of
 * that kind. */
static int is_post_route(const char *url, int *kind, int *lookup)
{
    size_t n = sizeof LOOKUP_PREFIX - 1;
    *lookup = strncmp(url, LOOKUP_PREFIX, n) == 0;
    if (*lookup)
        url += n;
    if (strcmp(url, "/v1/completions") == 0)
        *kind = SRV_COMPLETION;
    else if (strcmp(url, "/v1/chat/completions") == 0)
        *kind = SRV_CHAT;
    else
        return 0;
    return 1;
}

/* GET /health, /v1/models, /metrics; 404 and 405 for the rest. */
static enum MHD_Result answer_get(srv_server *s, struct MHD_Connection *c,
                                  const char *url, const char *method)
{
    int kind, lookup;
    int get = strcmp(method, "GET") == 0;
    if (strcmp(url, "/health") == 0 && get) {
        pthread_mutex_lock(&s->lock);
        int draining = s->draining;
        pthread_mutex_unlock(&s->lock);
        return send_json(c, draining ? 503 : 200,
                         strdup(draining ? "{\"status\":\"shutting down\"}"
                                         : "{\"status\":\"ok\"}"));
    }
    if (strcmp(url, "/v1/models") == 0 && get)
        return send_json(c, 200, srv_reply_models(s));
    if (strcmp(url, "/metrics") == 0 && get)
        return send_text(c, 200, srv_reply_metrics(s),
                         "text/plain; version=0.0.4");
    if (strcmp(url, "/health") == 0 || strcmp(url, "/v1/models") == 0 ||
        strcmp(url, "/metrics") == 0 || is_post_route(url, &kind, &lookup))
        return refuse(s, c, 405, "method_not_allowed",
                      "this path takes another method");
    return refuse(s, c, 404, "not_found", "no such path");
}

/* A body's bytes as they arrive, up to the server's limit (past it the
 * rest is read and dropped, then answered 413). */
static void take_body(const srv_server *s, srv_job *j, const char *data,
                      size_t n)
{
    if (j->body_too_large)
        return;
    if (n > s->max_body - j->body_len) {
        j->body_too_large = 1;
        free(j->body);
        j->body = NULL;
        return;
    }
    char *grown = realloc(j->body, j->body_len + n + 1);
    if (grown == NULL) {
        j->body_too_large = 1; /* answered as too large: nothing kept */
        free(j->body);
        j->body = NULL;
        return;
    }
    j->body = grown;
    memcpy(j->body + j->body_len, data, n);
    j->body_len += n;
}

/* The stream's bytes (a libmicrohttpd content reader): what is formatted
 * and unsent, else the job's new events, else the end; with nothing to
 * send the connection is suspended until the loop wakes it. */
static ssize_t read_stream(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    srv_job *j = cls;
    ssize_t n = 0;
    pthread_mutex_lock(&j->lock);
    if (j->out_sent == j->out_len) {
        j->out_sent = j->out_len = 0;
        if (srv_reply_stream(j, j->model) != 0)
            n = MHD_CONTENT_READER_END_WITH_ERROR;
    }
    if (n == 0 && j->out_sent < j->out_len) {
        size_t k = j->out_len - j->out_sent;
        k = k < max ? k : max;
        memcpy(buf, j->out + j->out_sent, k);
        j->out_sent += k;
        n = (ssize_t)k;
    } else if (n == 0 && j->tail_sent) {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    } else if (n == 0) {
        srv_job_suspend(j);
    }
    pthread_mutex_unlock(&j->lock);
    return n;
}

static void free_stream(void *cls)
{
    srv_job_unref(cls);
}

static enum MHD_Result send_stream(struct MHD_Connection *c, srv_job *j)
{
    struct MHD_Response *r = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, 4096, read_stream, j, free_stream);
    if (r == NULL)
        return MHD_NO;
    srv_job_ref(j);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ok = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ok;
}

/* A whole answer, once the job has ended; until then the connection is
 * suspended (the loop resumes it, and libmicrohttpd calls the handler
 * again). */
static enum MHD_Result send_whole(srv_job *j, struct MHD_Connection *c)
{
    pthread_mutex_lock(&j->lock);
    if (j->end == SRV_END_NONE) {
        srv_job_suspend(j);
        pthread_mutex_unlock(&j->lock);
        return MHD_YES;
    }
    srv_error e = j->error;
    char *body = j->end == SRV_END_ERROR ? NULL : srv_reply_body(j, j->model);
    int end = j->end;
    pthread_mutex_unlock(&j->lock);
    return end == SRV_END_ERROR ? send_error(c, &e) : send_json(c, 200, body);
}

/* The whole body is in: parse it, make the job, queue it, answer. */
static enum MHD_Result start(srv_server *s, struct MHD_Connection *c,
                             srv_job *j)
{
    srv_error e;
    if (j->body_too_large) {
        srv_error_set(&e, 413, "invalid_request_error", "body_too_large",
                      NULL, "the request body is larger than the server's "
                      "limit of %zu bytes",
                      s->max_body);
        srv_server_rejected(s);
        return send_error(c, &e);
    }
    srv_request r;
    int rc = srv_request_parse(j->kind, j->body ? j->body : "", j->body_len,
                               &s->limits, &r, &e);
    if (rc == 0) {
        rc = srv_job_prepare(s, j, &r, &e);
        srv_request_free(&r);
    }
    free(j->body);
    j->body = NULL;
    if (rc != 0) {
        srv_server_rejected(s);
        return send_error(c, &e);
    }
    if (j->lookup) {
        char *body = srv_lookup_answer(s, j->prompt, j->prompt_len, &e);
        return body != NULL ? send_json(c, 200, body) : send_error(c, &e);
    }
    j->model = s->model_name;
    j->conn = c;
    if (srv_server_queue(s, j, &e) != 0)
        return send_error(c, &e);
    j->queued = 1;
    return j->stream ? send_stream(c, j) : send_whole(j, c);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c,
                              const char *url, const char *method,
                              const char *version, const char *upload,
                              size_t *upload_size, void **con_cls)
{
    (void)version;
    srv_server *s = cls;
    srv_job *j = *con_cls;
    int kind, lookup;
    if (j == NULL) {
        if (strcmp(method, "POST") != 0 ||
            !is_post_route(url, &kind, &lookup))
            return answer_get(s, c, url, method);
        j = srv_job_new();
        if (j == NULL)
            return MHD_NO;
        j->kind = kind;
        j->lookup = lookup;
        *con_cls = j;
        return MHD_YES;
    }
    if (*upload_size != 0) {
        take_body(s, j, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    return j->queued ? send_whole(j, c) : start(s, c, j);
}

/* The request is over (answered, or the client left): a job not yet
 * ended is cancelled, and the connection lets go of it. */
static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode how)
{
    (void)cls;
    (void)c;
    (void)how;
    srv_job *j = *con_cls;
    if (j == NULL)
        return;
    pthread_mutex_lock(&j->lock);
    if (j->queued && j->end == SRV_END_NONE)
        j->cancelled = 1;
    j->conn = NULL;
    pthread_mutex_unlock(&j->lock);
    srv_job_unref(j);
    *con_cls = NULL;
}

struct MHD_Daemon *srv_http_start(srv_server *s, const srv_http_options *o,
                                  uint16_t *port)
{
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons(o->port);
    if (inet_pton(AF_INET, o->host, &addr.sin_addr) != 1) {
        fprintf(stderr, "pkv-server: --host %s: not an IPv4 address\n",
                o->host);
        return NULL;
    }
    /* A pool only when asked for: libmicrohttpd warns at a size of 1. */
    struct MHD_OptionItem options[] = {
        {MHD_OPTION_SOCK_ADDR, 0, &addr},
        {MHD_OPTION_CONNECTION_LIMIT, (intptr_t)o->max_clients, NULL},
        {MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)o->idle_timeout, NULL},
        {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)completed, s},
        {o->threads > 1 ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END,
         (intptr_t)o->threads, NULL},
        {MHD_OPTION_END, 0, NULL}};
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME |
            MHD_USE_ERROR_LOG,
        o->port, NULL, NULL, handle, s, MHD_OPTION_ARRAY, options,
        MHD_OPTION_END);
    if (d == NULL) {
        fprintf(stderr, "pkv-server: cannot listen on %s:%u (in use?)\n",
                o->host, o->port);
        return NULL;
    }
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    *port = info ? info->port : o->port;
    return d;
}

void srv_http_stop(struct MHD_Daemon *d)
{
    if (d == NULL)
        return;
    /* No new connection; the answers queued last (the errors of a
     * shutdown) get 2 s to leave before every connection is closed. */
    MHD_socket listener = MHD_quiesce_daemon(d);
    if (listener != MHD_INVALID_SOCKET)
        close(listener);
    for (int i = 0; i < 200; i++) {
        const union MHD_DaemonInfo *info =
            MHD_get_daemon_info(d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
        if (info == NULL || info->num_connections == 0)
            break;
        struct timespec nap = {0, 10000000};
        nanosleep(&nap, NULL);
    }
    MHD_stop_daemon(d);
}
