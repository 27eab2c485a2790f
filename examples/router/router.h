/* SPDX-License-Identifier: MIT */
/*
 * pkv-router's state: the backends (pkv-server processes, or anything
 * that answers OpenAI's API and publishes vLLM's KV events), the block
 * index their events fill, the model's tokenizer and chat template (to
 * read a prompt as the backends do), the policy, and the figures
 * /metrics reports.
 */
#ifndef PKV_ROUTER_ROUTER_H
#define PKV_ROUTER_ROUTER_H

#include "chat.h"
#include "events.h"
#include "index.h"
#include "tokenizer.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

enum { RT_POLICY_PREFIX, RT_POLICY_ROUND_ROBIN };

/* Backends a router takes at most. */
#define RT_MAX_BACKENDS 64

typedef struct rt_backend {
    const char *url;    /* http://HOST:PORT, no trailing slash */
    const char *events; /* a ZeroMQ endpoint, or NULL: none */
    const char *replay; /* its replay endpoint (vLLM's), or NULL */
    rt_feed feed;       /* the subscriber thread's own */
    /* Under the router's lock. */
    uint32_t in_flight;
    uint64_t pending_tokens; /* the tokens those were sent to compute */
    double down_until; /* after a failed connection: skipped till then */
    uint64_t requests, failures, matched_tokens;
    /* The feed's figures, copied by the event thread. */
    uint64_t event_batches, event_gaps, event_bad, event_replayed;
} rt_backend;

typedef struct rt_router {
    /* Set before the threads start, then read only. */
    rt_backend *backends;
    uint32_t num_backends;
    int policy;           /* RT_POLICY_* */
    const gg_tokenizer *tok; /* NULL: no model, prompts are not read */
    gg_chat chat;
    size_t max_body;   /* bytes of a request body */
    size_t max_answer; /* bytes of a whole (not streamed) answer */
    double timeout_s;  /* a request's time at most */
    uint32_t lookup_timeout_ms; /* a prefix lookup's (lookup.h); 0: none */
    rt_index index;
    /* Under lock. */
    pthread_mutex_t lock;
    uint32_t next; /* round-robin's */
    uint64_t prompt_tokens, fallbacks, retries, errors, unread;
    uint64_t lookups;           /* prompts asked of the backends */
    uint64_t lookup_unanswered; /* backends' lookups without an answer */
    uint64_t lookup_matched_tokens; /* on the backends the lookup chose */
} rt_router;

/* What is known of a prompt's cached prefix on each backend. */
typedef struct rt_match {
    int read;      /* the prompt was read: tokens[] count */
    int looked_up; /* tokens[] are the backends' lookup answers
                      (lookup.h), not the index's */
    uint32_t prompt_tokens;
    uint32_t tokens[RT_MAX_BACKENDS]; /* of the prompt's prefix, each */
} rt_match;

/* The index's matches of tokens[0, n) (tokens NULL: not read) into *m.
 * 1 when the backends should be asked (lookup.h): under
 * RT_POLICY_PREFIX, a prompt read of which no backend up holds a block
 * by the index; ask (RT_MAX_BACKENDS / 8 bytes) then has a bit per
 * backend up. Else 0. */
int rt_route_match(rt_router *r, const int32_t *tokens, uint32_t n,
                   rt_match *m, uint8_t *ask);

/* The backend for a prompt matched as m says, skipping those in tried
 * (RT_MAX_BACKENDS / 8 bytes, a bit per backend, or NULL): the one
 * whose cost in tokens is least: the prompt's tokens past its cached
 * prefix plus those its requests in flight were sent to compute (so
 * among idle backends the longest prefix), ties to the fewest requests
 * in flight, then in turn; round-robin's next under
 * RT_POLICY_ROUND_ROBIN. Backends down are taken only when all are.
 * Counts the request in flight, charging the backend *charged tokens
 * (give both back with rt_route_done). The backend's index, or -1 when
 * every backend was tried. */
int rt_route(rt_router *r, const rt_match *m, const uint8_t *tried,
             uint32_t *charged);

/* The request sent to backend b ended (charged: as rt_route charged
 * it); failed: it could not be reached (b is skipped for a while and its
 * blocks forgotten: a backend that comes back has an empty cache). */
void rt_route_done(rt_router *r, int b, uint32_t charged, int failed);

/* Seconds on a monotonic clock: the backends' down times, the lookups'
 * deadline, /health and /metrics. */
double rt_now_s(void);

#endif
