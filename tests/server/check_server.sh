#!/bin/sh
# SPDX-License-Identifier: MIT
# pkv-server against real clients (check_server.py: PyPI's openai and
# curl): SmolLM2-135M-Instruct (completions and chat) fully, Gemma 3 270M
# on its greedy answers and a stream. Each model is skipped, saying so,
# when examples/gguf/setup.sh has not cached it; the whole test (exit 77)
# when neither is, or the openai client is not installed (tests/deps.sh
# installs it into $PKV_CACHE/server/venv).
# Usage: check_server.sh path/to/pkv-server path/to/pkv-gguf [--threads N]
# (--threads: the model's, in the server and in pkv-gguf's references).
set -u
server=$1
gguf=$2
shift 2
cache=${PKV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pkv}
python=$cache/server/venv/bin/python
if ! "$python" -c "import openai" 2>/dev/null; then
    echo "pkv-server: skipped, the openai client is not installed" \
        "($cache/server/venv: sh tests/deps.sh)"
    exit 77
fi
. "$(dirname "$0")/../sanitizer_reports.sh"
ran=0
for model in smollm2 gemma3; do
    if ! "$gguf" --model "$model" --prompt x --max-new 1 --backend cpu \
        --threads 1 --quiet >/dev/null 2>&1; then
        echo "pkv-server $model: skipped, the model is not cached" \
            "(sh examples/gguf/setup.sh)"
        continue
    fi
    quick=""
    [ "$model" = gemma3 ] && quick=--quick
    # shellcheck disable=SC2086 # no word or one
    "$python" -u "$(dirname "$0")/check_server.py" "$server" "$gguf" \
        --model "$model" $quick "$@" || sanitizer_reports 1
    ran=1
done
[ "$ran" -eq 1 ] || sanitizer_reports 77
sanitizer_reports 0
