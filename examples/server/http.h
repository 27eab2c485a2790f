/* SPDX-License-Identifier: MIT */
/*
 * pkv-server's HTTP side, on libmicrohttpd: its own threads (one polling
 * thread, or a pool) accept connections, read request bodies up to the
 * server's limit, parse and tokenize them, queue the jobs for the step
 * loop, and write the answers: a whole one when the job ends, or a
 * stream whose connection is suspended while it has nothing to send and
 * resumed by the loop (job.h). A client that leaves before its job ended
 * cancels it (the loop aborts the sequence).
 *
 *   POST /v1/completions, /v1/chat/completions   (request.h)
 *   POST /pkv/lookup/v1/completions, /pkv/lookup/v1/chat/completions
 *        (the same bodies: how much of the prompt is cached, lookup.h)
 *   GET  /v1/models, /health, /metrics
 */
#ifndef PKV_SERVER_HTTP_H
#define PKV_SERVER_HTTP_H

#include "server.h"

#include <stdint.h>

struct MHD_Daemon;

typedef struct srv_http_options {
    const char *host;      /* an IPv4 address to listen on */
    uint16_t port;         /* 0: any free port */
    uint32_t max_clients;  /* connections at once; more are refused */
    uint32_t threads;      /* libmicrohttpd's threads (1: one) */
    uint32_t idle_timeout; /* seconds a connection may stay silent */
} srv_http_options;

/* Listen and serve s. The daemon, its port in *port; NULL after printing
 * why. */
struct MHD_Daemon *srv_http_start(srv_server *s, const srv_http_options *o,
                                  uint16_t *port);

/* Stop accepting, give the last answers 2 s to leave, close every
 * connection and join the threads. Every job must have ended (the step
 * loop returned): no connection is then suspended. */
void srv_http_stop(struct MHD_Daemon *d);

#endif
