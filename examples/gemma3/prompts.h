/* SPDX-License-Identifier: MIT */
/* The demo's requests: one shared preamble, so that the prefix cache
 * shows, then a topic each. */
#ifndef PKV_EXAMPLE_GEMMA3_PROMPTS_H
#define PKV_EXAMPLE_GEMMA3_PROMPTS_H

#include <stdint.h>

extern const char g3_demo_preamble[];
extern const char *const g3_demo_topics[];
extern const uint32_t g3_demo_num_topics;

#endif
