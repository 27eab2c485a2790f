#!/bin/sh
# SPDX-License-Identifier: MIT
# Install pkv from a build directory into a scratch prefix, then build and
# run examples/minimal.c against it twice: with find_package(pkv) and with
# pkg-config. Usage: check_install.sh BUILD_DIR
set -eu
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null

mkdir "$tmp/consumer"
cat >"$tmp/consumer/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.20)
project(pkv_consumer C)
find_package(pkv 0.1 REQUIRED)
add_executable(minimal $src/examples/minimal.c)
target_link_libraries(minimal PRIVATE pkv::pkv m)
CMAKE
cmake -S "$tmp/consumer" -B "$tmp/consumer/build" \
    -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$tmp/consumer/build" >/dev/null
LD_LIBRARY_PATH="$prefix/lib:$prefix/lib64" "$tmp/consumer/build/minimal" \
    >"$tmp/cmake.out"
echo "find_package(pkv): $(tail -n 1 "$tmp/cmake.out")"

pc_dir=$(dirname "$(find "$prefix" -name pkv.pc | head -n 1)")
# shellcheck disable=SC2046
cc -std=c11 -Wall -Werror "$src/examples/minimal.c" -o "$tmp/minimal-pc" \
    $(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs pkv) -lm
LD_LIBRARY_PATH="$prefix/lib:$prefix/lib64" "$tmp/minimal-pc" >"$tmp/pc.out"
echo "pkg-config pkv: $(tail -n 1 "$tmp/pc.out")"
cmp "$tmp/cmake.out" "$tmp/pc.out"
echo "install ok"
