#!/bin/sh
# SPDX-License-Identifier: MIT
# pkv-bench as a command-line tool: every subcommand explains itself with
# --help (exit 0), a bad option exits 2, and --json - writes JSON lines
# only to stdout (tables go to stderr).
# Usage: check_bench_cli.sh path/to/pkv-bench
set -eu
bench=$1
subs=$("$bench" --help | sed -n 's/^  \([a-z]*\) .*/\1/p')
[ -n "$subs" ] || { echo "FAIL: no subcommands in --help"; exit 1; }
for s in $subs; do
    out=$("$bench" "$s" --help)
    echo "$out" | grep -q "^options:" ||
        { echo "FAIL: $s --help has no options"; exit 1; }
done
set +e
"$bench" scheduler --bogus >/dev/null 2>&1
rc=$?
set -e
[ "$rc" -eq 2 ] || { echo "FAIL: a bad option exits $rc, not 2"; exit 1; }
"$bench" scheduler --quick --json - 2>/dev/null | python3 -c '
import json, sys
lines = sys.stdin.read().splitlines()
assert lines, "no JSON lines"
for line in lines:
    json.loads(line)
print("json lines on stdout:", len(lines))'
echo "bench cli ok: $(echo $subs | wc -w) subcommands"
