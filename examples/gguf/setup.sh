#!/bin/sh
# SPDX-License-Identifier: MIT
# What the GGUF host needs, fetched once into $PKV_CACHE (default
# ~/.cache/pkv; nothing of it is ever committed): the two models it is
# tested with, Gemma 3 270M (gemma3.sh) and SmolLM2-135M-Instruct
# (smollm2.sh), each with a virtual environment for its checks, and ggml,
# which the host runs them on (ggml.sh).
# Usage: setup.sh. Exits 77 when a part could not be downloaded and was
# not cached (offline), after trying the others, so that a caller can
# skip what needs it (tests/run.sh looks for each file).
set -u
here=$(cd "$(dirname "$0")" && pwd)
rc=0
for part in gemma3 smollm2 ggml; do
    sh "$here/$part.sh"
    got=$?
    if [ "$got" -eq 77 ]; then
        [ "$rc" -ne 0 ] || rc=77
    elif [ "$got" -ne 0 ]; then
        rc=1
    fi
done
exit "$rc"
