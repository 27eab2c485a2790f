/* SPDX-License-Identifier: MIT */
/* Chat templates (chat.h), as llama.cpp's src/llama-chat.cpp writes
 * LLM_CHAT_TEMPLATE_CHATML and LLM_CHAT_TEMPLATE_GEMMA (commit 0c1e570). */
#include "chat.h"

#include <string.h>

/* A template's pieces: before the system prompt (NULL: none), between it
 * and the message, after the message; the end of the assistant's turn. */
typedef struct layout {
    const char *marker; /* what recognises it in a template's text */
    const char *name;
    const char *system_open, *system_close;
    const char *user_open, *user_close;
    const char *end;
} layout;

static const layout layouts[] = {
    [GG_CHAT_CHATML] = {"<|im_start|>", "chatml", "<|im_start|>system\n",
                        "<|im_end|>\n", "<|im_start|>user\n",
                        "<|im_end|>\n<|im_start|>assistant\n",
                        "<|im_end|>"},
    [GG_CHAT_GEMMA] = {"<start_of_turn>", "gemma", "<start_of_turn>user\n",
                       "\n\n", NULL,
                       "<end_of_turn>\n<start_of_turn>model\n",
                       "<end_of_turn>"},
};

/* The user's turn opens as the system's in Gemma's: the system prompt is
 * the first part of the user's turn. */
static const char *user_open(const layout *l, int has_system)
{
    if (l->user_open != NULL)
        return l->user_open;
    return has_system ? "" : l->system_open;
}

gg_chat gg_chat_detect(const gg_file_config *c, const gg_tokenizer *t)
{
    gg_chat none = {GG_CHAT_NONE, -1, "none"};
    for (int32_t k = GG_CHAT_CHATML; k <= GG_CHAT_GEMMA; k++) {
        const layout *l = &layouts[k];
        int found = c->chat_template != NULL
                        ? strstr(c->chat_template, l->marker) != NULL
                        : gg_token_id(t, l->marker) >= 0;
        int32_t end = gg_token_id(t, l->end);
        if (found && end >= 0 && gg_token_id(t, l->marker) >= 0)
            return (gg_chat){k, end, l->name};
    }
    return none;
}

/* Where the ids go, the count so far. */
typedef struct out_ids {
    int32_t *out;
    uint32_t max;
    size_t count;
} out_ids;

static int put(out_ids *o, const gg_tokenizer *t, const char *text,
               size_t len, unsigned flags)
{
    uint32_t room = o->count < o->max ? o->max - (uint32_t)o->count : 0;
    int got = gg_tokenize(t, text, len, flags,
                          room ? o->out + o->count : NULL, room);
    if (got < 0)
        return -1;
    o->count += (size_t)got;
    return 0;
}

int gg_chat_tokenize(const gg_chat *chat, const gg_tokenizer *t,
                     const char *system, size_t system_len, const char *user,
                     size_t user_len, int32_t *out, uint32_t max_out)
{
    if (chat->kind == GG_CHAT_NONE || system_len > GG_MAX_TEXT / 2 ||
        user_len > GG_MAX_TEXT / 2)
        return -1;
    const layout *l = &layouts[chat->kind];
    out_ids o = {out, max_out, 0};
    if (t->add_bos && put(&o, t, "", 0, GG_ADD_BOS) != 0)
        return -1;
    int has_system = system != NULL;
    const char *open = user_open(l, has_system);
    if ((has_system &&
         (put(&o, t, l->system_open, strlen(l->system_open),
              GG_PARSE_SPECIAL) != 0 ||
          put(&o, t, system, system_len, 0) != 0 ||
          put(&o, t, l->system_close, strlen(l->system_close),
              GG_PARSE_SPECIAL) != 0)) ||
        put(&o, t, open, strlen(open), GG_PARSE_SPECIAL) != 0 ||
        put(&o, t, user, user_len, 0) != 0 ||
        put(&o, t, l->user_close, strlen(l->user_close), GG_PARSE_SPECIAL) !=
            0)
        return -1;
    return (int)o.count;
}

uint32_t gg_chat_bound(const gg_tokenizer *t, size_t system_len,
                       size_t user_len)
{
    /* The markers: fewer than 64 ids in all. */
    return gg_tokenize_bound(t, system_len, 0) +
           gg_tokenize_bound(t, user_len, GG_ADD_BOS) + 64;
}
