#!/bin/sh
# SPDX-License-Identifier: MIT
# Set up and run every test: a normal build, then one under AddressSanitizer
# and UndefinedBehaviorSanitizer. Usage: sh tests/run.sh  (from the repo root)
set -eu
cd "$(dirname "$0")/.."
sh tests/deps.sh
JOBS=$(nproc)

echo "== normal build"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPKV_WERROR=ON
cmake --build build -j "$JOBS"
ctest --test-dir build --output-on-failure -j "$JOBS"
echo "== install, then build examples/minimal.c with find_package and pkg-config"
sh tests/check_install.sh build
echo "== ABI against the committed baseline (tests/abi/libpkv.abi)"
sh tests/check_abi.sh build/libpkv.so

echo "== AddressSanitizer + UndefinedBehaviorSanitizer build"
# Intel's OpenCL runtime aborts ASan processes at platform enumeration (it
# dlopens with RTLD_DEEPBIND), so sanitized runs see PoCL only. The offline
# Intel kernel builds (label ocloc) ran in the normal pass already.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DPKV_WERROR=ON \
    -DPKV_SANITIZE=address,undefined
cmake --build build-asan -j "$JOBS"
# PoCL leaks while it compiles a program (tests/lsan.supp), and any test
# may reach PoCL: PKV_BACKEND_AUTO picks an OpenCL device when there is one.
OCL_ICD_VENDORS=/etc/OpenCL/vendors/pocl.icd \
    LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp \
    ctest --test-dir build-asan --output-on-failure -j "$JOBS" -LE ocloc

echo "== ThreadSanitizer build (threads label only)"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DPKV_WERROR=ON \
    -DPKV_SANITIZE=thread -DPKV_BUILD_BENCH=OFF -DPKV_BUILD_EXAMPLES=OFF
cmake --build build-tsan -j "$JOBS"
OCL_ICD_VENDORS=/etc/OpenCL/vendors/pocl.icd \
    ctest --test-dir build-tsan --output-on-failure -L threads
