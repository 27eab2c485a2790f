/* SPDX-License-Identifier: MIT */
/*
 * pkv-router's HTTP front, on libmicrohttpd with a thread per connection
 * (a request's thread forwards it and streams the answer back, blocking
 * on the backend: forward.h):
 *
 *   POST /v1/completions, /v1/chat/completions   routed (router.h; the
 *        backends asked when the index knows nothing of the prompt:
 *        lookup.h) and forwarded; the backend's status, type and body come back as
 *        they are, streamed as they arrive when "stream" is true
 *   GET  /health    200 while a backend is up, else 503
 *   GET  /metrics   Prometheus text: requests, prefix-matched tokens,
 *                   fallbacks, lookups, retries, errors, each
 *                   backend's figures
 *
 * A backend that cannot be reached, or answers 503, before anything was
 * sent to the client: the request goes to the next backend the policy
 * picks, until every one was tried (then 502 in OpenAI's error shape; a
 * backend past the time limit: 504). A backend that fails mid-stream:
 * the stream ends with an OpenAI-shaped error event. Whole answers are
 * held until complete, so that a failure is always retried or answered.
 */
#ifndef PKV_ROUTER_HTTP_H
#define PKV_ROUTER_HTTP_H

#include "router.h"

#include <stdint.h>

struct MHD_Daemon;

/* Listen on host:port (port 0: a free one, written to *port) and serve
 * r. The daemon, or NULL after printing why. */
struct MHD_Daemon *rt_http_start(rt_router *r, const char *host,
                                 uint16_t *port, uint32_t max_clients);

void rt_http_stop(struct MHD_Daemon *d);

#endif
