/* SPDX-License-Identifier: MIT */
/* The demo's requests (prompts.h). */
#include "prompts.h"

const char g3_demo_preamble[] =
    "The following are short entries from an encyclopedia for curious "
    "readers. Each entry explains its topic in two or three plain "
    "sentences and gives one concrete fact.\n\n";

/* Each request is the preamble, "Topic: ", the topic and "\nEntry:". */
const char *const g3_demo_topics[] = {
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

const uint32_t g3_demo_num_topics =
    sizeof g3_demo_topics / sizeof g3_demo_topics[0];
