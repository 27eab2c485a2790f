/* SPDX-License-Identifier: MIT */
/* The demo's requests, 32 topics sharing a first part, so that the prefix
 * cache shows: for a base model (Gemma 3 270M) a preamble, then
 * "Topic: <topic>\nEntry:"; for a chat model (SmolLM2) a system prompt,
 * then a question about the topic in the model's chat template. */
#ifndef PKV_EXAMPLE_GGUF_PROMPTS_H
#define PKV_EXAMPLE_GGUF_PROMPTS_H

#include <stddef.h>
#include <stdint.h>

extern const char gg_demo_preamble[];
extern const char gg_demo_system[];
extern const char *const gg_demo_topics[];
extern const uint32_t gg_demo_num_topics;

/* Request i's text into buf: the base model's (preamble, topic) or, with
 * chat, the user's question (the system prompt is gg_demo_system). Its
 * length (cut at size - 1). */
size_t gg_demo_text(uint32_t i, int chat, char *buf, size_t size);

#endif
