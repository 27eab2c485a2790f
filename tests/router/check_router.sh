#!/bin/sh
# SPDX-License-Identifier: MIT
# pkv-router against synthetic backends (check_router.py: Python HTTP
# servers and KV events through pyzmq and msgspec, the openai client).
# Skipped (exit 77) when the test's Python packages are not installed
# (tests/deps.sh installs them into $PKV_CACHE/server/venv).
# Usage: check_router.sh path/to/pkv-router
set -u
cache=${PKV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pkv}
python=$cache/server/venv/bin/python
if ! "$python" -c "import openai, zmq, msgspec" 2>/dev/null; then
    echo "pkv-router: skipped, openai, pyzmq or msgspec is not installed" \
        "($cache/server/venv: sh tests/deps.sh)"
    exit 77
fi
. "$(dirname "$0")/../sanitizer_reports.sh"
"$python" -u "$(dirname "$0")/check_router.py" "$1"
sanitizer_reports $?
