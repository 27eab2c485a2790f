#!/bin/sh
# SPDX-License-Identifier: MIT
# The dynamic symbols a library defines must be exactly the pkv_* functions
# that the public headers declare with its export macro: PKV_API for
# libpkv.so, PKV_REDIS_API for libpkv_redis.so (the library's name in
# capitals, then _API). A function declared with the other library's macro
# is not expected, so each library is checked to export its own only.
# Usage: check_exports.sh path/to/libpkv.so include/pkv/*.h
set -eu
lib=$1
shift
name=$(basename "$lib")
name=${name#lib}
macro=$(printf '%s' "${name%%.so*}" | tr '[:lower:]' '[:upper:]')_API
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
grep -h -w -A1 "^$macro" "$@" | tr '\n' ' ' | grep -o 'pkv_[a-z0-9_]*(' |
    tr -d '(' | sort -u >"$tmp/declared"
if [ ! -s "$tmp/declared" ]; then
    echo "FAIL: no function declared with $macro in $*"
    exit 1
fi
# Defined dynamic symbols, without the version node (type A) and suffix.
nm -D --defined-only "$lib" | awk '$2 != "A" { print $3 }' |
    sed 's/@.*//' | sort -u >"$tmp/exported"
if ! diff -u "$tmp/declared" "$tmp/exported"; then
    echo "FAIL: exported symbols (+) differ from declared ones (-)"
    exit 1
fi
echo "exports ok: $(wc -l <"$tmp/exported") $macro functions"
