/* SPDX-License-Identifier: MIT */
/* A parsed request made a job (prepare.h). */
#include "prepare.h"

#include "chat.h"
#include "serve.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* OpenAI's default max_tokens of a completion. */
#define COMPLETION_MAX_TOKENS 16

static int out_of_memory(srv_error *e)
{
    return srv_error_set(e, 500, "server_error", NULL, NULL,
                         "out of memory");
}

/* The prompt's token ids into j. */
static int tokenize(const srv_server *s, srv_job *j, const srv_request *r,
                    srv_error *e)
{
    if (r->prompt_ids != NULL) {
        j->prompt = malloc(r->num_prompt_ids * sizeof *j->prompt);
        if (j->prompt == NULL)
            return out_of_memory(e);
        memcpy(j->prompt, r->prompt_ids,
               r->num_prompt_ids * sizeof *j->prompt);
        j->prompt_len = r->num_prompt_ids;
        return 0;
    }
    if (r->kind == SRV_CHAT && s->chat.kind == GG_CHAT_NONE)
        return srv_error_set(e, 400, "invalid_request_error", NULL, NULL,
                             "the model '%s' has no chat template this "
                             "server knows (ChatML, Gemma's): use "
                             "/v1/completions",
                             s->model_name);
    uint32_t bound =
        r->kind == SRV_CHAT
            ? gg_chat_messages_bound(s->tok, r->messages, r->num_messages)
            : gg_tokenize_bound(s->tok, r->prompt_len, s->tok->add_bos);
    j->prompt = bound < UINT32_MAX / sizeof *j->prompt
                    ? malloc((size_t)bound * sizeof *j->prompt)
                    : NULL;
    if (j->prompt == NULL)
        return out_of_memory(e);
    int got = r->kind == SRV_CHAT
                  ? gg_chat_tokenize_messages(&s->chat, s->tok, r->messages,
                                              r->num_messages, j->prompt,
                                              bound)
                  : gg_tokenize(s->tok, r->prompt, r->prompt_len,
                                s->tok->add_bos, j->prompt, bound);
    if (got <= 0)
        return srv_error_set(e, 400, "invalid_request_error", NULL,
                             r->kind == SRV_CHAT ? "messages" : "prompt",
                             "the text cannot be tokenized");
    j->prompt_len = (uint32_t)got;
    return 0;
}

/* max_tokens against the room the context leaves. */
static int fit(const srv_server *s, srv_job *j, const srv_request *r,
               srv_error *e)
{
    uint32_t room = j->prompt_len < s->ctx ? s->ctx - j->prompt_len : 0;
    if (room == 0 || r->max_tokens > room)
        return srv_error_set(
            e, 400, "invalid_request_error", "context_length_exceeded",
            r->kind == SRV_CHAT ? "messages" : "prompt",
            "this model's context is %u tokens: the prompt has %u and "
            "max_tokens asks for %u more",
            s->ctx, j->prompt_len, r->max_tokens ? r->max_tokens : 1);
    uint32_t want = r->max_tokens       ? r->max_tokens
                    : r->kind == SRV_CHAT ? s->limits.max_tokens
                                          : COMPLETION_MAX_TOKENS;
    j->max_tokens = want < room ? want : room;
    return 0;
}

int srv_job_prepare(const srv_server *s, srv_job *j, const srv_request *r,
                    srv_error *e)
{
    if (tokenize(s, j, r, e) != 0 || fit(s, j, r, e) != 0)
        return -1;
    j->stream = r->stream;
    j->include_usage = r->include_usage;
    j->ignore_eos = r->ignore_eos;
    j->temperature = (float)r->temperature;
    j->top_p = (float)r->top_p;
    /* Without a seed, each request its own draw: the clock's nanoseconds
     * and the job's address. */
    uint64_t seed = r->seed_given ? r->seed
                                  : (uint64_t)(host_now_s() * 1e9) ^
                                        (uint64_t)(uintptr_t)j;
    j->rng = seed ^ 0x9e3779b97f4a7c15ull;
    for (uint32_t i = 0; i < r->num_stops; i++) {
        j->stops[i] = malloc(r->stop_lens[i]);
        if (j->stops[i] == NULL)
            return out_of_memory(e);
        memcpy(j->stops[i], r->stops[i], r->stop_lens[i]);
        j->stop_lens[i] = r->stop_lens[i];
        j->num_stops++;
    }
    j->created = (long long)time(NULL);
    j->deadline = host_now_s() + s->timeout_s;
    return 0;
}
