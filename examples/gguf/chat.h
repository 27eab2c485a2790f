/* SPDX-License-Identifier: MIT */
/*
 * Chat templates: a conversation (a system prompt, a user's message) as
 * the token ids a chat model was trained on, the assistant's turn opened,
 * and the token that ends that turn. The template is the model's own,
 * recognised as llama.cpp's llm_chat_detect_template does: from the
 * file's tokenizer.chat_template, or, where the file has none, from the
 * vocabulary's turn markers.
 * - ChatML (SmolLM2, Qwen...): "<|im_start|>system\n{system}<|im_end|>\n"
 *   "<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n", ended
 *   by <|im_end|>;
 * - Gemma: "<start_of_turn>user\n{system}\n\n{user}<end_of_turn>\n"
 *   "<start_of_turn>model\n" (Gemma has no system turn: llama.cpp puts
 *   the system prompt first in the user's), ended by <end_of_turn>.
 * BOS first where the file asks for it. The markers are their control
 * tokens; the system prompt and the message are plain text, so a message
 * that spells a marker cannot end a turn.
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

/* The ids of the conversation (system may be NULL: no system prompt),
 * written while they fit max_out; the count, or -1 (a text too long or
 * not tokenizable, out of memory). Never more than gg_chat_bound. */
int gg_chat_tokenize(const gg_chat *chat, const gg_tokenizer *t,
                     const char *system, size_t system_len, const char *user,
                     size_t user_len, int32_t *out, uint32_t max_out);

/* The most ids gg_chat_tokenize returns for texts of these lengths (each
 * at most GG_MAX_TEXT / 2). */
uint32_t gg_chat_bound(const gg_tokenizer *t, size_t system_len,
                       size_t user_len);

#endif
