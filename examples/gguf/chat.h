/* SPDX-License-Identifier: MIT */
/*
 * Chat templates: a conversation (system prompts, the user's and the
 * assistant's messages in turn) as the token ids a chat model was trained
 * on, the assistant's turn opened, and the token that ends that turn. The
 * template is the model's own, recognised as llama.cpp's
 * llm_chat_detect_template does: from the file's tokenizer.chat_template, or,
 * where the file has none, from the vocabulary's turn markers.
 * - ChatML (SmolLM2, Qwen...): "<|im_start|>{role}\n{text}<|im_end|>\n"
 *   a message, then "<|im_start|>assistant\n", ended by <|im_end|>;
 * - Gemma: "<start_of_turn>user\n{text}<end_of_turn>\n" a user's message,
 *   "<start_of_turn>model\n{text}<end_of_turn>\n" an assistant's, then
 *   "<start_of_turn>model\n", ended by <end_of_turn>. Gemma has no system
 *   turn: as llama.cpp does, the system prompts go first in the next
 *   user's message, then "\n\n" (with no user's message after them, in a
 *   user's turn of their own).
 * BOS first where the file asks for it. The markers are their control
 * tokens; the messages are plain text, so a message that spells a marker
 * cannot end a turn.
 */
#ifndef PKV_EXAMPLE_GGUF_CHAT_H
#define PKV_EXAMPLE_GGUF_CHAT_H

#include "tokenizer.h"

#include <stddef.h>
#include <stdint.h>

enum { GG_CHAT_NONE, GG_CHAT_CHATML, GG_CHAT_GEMMA };

typedef struct gg_chat {
    int32_t kind;    /* GG_CHAT_* */
    int32_t end;     /* the token that ends the assistant's turn */
    const char *name; /* "chatml", "gemma" */
} gg_chat;

/* The model's template; kind GG_CHAT_NONE where there is none this host
 * knows (or its markers are not single tokens of the vocabulary). */
gg_chat gg_chat_detect(const gg_file_config *c, const gg_tokenizer *t);

enum { GG_ROLE_SYSTEM, GG_ROLE_USER, GG_ROLE_ASSISTANT };

/* One message of a conversation: its role (GG_ROLE_*) and its text. */
typedef struct gg_chat_message {
    int32_t role;
    const char *text;
    size_t len;
} gg_chat_message;

/* The ids of the conversation of n messages, the assistant's turn opened
 * after them, written while they fit max_out; the count, or -1 (no
 * template, texts longer than GG_MAX_TEXT / 2 together or not
 * tokenizable, a bad role, out of memory). Never more than
 * gg_chat_messages_bound. */
int gg_chat_tokenize_messages(const gg_chat *chat, const gg_tokenizer *t,
                              const gg_chat_message *messages, uint32_t n,
                              int32_t *out, uint32_t max_out);

/* The most ids gg_chat_tokenize_messages returns for these messages
 * (UINT32_MAX: more than it takes). */
uint32_t gg_chat_messages_bound(const gg_tokenizer *t,
                                const gg_chat_message *messages, uint32_t n);

/* A system prompt (system NULL: none) and a user's message: the
 * conversation of those two messages. */
int gg_chat_tokenize(const gg_chat *chat, const gg_tokenizer *t,
                     const char *system, size_t system_len, const char *user,
                     size_t user_len, int32_t *out, uint32_t max_out);

/* The most ids gg_chat_tokenize returns for texts of these lengths (each
 * at most GG_MAX_TEXT / 2). */
uint32_t gg_chat_bound(const gg_tokenizer *t, size_t system_len,
                       size_t user_len);

#endif
