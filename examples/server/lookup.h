/* SPDX-License-Identifier: MIT */
/*
 * pkv-server's prefix lookup: how much of a prompt this server could take
 * from its KV cache, and from the shared store, without running it. A
 * router asks it (POST /pkv/lookup/v1/completions or
 * /pkv/lookup/v1/chat/completions, the body of the request it would send)
 * when its index of the servers' KV events knows nothing of a prompt: the
 * router runs no pkv and cannot derive the store's key names (they
 * depend on the engine's layout and seal key), so the server answers.
 *
 * On the HTTP side's threads, beside the step loop: the engine's lookup
 * and key derivation are safe from any thread (pkv.h) and neither takes
 * a block nor changes the LRU order; the store is asked for names only
 * (EXISTS), over the connector's own connection for counts.
 */
#ifndef PKV_SERVER_LOOKUP_H
#define PKV_SERVER_LOOKUP_H

#include "server.h"

#include <stdint.h>

/* The answer for prompt[0, n) (tokenized and checked as a request's:
 * 0 < n < the context):
 *   {"prompt_tokens": n, "cached_tokens": C, "store_tokens": S}
 * C the tokens the engine's prefix cache holds now; S the tokens of the
 * leading blocks the store holds, null when the store could not be
 * asked (counted: the lookup still answers), absent without --store.
 * Counted in /metrics. The body (NUL-terminated, for the caller to
 * free), or NULL with e filled (500: out of memory, the engine's
 * refusal). */
char *srv_lookup_answer(srv_server *s, const int32_t *prompt, uint32_t n,
                        srv_error *e);

#endif
