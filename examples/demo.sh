#!/bin/sh
# SPDX-License-Identifier: MIT
# Set up, build and run the demo: a GGUF model serving 32 requests through
# pkv on the default device. Usage: sh examples/demo.sh [--model smollm2]
# [options of pkv-gguf] (from the repo root or anywhere).
# - by default Gemma 3 270M, a base model: 32 texts sharing a preamble;
# - --model smollm2: SmolLM2-135M-Instruct, a chat model: 32 questions
#   sharing a system prompt, in its chat template (ChatML), each answer
#   ending at its end of turn.
set -eu
cd "$(dirname "$0")/.."
model=gemma3
if [ "${1:-}" = --model ]; then
    model=${2:?--model needs gemma3 or smollm2}
    shift 2
fi
# Debian packages, Intel's OpenCL runtime for CPUs, and (the first time:
# about 240 MB for Gemma 3 under the Gemma terms of use, 93 MB for
# SmolLM2 under Apache-2.0) the models and ggml, which the host runs them
# on, cached in ~/.cache/pkv.
sh tests/deps.sh
cache=${PKV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pkv}
case "$model" in
gemma3) weights=$cache/gemma3/gemma-3-270m-q4_k_m.gguf ;;
smollm2) weights=$cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf ;;
*)
    echo "demo: --model $model: expected gemma3 or smollm2" >&2
    exit 2
    ;;
esac
if [ ! -f "$weights" ] || [ ! -f "$cache/ggml/install/pkv-ggml.txt" ]; then
    echo "demo: $model or ggml could not be downloaded (offline?): nothing" \
        "to serve; sh examples/gguf/setup.sh downloads them" >&2
    exit 1
fi
echo "demo: configuring (cmake -S . -B build) ..."
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
echo "demo: building pkv-gguf ..."
cmake --build build -j "$(nproc)" --target pkv-gguf >/dev/null
echo "demo: serving 32 requests with $model"
# 32 requests sharing a preamble or a system prompt (the prefix cache
# shows), each answer printed as it finishes under a live status line
# (running, waiting, swapped, preempted, KV use, tokens/s), then
# tokens/s, KV utilisation, preemptions, prefix hits and the backend.
exec ./build/examples/pkv-gguf --weights "$weights" --backend auto "$@"
