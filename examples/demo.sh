#!/bin/sh
# SPDX-License-Identifier: MIT
# Set up, build and run the demo: a GGUF model serving 32 requests through
# pkv on the default device. Usage: sh examples/demo.sh [--random |
# --model smollm2] [options of pkv-gguf, or of pkv-llama with --random]
# (from the repo root or anywhere).
# - by default Gemma 3 270M, a base model: 32 texts sharing a preamble;
# - --model smollm2: SmolLM2-135M-Instruct, a chat model: 32 questions
#   sharing a system prompt, in its chat template (ChatML), each answer
#   ending at its end of turn;
# - --random: the llama-architecture host with seeded random weights
#   (token ids; no download), as when the model cannot be downloaded.
set -eu
cd "$(dirname "$0")/.."
random=0
model=gemma3
case "${1:-}" in
--random)
    random=1
    shift
    ;;
--model)
    model=${2:?--model needs gemma3 or smollm2}
    shift 2
    ;;
esac
# Debian packages, Intel's OpenCL runtime for CPUs, and (the first time:
# about 240 MB for Gemma 3 under the Gemma terms of use, 93 MB for
# SmolLM2 under Apache-2.0) the models and ggml, which the host runs them
# on, cached in ~/.cache/pkv.
if [ "$random" = 1 ]; then
    PKV_NO_MODEL=1 sh tests/deps.sh
else
    sh tests/deps.sh
fi
cache=${PKV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pkv}
case "$model" in
gemma3) weights=$cache/gemma3/gemma-3-270m-q4_k_m.gguf ;;
smollm2) weights=$cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf ;;
*)
    echo "demo: --model $model: expected gemma3 or smollm2" >&2
    exit 2
    ;;
esac
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
echo "demo: building pkv-gguf ..."
cmake --build build -j "$(nproc)" --target pkv-gguf >/dev/null
echo "demo: serving 32 requests with $model"
# 32 requests sharing a preamble or a system prompt (the prefix cache
# shows), each answer printed as it finishes under a live status line
# (running, waiting, swapped, preempted, KV use, tokens/s), then
# tokens/s, KV utilisation, preemptions, prefix hits and the backend.
exec ./build/examples/pkv-gguf --weights "$weights" --backend auto "$@"
