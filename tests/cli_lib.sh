# SPDX-License-Identifier: MIT
# Shared by the command-line checks (sourced): set name (the program's
# name in messages) and binary, then call expect and json.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
expect() { # EXIT_CODE TEXT ARGS...: run, check the exit code and stderr
    want=$1 text=$2
    shift 2
    "$binary" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ "$rc" -eq "$want" ] || fail "$name $* exited $rc, not $want"
    grep -qF -- "$text" "$tmp/err" ||
        fail "$name $*: stderr lacks '$text': $(cat "$tmp/err")"
}
json() { # EXPECTED_TEXT ARGS...: exit 0, stdout (--json) holds the text
    text=$1
    shift
    "$binary" --json --backend cpu "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ "$rc" -eq 0 ] || fail "$name $*: exited $rc: $(cat "$tmp/err")"
    grep -qF -- "$text" "$tmp/out" ||
        fail "$name $*: stdout lacks '$text': $(cat "$tmp/out")"
}
