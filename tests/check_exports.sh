#!/bin/sh
# SPDX-License-Identifier: MIT
# The dynamic symbols libpkv.so defines must be exactly the pkv_* functions
# that the public headers declare with PKV_API.
# Usage: check_exports.sh path/to/libpkv.so include/pkv/*.h
set -eu
lib=$1
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
grep -h -A1 'PKV_API' "$@" | tr '\n' ' ' | grep -o 'pkv_[a-z0-9_]*(' |
    tr -d '(' | sort -u >"$tmp/declared"
# Defined dynamic symbols, without the version node (type A) and suffix.
nm -D --defined-only "$lib" | awk '$2 != "A" { print $3 }' |
    sed 's/@.*//' | sort -u >"$tmp/exported"
if ! diff -u "$tmp/declared" "$tmp/exported"; then
    echo "FAIL: exported symbols (+) differ from declared ones (-)"
    exit 1
fi
echo "exports ok: $(wc -l <"$tmp/exported") pkv_* functions"
