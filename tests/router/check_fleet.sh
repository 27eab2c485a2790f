#!/bin/sh
# SPDX-License-Identifier: MIT
# A real fleet (examples/router/fleet.sh: Redis, two pkv-servers, the
# router) checked by check_fleet.py, on Gemma 3 270M or else SmolLM2,
# whichever is cached first. Skipped (exit 77) without a cached model,
# redis-server or the test's Python packages (tests/deps.sh installs
# them).
# Usage: check_fleet.sh path/to/build path/to/pkv-gguf
set -u
build=$1
gguf=$2
here=$(cd "$(dirname "$0")" && pwd)
cache=${PKV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pkv}
python=$cache/server/venv/bin/python
if ! "$python" -c "import openai, zmq, msgspec" 2>/dev/null; then
    echo "fleet: skipped, openai, pyzmq or msgspec is not installed" \
        "($cache/server/venv: sh tests/deps.sh)"
    exit 77
fi
if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null
then
    echo "fleet: skipped, no redis-server (sh tests/deps.sh)"
    exit 77
fi
. "$here/../sanitizer_reports.sh"
for model in gemma3 smollm2; do
    if "$gguf" --model "$model" --prompt x --max-new 1 --backend cpu \
        --threads 1 --quiet >/dev/null 2>&1; then
        "$python" -u "$here/check_fleet.py" \
            "$here/../../examples/router/fleet.sh" "$build" --model "$model"
        sanitizer_reports $?
    fi
done
echo "fleet: skipped, neither Gemma 3 nor SmolLM2 is cached" \
    "(sh examples/gguf/setup.sh)"
sanitizer_reports 77
