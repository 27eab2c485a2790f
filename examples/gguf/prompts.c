/* SPDX-License-Identifier: MIT */
/* The demo's requests (prompts.h). */
#include "prompts.h"

#include <stdio.h>

const char gg_demo_preamble[] =
    "The following are short entries from an encyclopedia for curious "
    "readers. Each entry explains its topic in two or three plain "
    "sentences and gives one concrete fact.\n\n";

/* A chat model's system prompt: long enough to fill blocks that every
 * request shares. */
const char gg_demo_system[] =
    "You are a friendly science and history teacher for curious readers "
    "of every age. Answer each question in two or three short, plain "
    "sentences. Give one concrete fact, such as a number, a date or a "
    "name, and do not use lists, headings or markdown. If you are not "
    "sure of a fact, say so rather than guess.";

/* Each request is the preamble, "Topic: ", the topic and "\nEntry:", or a
 * chat model's question about the topic. */
const char *const gg_demo_topics[] = {
    "The Moon",          "Photosynthesis",     "The printing press",
    "Volcanoes",         "The human heart",    "Honeybees",
    "The Pacific Ocean", "Electricity",        "The Roman Empire",
    "Penguins",          "Rainbows",           "The internet",
    "Coffee",            "Mount Everest",      "Black holes",
    "The piano",         "Earthquakes",        "The Great Wall of China",
    "Vaccines",          "Octopuses",          "The Sahara Desert",
    "Chess",             "Glaciers",           "The telescope",
    "Bread",             "Lightning",          "The Amazon rainforest",
    "Wind turbines",     "Whales",             "The alphabet",
    "Tea",               "Comets",
};

const uint32_t gg_demo_num_topics =
    sizeof gg_demo_topics / sizeof gg_demo_topics[0];

size_t gg_demo_text(uint32_t i, int chat, char *buf, size_t size)
{
    int n = chat ? snprintf(buf, size, "Tell me about %s.", gg_demo_topics[i])
                 : snprintf(buf, size, "%sTopic: %s\nEntry:",
                            gg_demo_preamble, gg_demo_topics[i]);
    return n < 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
}
