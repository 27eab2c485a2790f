#!/bin/sh
# SPDX-License-Identifier: MIT
# Set up, build and run the demo. Usage: sh examples/demo.sh (from the repo
# root or anywhere).
set -eu
cd "$(dirname "$0")/.."
sh tests/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target pkv-llama >/dev/null
# The llama-architecture host (seeded random weights, 32 prompts sharing a
# system prompt) serving every prompt at once through pkv on the default
# device: each sequence's tokens stream as "[id] token", then tokens/s, KV
# utilisation, preemptions, prefix hits and the backend used.
./build/examples/pkv-llama --backend auto "$@"
