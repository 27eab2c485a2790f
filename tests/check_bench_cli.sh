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
set +e
"$bench" serve --threads 0 >/dev/null 2>&1
rc=$?
set -e
[ "$rc" -eq 2 ] || { echo "FAIL: serve --threads 0 exits $rc, not 2"; exit 1; }
"$bench" scheduler --quick --json - 2>/dev/null | python3 -c '
import json, sys
lines = sys.stdin.read().splitlines()
assert lines, "no JSON lines"
for line in lines:
    json.loads(line)
print("json lines on stdout:", len(lines))'
# store (built with hiredis only): a 64-token prompt, one engine of each
# kind, against a redis-server of its own (under a second). Without
# redis-server it says it skipped and exits 0, so that all goes on.
if echo "$subs" | grep -qx store; then
    set +e
    "$bench" store --prompt 5 >/dev/null 2>&1
    rc=$?
    out=$(PKV_REDIS_SERVER=/nonexistent "$bench" store --quick --prompt 64 \
          2>&1)
    skip_rc=$?
    set -e
    [ "$rc" -eq 2 ] ||
        { echo "FAIL: store --prompt 5 exits $rc, not 2"; exit 1; }
    [ "$skip_rc" -eq 0 ] && echo "$out" | grep -q "^store: skipped" ||
        { echo "FAIL: store without redis-server exits $skip_rc: $out"
          exit 1; }
    if [ -x "${PKV_REDIS_SERVER:-/usr/bin/redis-server}" ]; then
        "$bench" store --quick --prompt 64 --json - 2>/dev/null | python3 -c '
import json, sys
rows = [json.loads(line) for line in sys.stdin.read().splitlines()]
assert [r["kv"] for r in rows] == ["f16", "u8", "f16"], rows
assert [r["sealed"] for r in rows] == [False, False, True], rows
for r in rows:
    assert r["bench"] == "store" and r["blocks_hit"] == 3, r
    assert r["blocks_saved"] == 4 and r["hit_ms"] > 0, r
print("store: json lines on stdout:", len(rows))'
    else
        echo "store skipped: no redis-server"
    fi
fi
echo "bench cli ok: $(echo $subs | wc -w) subcommands"
