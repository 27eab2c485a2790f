#!/bin/sh
# SPDX-License-Identifier: MIT
# Compare the ABI of a freshly built libpkv.so with the committed baseline
# (tests/abi/libpkv.abi, written by abidw). What docs/abi.md allows passes:
# new functions, fields appended to the size-prefixed structs, new enum
# values. What it forbids fails: a removed symbol, a changed signature, a
# field moved, retyped or removed, an enum value changed or removed.
# abidiff rates a struct layout change reached through a pointer as a plain
# "ABI change" (exit bit 4), like an appended field, so its report is read.
# Usage: check_abi.sh path/to/libpkv.so [--update]
set -eu
lib=$1
src=$(cd "$(dirname "$0")/.." && pwd)
baseline=$src/tests/abi/libpkv.abi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Types defined outside the public headers (the engine behind the opaque
# pkv_engine handle, internal structs) are not ABI: drop them.
# Paths in the tree's own terms (relative to its root, the build
# directory as "."), so that the committed baseline names no machine.
abidw --headers-dir "$src/include/pkv" --drop-private-types --no-corpus-path \
    "$lib" | sed -e "s|$src/||g" -e "s|comp-dir-path='[^']*'|comp-dir-path='.'|g" \
    >"$tmp/current"
if [ "${2:-}" = "--update" ]; then
    mkdir -p "$(dirname "$baseline")"
    cp "$tmp/current" "$baseline"
    echo "baseline written: $baseline"
    exit 0
fi
set +e
abidiff "$baseline" "$tmp/current" >"$tmp/report"
rc=$?
set -e
cat "$tmp/report"
# Bits 1-2: abidiff failed; bit 8: an incompatible change it recognises.
if [ $((rc & 3)) -ne 0 ] || [ $((rc & 8)) -ne 0 ]; then
    echo "FAIL: abidiff exit $rc against $baseline"
    exit 1
fi
forbidden='[1-9][0-9]* Removed|offset changed|data member deletion|data member change|type of '"'"'|value changed from|enumerator deletion|return type changed|parameter [0-9]+ of type '"'"'[^'"'"']*'"'"' changed|size of .* changed'
if grep -Eq "$forbidden" "$tmp/report"; then
    echo "FAIL: incompatible ABI change against $baseline:"
    grep -E "$forbidden" "$tmp/report"
    exit 1
fi
if [ "$rc" -eq 0 ]; then
    echo "abi ok: unchanged"
else
    echo "abi ok: compatible additions only"
fi
