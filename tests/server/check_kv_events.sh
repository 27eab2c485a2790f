#!/bin/sh
# SPDX-License-Identifier: MIT
# pkv-server's KV events (check_kv_events.py: PyPI's pyzmq and msgspec
# against vLLM's schema) with each cached model; a model that is not
# cached is skipped, saying so, and the whole test (exit 77) when none is
# or the Python packages are not installed (tests/deps.sh installs them
# into $PKV_CACHE/server/venv).
# Usage: check_kv_events.sh path/to/pkv-server path/to/pkv-gguf
set -u
server=$1
gguf=$2
cache=${PKV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pkv}
python=$cache/server/venv/bin/python
if ! "$python" -c "import openai, zmq, msgspec" 2>/dev/null; then
    echo "pkv-server KV events: skipped, pyzmq and msgspec are not" \
        "installed ($cache/server/venv: sh tests/deps.sh)"
    exit 77
fi
. "$(dirname "$0")/../sanitizer_reports.sh"
ran=0
for model in smollm2 gemma3; do
    if ! "$gguf" --model "$model" --prompt x --max-new 1 --backend cpu \
        --threads 1 --quiet >/dev/null 2>&1; then
        echo "pkv-server $model KV events: skipped, the model is not" \
            "cached (sh examples/gguf/setup.sh)"
        continue
    fi
    "$python" -u "$(dirname "$0")/check_kv_events.py" "$server" \
        --model "$model" || sanitizer_reports 1
    ran=1
done
[ "$ran" -eq 1 ] || sanitizer_reports 77
sanitizer_reports 0
