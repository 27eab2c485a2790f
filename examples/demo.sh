#!/bin/sh
# SPDX-License-Identifier: MIT
# Set up, build and run the demo: Gemma 3 270M serving 32 prompts through
# pkv on the default device. Usage: sh examples/demo.sh [--random]
# [options of pkv-gemma3, or of pkv-llama with --random] (from the repo
# root or anywhere).
set -eu
cd "$(dirname "$0")/.."
random=0
if [ "${1:-}" = --random ]; then
    random=1
    shift
fi
# Debian packages, Intel's OpenCL runtime for CPUs, and (the first time:
# about 240 MB, Gemma terms of use) the model and ggml, which the host
# runs it on, cached in ~/.cache/pkv.
if [ "$random" = 1 ]; then
    PKV_NO_MODEL=1 sh tests/deps.sh
else
    sh tests/deps.sh
fi
cache=${PKV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pkv}
weights=$cache/gemma3/gemma-3-270m-q4_k_m.gguf
if [ "$random" = 0 ] && { [ ! -f "$weights" ] ||
    [ ! -f "$cache/ggml/install/pkv-ggml.txt" ]; }; then
    echo "demo: the model or ggml could not be downloaded (offline?); serving the"
    echo "      llama-architecture host with seeded random weights instead"
    random=1
fi
echo "demo: configuring (cmake -S . -B build) ..."
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
if [ "$random" = 1 ]; then
    echo "demo: building pkv-llama ..."
    cmake --build build -j "$(nproc)" --target pkv-llama >/dev/null
    echo "demo: serving 32 prompts (seeded random weights: token ids)"
    # 32 prompts sharing a system prompt, one status line per step
    # (running, waiting, swapped, preempted, KV use, tokens/s), then
    # tokens/s, KV utilisation, preemptions, prefix hits and the backend.
    exec ./build/examples/pkv-llama --backend auto "$@"
fi
echo "demo: building pkv-gemma3 ..."
cmake --build build -j "$(nproc)" --target pkv-gemma3 >/dev/null
echo "demo: serving 32 prompts with Gemma 3 270M"
# 32 requests sharing a preamble (the prefix cache shows), each answer
# printed as it finishes under a live status line (running, waiting,
# swapped, preempted, KV use, tokens/s), then tokens/s, KV utilisation,
# preemptions, prefix hits and the backend.
exec ./build/examples/pkv-gemma3 --weights "$weights" --backend auto "$@"
