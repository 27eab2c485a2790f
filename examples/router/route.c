/* SPDX-License-Identifier: MIT */
/* Which backend takes a request (router.h). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "router.h"

#include <string.h>
#include <time.h>

/* How long a backend that could not be reached is skipped. */
#define DOWN_S 2.0

double rt_now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int was_tried(const uint8_t *tried, uint32_t b)
{
    return tried != NULL && (tried[b / 8] >> (b % 8)) & 1;
}

int rt_route_match(rt_router *r, const int32_t *tokens, uint32_t n,
                   rt_match *m, uint8_t *ask)
{
    memset(m, 0, sizeof *m);
    memset(ask, 0, RT_MAX_BACKENDS / 8);
    m->read = tokens != NULL;
    m->prompt_tokens = m->read ? n : 0;
    if (!m->read || r->policy != RT_POLICY_PREFIX)
        return 0;
    /* The index outside the router's lock: it has its own. */
    for (uint32_t b = 0; b < r->num_backends; b++)
        m->tokens[b] = rt_index_match(&r->index, b, tokens, n);
    double now = rt_now_s();
    int found = 0, any_up = 0;
    pthread_mutex_lock(&r->lock);
    for (uint32_t b = 0; b < r->num_backends; b++) {
        if (r->backends[b].down_until > now)
            continue;
        any_up = 1;
        found |= m->tokens[b] > 0;
        ask[b / 8] |= (uint8_t)(1u << (b % 8));
    }
    pthread_mutex_unlock(&r->lock);
    return any_up && !found && r->lookup_timeout_ms > 0;
}

/* The prompt's tokens a backend holding matched of them must compute. */
static uint32_t to_compute(const rt_match *m, uint32_t matched)
{
    return m->prompt_tokens - (matched < m->prompt_tokens ? matched
                                                          : m->prompt_tokens);
}

/* What sending the prompt to c costs, in tokens: those c must compute
 * (past its cached prefix) and those it was sent to compute for the
 * requests it has in flight. Both are rows through the model, so a
 * cached prefix wins only where it saves more than the backend's queue
 * costs: a prefix every backend would soon hold (a shared system prompt)
 * does not pull every request onto its first holder. */
static uint64_t cost(const rt_backend *c, const rt_match *m,
                     uint32_t matched)
{
    return (uint64_t)to_compute(m, matched) + c->pending_tokens;
}

int rt_route(rt_router *r, const rt_match *m, const uint8_t *tried,
             uint32_t *charged)
{
    *charged = 0;
    const uint32_t *matched = m->tokens;
    double now = rt_now_s();
    pthread_mutex_lock(&r->lock);
    int up = 0;
    for (uint32_t b = 0; b < r->num_backends; b++)
        up |= !was_tried(tried, b) && r->backends[b].down_until <= now;
    int best = -1;
    /* In turn from the round-robin's next, so that equal backends take
     * requests in turn; the first of the best wins. */
    for (uint32_t k = 0; k < r->num_backends; k++) {
        uint32_t b = (r->next + k) % r->num_backends;
        const rt_backend *c = &r->backends[b];
        if (was_tried(tried, b) || (up && c->down_until > now))
            continue;
        if (best < 0 || r->policy == RT_POLICY_ROUND_ROBIN) {
            best = (int)b;
            if (r->policy == RT_POLICY_ROUND_ROBIN)
                break;
            continue;
        }
        const rt_backend *o = &r->backends[best];
        uint64_t cb = cost(c, m, matched[b]), co = cost(o, m, matched[best]);
        if (cb < co || (cb == co && c->in_flight < o->in_flight))
            best = (int)b;
    }
    if (best >= 0) {
        rt_backend *c = &r->backends[best];
        r->next = ((uint32_t)best + 1) % r->num_backends;
        c->in_flight++;
        *charged = to_compute(m, matched[best]);
        c->pending_tokens += *charged;
        c->requests++;
        r->prompt_tokens += m->prompt_tokens;
        /* Routed by load alone: the prompt not read, or neither the
         * index nor the backends' lookups found a block of it. */
        if (!m->read ||
            (matched[best] == 0 && r->policy == RT_POLICY_PREFIX))
            r->fallbacks++;
        else if (m->looked_up)
            r->lookup_matched_tokens += matched[best];
        else
            c->matched_tokens += matched[best];
    }
    pthread_mutex_unlock(&r->lock);
    return best;
}

void rt_route_done(rt_router *r, int b, uint32_t charged, int failed)
{
    rt_backend *c = &r->backends[b];
    pthread_mutex_lock(&r->lock);
    c->in_flight--;
    c->pending_tokens -= charged;
    if (failed) {
        c->failures++;
        c->down_until = rt_now_s() + DOWN_S;
    }
    pthread_mutex_unlock(&r->lock);
    if (failed)
        rt_index_clear(&r->index, (uint32_t)b);
}
