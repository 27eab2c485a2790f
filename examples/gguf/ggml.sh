#!/bin/sh
# SPDX-License-Identifier: MIT
# ggml, the tensor library llama.cpp runs on (MIT licence), for the Gemma 3
# host: its CPU backend built once from the ggml tree that PyPI's
# llama-cpp-python source package vendors (pinned version and sha256),
# installed into a cache and found there by CMake (PKV_GGML_DIR). Only
# examples/ and bench/ link it; the library never does.
# Usage: ggml.sh [CACHE_DIR]  (default $PKV_CACHE/ggml, PKV_CACHE
# defaulting to ~/.cache/pkv). Nothing is rebuilt when the pinned build is
# there. Exits 77 when it cannot download and nothing is cached (offline),
# so that a caller can skip the host.
#
# The build is for this machine's CPU (GGML_NATIVE: the cache is per
# machine, so AVX2/AVX-512/... are used where present), static, the CPU
# backend only: no BLAS, GPU backend or OpenMP (ggml's own thread pool,
# which the host keeps for its whole run). GGML_LLAMAFILE on, as
# llama.cpp's own build sets it: its tiled products for Q8_0/Q5_0/Q4_0
# batches.
set -eu
pkv_cache=${PKV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pkv}
cache=${1:-$pkv_cache/ggml}
VERSION=0.3.36
SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
OPTIONS="-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON
-DGGML_OPENMP=OFF -DGGML_BLAS=OFF -DGGML_BACKEND_DL=OFF -DGGML_LLAMAFILE=ON
-DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF"
prefix=$cache/install
# What the install was built from and how; the build is current when it
# matches (the last file written, so a half-done build never counts).
stamp="llama-cpp-python $VERSION sha256 $SHA256 $(echo $OPTIONS)"
if [ -f "$prefix/pkv-ggml.txt" ] &&
    [ "$(cat "$prefix/pkv-ggml.txt")" = "$stamp" ]; then
    exit 0
fi
sdist=llama_cpp_python-$VERSION.tar.gz
work=$cache/work
mkdir -p "$cache"
rm -rf "$work"
mkdir -p "$work"
echo "ggml: downloading llama-cpp-python $VERSION's source (about 77 MB," \
    "MIT) into $work"
# pip's download of a source package needs its build backend's metadata
# step, so pip fetches scikit-build-core too; nothing is installed.
if ! python3 -m pip download --disable-pip-version-check --no-deps \
    --no-binary :all: -d "$work" "llama-cpp-python==$VERSION" \
    >"$work/download.log" 2>&1; then
    rm -rf "$work"
    echo "ggml: cannot download llama-cpp-python (offline?); skipped"
    exit 77
fi
if [ "$(sha256sum "$work/$sdist" | cut -d' ' -f1)" != "$SHA256" ]; then
    echo "ggml: $sdist: sha256 differs from the pinned one" >&2
    exit 1
fi
echo "ggml: building its CPU backend (about 100 CPU-seconds) into $prefix"
tar -xzf "$work/$sdist" -C "$work" \
    "llama_cpp_python-$VERSION/vendor/llama.cpp/ggml"
src=$work/llama_cpp_python-$VERSION/vendor/llama.cpp/ggml
# The source package leaves out the template of ggml's pkg-config file,
# which a standalone configure insists on; nothing here reads that file.
: >"$src/ggml.pc.in"
# Each step's output in a log, shown when the step fails.
step() {
    log=$work/$1.log
    shift
    if ! "$@" >"$log" 2>&1; then
        tail -n 30 "$log" >&2
        echo "ggml: failed: $*" >&2
        exit 1
    fi
}
# shellcheck disable=SC2086 # OPTIONS is a list
step configure cmake -S "$src" -B "$work/build" \
    -DCMAKE_INSTALL_PREFIX="$prefix.new" $OPTIONS
step build cmake --build "$work/build" -j "$(nproc)"
rm -rf "$prefix.new"
step install cmake --install "$work/build"
echo "$stamp" >"$prefix.new/pkv-ggml.txt"
# The old build stays usable until the new one is complete.
rm -rf "$prefix"
mv "$prefix.new" "$prefix"
rm -rf "$work"
echo "ggml: ready in $prefix"
