/* SPDX-License-Identifier: MIT */
/* A request body's prompt as token ids (prompt.h). */
#include "prompt.h"

#include "request.h"

#include <jansson.h>

#include <stdlib.h>
#include <string.h>

/* Limits as wide as a backend's could be: the backend checks its own. */
static srv_limits limits(const rt_router *r, const char *model)
{
    srv_limits l = {0};
    l.max_tokens = UINT32_MAX;
    l.max_prompt_ids = 1u << 24;
    l.max_messages = 1u << 16;
    l.max_stop_len = 1u << 16;
    l.vocab_size = r->tok != NULL ? r->tok->n : (uint32_t)INT32_MAX;
    l.model = model;
    return l;
}

/* The ids of r's prompt into p->tokens, as prepare.c tokenizes. */
static void tokenize(const rt_router *r, const srv_request *q, rt_prompt *p)
{
    if (q->prompt_ids != NULL) {
        p->tokens = malloc(q->num_prompt_ids * sizeof *p->tokens);
        if (p->tokens != NULL) {
            memcpy(p->tokens, q->prompt_ids,
                   q->num_prompt_ids * sizeof *p->tokens);
            p->num_tokens = q->num_prompt_ids;
        }
        return;
    }
    if (r->tok == NULL ||
        (q->kind == SRV_CHAT && r->chat.kind == GG_CHAT_NONE))
        return;
    uint32_t bound =
        q->kind == SRV_CHAT
            ? gg_chat_messages_bound(r->tok, q->messages, q->num_messages)
            : gg_tokenize_bound(r->tok, q->prompt_len, r->tok->add_bos);
    int32_t *ids = bound < UINT32_MAX / sizeof *ids
                       ? malloc((size_t)bound * sizeof *ids)
                       : NULL;
    int got = ids == NULL ? -1
              : q->kind == SRV_CHAT
                  ? gg_chat_tokenize_messages(&r->chat, r->tok, q->messages,
                                              q->num_messages, ids, bound)
                  : gg_tokenize(r->tok, q->prompt, q->prompt_len,
                                r->tok->add_bos, ids, bound);
    if (got <= 0) {
        free(ids);
        return;
    }
    p->tokens = ids;
    p->num_tokens = (uint32_t)got;
}

void rt_prompt_read(const rt_router *r, int kind, const char *body,
                    size_t len, rt_prompt *out)
{
    memset(out, 0, sizeof *out);
    /* The model a backend serves is its business: the request's own name
     * passes the parser's check. */
    json_t *root = json_loadb(body, len, 0, NULL);
    const char *model = json_string_value(json_object_get(root, "model"));
    srv_limits l = limits(r, model != NULL ? model : "");
    srv_request q;
    srv_error e;
    if (srv_request_parse(kind, body, len, &l, &q, &e) == 0) {
        out->stream = q.stream;
        tokenize(r, &q, out);
        srv_request_free(&q);
    }
    json_decref(root);
}

void rt_prompt_free(rt_prompt *p)
{
    free(p->tokens);
    memset(p, 0, sizeof *p);
}
