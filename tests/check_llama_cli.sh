#!/bin/sh
# SPDX-License-Identifier: MIT
# pkv-llama's command line: a bad argument is named (exit 2), a bad
# --prompts line is reported with its number, a good run exits 0.
# Usage: check_llama_cli.sh path/to/pkv-llama
set -u

name=pkv-llama
binary=$1
. "$(dirname "$0")/cli_lib.sh"
expect 2 "--kv u9: expected f32, f16, u8, u4 or u8k-u4v" --kv u9
expect 2 "--requests 0: expected a whole number >= 1" --requests 0
expect 2 "--backend needs a value" --backend
expect 2 "unknown option --frobnicate" --frobnicate
printf '1 2 3\n4 x 5\n' >"$tmp/prompts"
expect 1 "line 2: \"x 5\" is not a token id" --prompts "$tmp/prompts"
printf '1 2 3\n7 99999\n' >"$tmp/prompts"
expect 1 "line 2: token 99999 is not in 0..511" --prompts "$tmp/prompts"
"$binary" --backend cpu --requests 3 --max-new 4 >"$tmp/out" 2>&1 ||
    fail "a good run failed: $(cat "$tmp/out")"
grep -q "^step " "$tmp/out" || fail "no status lines"
grep -q "^tokens/s:" "$tmp/out" || fail "no summary"
echo "pkv-llama cli ok"
