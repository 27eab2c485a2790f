#!/bin/sh
# SPDX-License-Identifier: MIT
# Compare the ABI of a freshly built library with its committed baseline,
# tests/abi/<name>.abi (libpkv.so: tests/abi/libpkv.abi, the 0.2.0 ABI).
# What docs/abi.md allows passes: new functions, fields appended to the
# size-prefixed structs, new enum values. What it forbids fails: a removed
# symbol, a changed signature, a field moved, retyped or removed, an enum
# value changed or removed.
# abidiff rates a struct layout change reached through a pointer as a plain
# "ABI change" (exit bit 4), like an appended field, so its report is read.
# Usage: check_abi.sh path/to/libpkv.so [--update]
#   --update writes the baseline instead (docs/abi.md: only at a release).
set -eu
lib=$1
src=$(cd "$(dirname "$0")/.." && pwd)
name=$(basename "$lib")
name=${name%%.so*}
baseline=$src/tests/abi/$name.abi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The ABI as abidw sees it, the same bytes from any source or build
# directory: the exported functions and the public types they reach
# (--exported-interfaces-only: no declaration of a hidden pkv__ function;
# --drop-private-types with --headers-dir: no type defined outside
# include/pkv, such as the struct behind the opaque pkv_engine), without
# source locations, compilation directories, corpus path or DT_NEEDED
# list; translation units by file name only (--short-locs).
abidw --headers-dir "$src/include/pkv" --drop-private-types \
    --exported-interfaces-only --no-show-locs --short-locs \
    --no-comp-dir-path --no-corpus-path --no-elf-needed \
    --out-file "$tmp/current" "$lib"
if grep -q "='/" "$tmp/current"; then
    echo "FAIL: abidw wrote a path into the ABI of $lib"
    exit 1
fi
if [ "${2:-}" = "--update" ]; then
    mkdir -p "$(dirname "$baseline")"
    cp "$tmp/current" "$baseline"
    echo "baseline written: $baseline"
    exit 0
fi
if [ ! -f "$baseline" ]; then
    echo "FAIL: no baseline $baseline"
    exit 1
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
