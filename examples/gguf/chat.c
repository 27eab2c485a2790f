/* SPDX-License-Identifier: MIT */
/* Chat templates (chat.h), as llama.cpp's src/llama-chat.cpp writes
 * LLM_CHAT_TEMPLATE_CHATML and LLM_CHAT_TEMPLATE_GEMMA (commit 0c1e570). */
#include "chat.h"

#include <stdint.h>
#include <string.h>

/* A template's pieces: the text that opens a message of each role (NULL
 * for the system's in a template without a system turn, whose system
 * prompts go first in the next user's message, then merge_system), the
 * text that closes a message, the end of the assistant's turn. */
typedef struct layout {
    const char *marker; /* what recognises it in a template's text */
    const char *name;
    const char *open[3]; /* by GG_ROLE_* */
    const char *close;
    const char *merge_system;
    const char *end;
} layout;

static const layout layouts[] = {
    [GG_CHAT_CHATML] = {"<|im_start|>", "chatml",
                        {"<|im_start|>system\n", "<|im_start|>user\n",
                         "<|im_start|>assistant\n"},
                        "<|im_end|>\n", NULL, "<|im_end|>"},
    [GG_CHAT_GEMMA] = {"<start_of_turn>", "gemma",
                       {NULL, "<start_of_turn>user\n",
                        "<start_of_turn>model\n"},
                       "<end_of_turn>\n", "\n\n", "<end_of_turn>"},
};

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

static int put_marker(out_ids *o, const gg_tokenizer *t, const char *marker)
{
    return put(o, t, marker, strlen(marker), GG_PARSE_SPECIAL);
}

/* The system prompts of messages[from, to) (their texts one after the
 * other), then the template's separator: what opens the user's message
 * after them in a template without a system turn. */
static int put_merged(out_ids *o, const gg_tokenizer *t, const layout *l,
                      const gg_chat_message *m, uint32_t from, uint32_t to)
{
    for (uint32_t i = from; i < to; i++)
        if (m[i].role == GG_ROLE_SYSTEM && put(o, t, m[i].text, m[i].len, 0))
            return -1;
    return put_marker(o, t, l->merge_system);
}

int gg_chat_tokenize_messages(const gg_chat *chat, const gg_tokenizer *t,
                              const gg_chat_message *messages, uint32_t n,
                              int32_t *out, uint32_t max_out)
{
    if (chat->kind == GG_CHAT_NONE)
        return -1;
    size_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (messages[i].role < GG_ROLE_SYSTEM ||
            messages[i].role > GG_ROLE_ASSISTANT ||
            messages[i].len > GG_MAX_TEXT / 2 - total)
            return -1;
        total += messages[i].len;
    }
    const layout *l = &layouts[chat->kind];
    out_ids o = {out, max_out, 0};
    if (t->add_bos && put(&o, t, "", 0, GG_ADD_BOS) != 0)
        return -1;
    /* The first system prompt not yet written (n: none), in a template
     * without a system turn. */
    uint32_t pending = n;
    for (uint32_t i = 0; i < n; i++) {
        const gg_chat_message *m = &messages[i];
        if (l->open[m->role] == NULL) {
            pending = pending < n ? pending : i;
            continue;
        }
        if (put_marker(&o, t, l->open[m->role]) != 0 ||
            (pending < n && m->role == GG_ROLE_USER &&
             put_merged(&o, t, l, messages, pending, i) != 0) ||
            put(&o, t, m->text, m->len, 0) != 0 ||
            put_marker(&o, t, l->close) != 0)
            return -1;
        if (m->role == GG_ROLE_USER)
            pending = n;
    }
    if (pending < n &&
        (put_marker(&o, t, l->open[GG_ROLE_USER]) != 0 ||
         put_merged(&o, t, l, messages, pending, n) != 0 ||
         put_marker(&o, t, l->close) != 0))
        return -1;
    if (put_marker(&o, t, l->open[GG_ROLE_ASSISTANT]) != 0 ||
        o.count > INT32_MAX)
        return -1;
    return (int)o.count;
}

uint32_t gg_chat_messages_bound(const gg_tokenizer *t,
                                const gg_chat_message *messages, uint32_t n)
{
    /* The markers: fewer than 32 ids a message, and BOS and the
     * assistant's turn fewer than 32. */
    uint64_t bound = 32;
    for (uint32_t i = 0; i < n && bound < UINT32_MAX; i++) {
        if (messages[i].len > GG_MAX_TEXT / 2)
            return UINT32_MAX;
        bound += (uint64_t)gg_tokenize_bound(t, messages[i].len, 0) + 32;
    }
    return bound < UINT32_MAX ? (uint32_t)bound : UINT32_MAX;
}

int gg_chat_tokenize(const gg_chat *chat, const gg_tokenizer *t,
                     const char *system, size_t system_len, const char *user,
                     size_t user_len, int32_t *out, uint32_t max_out)
{
    gg_chat_message m[2] = {{GG_ROLE_SYSTEM, system, system_len},
                            {GG_ROLE_USER, user, user_len}};
    return system != NULL
               ? gg_chat_tokenize_messages(chat, t, m, 2, out, max_out)
               : gg_chat_tokenize_messages(chat, t, m + 1, 1, out, max_out);
}

uint32_t gg_chat_bound(const gg_tokenizer *t, size_t system_len,
                       size_t user_len)
{
    gg_chat_message m[2] = {{GG_ROLE_SYSTEM, "", system_len},
                            {GG_ROLE_USER, "", user_len}};
    return gg_chat_messages_bound(t, m, 2);
}
