/* SPDX-License-Identifier: MIT */
/*
 * A request body's prompt as the backends' token ids, to walk the index
 * with: read by pkv-server's own parser (examples/server/request.c) and
 * tokenized as pkv-server's prepare.c does it (a completion's text as
 * plain text, BOS first where the model asks for it; token ids as they
 * are; a chat's messages in the model's chat template). The router never
 * answers from what it reads here: a body it cannot read goes to a
 * backend all the same, routed by load, and the backend answers it.
 */
#ifndef PKV_ROUTER_PROMPT_H
#define PKV_ROUTER_PROMPT_H

#include "router.h"

#include <stddef.h>
#include <stdint.h>

/* What the router reads of a request. */
typedef struct rt_prompt {
    int32_t *tokens; /* NULL: not read (no model, or a bad body) */
    uint32_t num_tokens;
    int stream; /* "stream": true */
} rt_prompt;

/* Read body[0, len), a request of kind (SRV_COMPLETION, SRV_CHAT). */
void rt_prompt_read(const rt_router *r, int kind, const char *body,
                    size_t len, rt_prompt *out);

void rt_prompt_free(rt_prompt *p);

#endif
