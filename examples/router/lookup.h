/* SPDX-License-Identifier: MIT */
/*
 * The router's fallback when its index knows nothing of a prompt (a
 * backend given without an events endpoint, a router restarted without
 * replay, events lost to a gap that could not be replayed): ask the
 * backends themselves. Each up backend gets the request's own body at
 * /pkv/lookup + the request's path (pkv-server's prefix lookup, which
 * tokenizes it as the request and answers how many of its tokens its KV
 * cache and the shared store hold), all at once, each within
 * r->lookup_timeout_ms (--lookup-timeout): a backend that does not answer
 * in time, answers an error or anything but the lookup's JSON (it is not
 * a pkv-server) counts as holding nothing, and the request is routed all
 * the same. So a lookup delays a request by that timeout at most and
 * never fails it.
 */
#ifndef PKV_ROUTER_LOOKUP_H
#define PKV_ROUTER_LOOKUP_H

#include "router.h"

#include <stddef.h>
#include <stdint.h>

/*
 * Ask each backend with its bit set in ask (rt_route_match's) about
 * body[0, len), a request for path ("/v1/completions" or
 * "/v1/chat/completions"). Into m->tokens[b], backend b's effective
 * prefix: the larger of its cached_tokens and store_tokens (any backend
 * sharing the store can load what the store holds, so its own cache
 * only counts beyond that), at most m->prompt_tokens; 0 without an
 * answer. Sets m->looked_up. Counted in r's figures. Any thread.
 */
void rt_lookup_ask(rt_router *r, const char *path, const char *body,
                   size_t len, const uint8_t *ask, rt_match *m);

/*
 * The effective prefix a lookup's answer body data[0, len) gives, at
 * most limit: the larger of its "cached_tokens" and "store_tokens".
 * The answer is one JSON object as jansson's json_loadb reads it
 * without flags (valid UTF-8, no NUL in a string, nesting bounded,
 * nothing but white space after it). cached_tokens is required,
 * store_tokens may be absent; either may be null, which counts as 0; a
 * present one is an integer from 0 to INT64_MAX in JSON's syntax (no
 * fraction, no exponent). Other members are not read; of a name given
 * twice, the last counts. -1 when data is anything else: not JSON, not
 * an object, cached_tokens missing, a count negative, past INT64_MAX,
 * a float, a string, ... The bytes come from a backend: any bytes, any
 * len (rt_lookup_ask reads 1 KiB of a body at most), no terminating
 * NUL needed, no byte past len read. Pure: no state, any thread.
 * Fuzzed by tests/fuzz/fuzz_lookup.c.
 */
int64_t rt_lookup_answer(const char *data, size_t len, uint32_t limit);

#endif
