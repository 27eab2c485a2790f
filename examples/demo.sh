#!/bin/sh
# SPDX-License-Identifier: MIT
# Set up, build and run the demo. Usage: sh examples/demo.sh (from the repo
# root or anywhere).
set -eu
cd "$(dirname "$0")/.."
sh tests/deps.sh
echo "demo: configuring (cmake -S . -B build) ..."
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
echo "demo: building pkv-llama ..."
cmake --build build -j "$(nproc)" --target pkv-llama >/dev/null
echo "demo: serving 32 prompts"
# The llama-architecture host (seeded random weights, 32 prompts sharing a
# system prompt) serving every prompt at once through pkv on the default
# device: one status line per step (running, waiting, swapped, preempted,
# KV use, tokens/s), then tokens/s, KV utilisation, preemptions, prefix
# hits and the backend used. --tokens streams the sampled tokens instead.
./build/examples/pkv-llama --backend auto "$@"
