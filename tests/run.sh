#!/bin/sh
# SPDX-License-Identifier: MIT
# Set up and run every test: a normal build (its OpenCL tests on PoCL, then
# again on Intel's OpenCL runtime, then the small kernel tests under the
# oclgrind simulator), then builds under AddressSanitizer +
# UndefinedBehaviorSanitizer and ThreadSanitizer.
# Usage: sh tests/run.sh  (from the repo root)
set -eu
cd "$(dirname "$0")/.."
sh tests/deps.sh
JOBS=$(nproc)
PKV_CACHE=${PKV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pkv}
POCL_ICD=/etc/OpenCL/vendors/pocl.icd

# One summary line per pass (result, seconds) and the total, at the end,
# also when a pass fails.
run_start=$(date +%s)
summary=""
pass_name=""
end_pass() { # RESULT
    [ -n "$pass_name" ] || return 0
    summary="$summary$(printf '%-64s %-6s %5ss' "$pass_name" "$1" \
        $(($(date +%s) - pass_start)))\n"
    pass_name=""
}
pass() { # NAME: the next pass begins
    end_pass ok
    pass_name=$1
    pass_start=$(date +%s)
    echo "== $1"
}
finish() {
    rc=$?
    [ "$rc" -eq 0 ] && end_pass ok || end_pass FAILED
    printf '\n== summary\n%b' "$summary"
    echo "total: $(($(date +%s) - run_start))s, exit $rc"
}
trap finish EXIT

pass "normal build and tests (PoCL)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPKV_WERROR=ON
cmake --build build -j "$JOBS"
# The default device is PoCL here: the machine has no GPU.
OCL_ICD_VENDORS=$POCL_ICD ctest --test-dir build --output-on-failure -j "$JOBS"

if [ -f "$PKV_CACHE/intel-icd/intel-cpu.icd" ]; then
    pass "OpenCL tests on Intel's OpenCL runtime for CPUs"
    OCL_ICD_VENDORS=$PKV_CACHE/intel-icd \
        LD_LIBRARY_PATH=$PKV_CACHE/intel-opencl/lib \
        ctest --test-dir build --output-on-failure -L opencl
else
    echo "== Intel's OpenCL runtime is not installed (PKV_NO_INTEL_RUNTIME):" \
        "the Intel path was not executed"
fi

model=$PKV_CACHE/gemma3
if [ -f "$model/gemma-3-270m.pkvw" ] && [ -x "$model/venv/bin/python" ]; then
    pass "Gemma 3 270M: tokenizer vs SentencePiece, host vs numpy forward"
    # examples/gemma3/setup.sh (run by tests/deps.sh) cached the model, its
    # weight file and a venv with gguf, numpy and sentencepiece.
    "$model/venv/bin/python" tests/gemma3/check_tokenizer.py \
        "$model/gemma-3-270m-q4_k_m.gguf" build/examples/g3-tokenize \
        "$model/gemma-3-270m.pkvw"
    OCL_ICD_VENDORS=$POCL_ICD "$model/venv/bin/python" \
        tests/gemma3/check_reference.py "$model/gemma-3-270m-q4_k_m.gguf" \
        "$model/gemma-3-270m.pkvw" build/examples/pkv-gemma3 \
        build/examples/g3-tokenize cpu opencl
else
    echo "== Gemma 3 270M is not cached (offline, or PKV_NO_MODEL=1):" \
        "its tests were skipped"
fi

pass "oclgrind: kernel tests at small shapes, any report fails"
# -cl-opt-disable: oclgrind's interpreter lacks some LLVM intrinsics that
# optimisation emits (llvm.usub.sat.i32). It has no Intel subgroups, so it
# runs the portable kernels: the generic ones (test_validation,
# test_copy_and_swap), the GPU-shaped decode variant, the tiled prefill
# kernel and the u8 rollback window with every check.
# The CPU-shaped decode variant runs without --uninitialized: oclgrind
# 21.10's uninitialized-value plugin mistakes shufflevector mask index 11
# for "undef" (it compares with llvm::Value::UndefValueVal, which is 11 in
# LLVM 14) and crashes on a real undef index, so the float16 swizzles
# (x.hi, x.s89ab) of that variant read as uninitialized or abort it.
grind_log=build/oclgrind.log
rm -f "$grind_log"
grind() { # name, test binary, test filter, VAR=value, oclgrind checks...
    name=$1 binary=$2 filter=$3 setting=$4
    shift 4
    env OCLGRIND_BUILD_OPTIONS=-cl-opt-disable PKV_TEST_FILTER="$filter" \
        $setting oclgrind "$@" --log "$grind_log.$name" \
        "build/tests/$binary"
    cat "$grind_log.$name" >>"$grind_log"
}
all_checks="--check-api --data-races --uninitialized"
grind validation test_opencl test_validation PKV_OPENCL_PREFILL=auto \
    $all_checks
grind copy_and_swap test_opencl test_copy_and_swap PKV_OPENCL_PREFILL=auto \
    $all_checks
grind decode_gpu test_opencl test_small_variants PKV_TEST_DECODE=gpu \
    $all_checks
grind decode_cpu test_opencl test_small_variants PKV_TEST_DECODE=cpu \
    --check-api --data-races
grind prefill_tiles test_opencl test_small_variants PKV_TEST_PREFILL=tiles \
    $all_checks
# The u8 seal writing a rollback window, through the engine.
grind u8_window test_speculative_opencl test_u8_window PKV_OPENCL_DECODE=gpu \
    $all_checks
# Per-layer windows through the engine, U8. Without --uninitialized: a step
# uploads only the block-table rows that changed, and oclgrind forgets what
# it knew of a buffer at a host write that covers part of it, so it reports
# the rows earlier steps wrote (with every row written every step: none).
grind windows test_windows_opencl test_mixed_windows_u8 \
    PKV_OPENCL_DECODE=gpu --check-api --data-races
if [ -s "$grind_log" ]; then
    echo "oclgrind reported (first 40 lines of $grind_log):"
    head -n 40 "$grind_log"
    exit 1
fi
echo "oclgrind: no reports"
pass "install; examples/minimal.c via find_package and pkg-config"
sh tests/check_install.sh build
pass "ABI against the committed baseline (tests/abi/libpkv.abi)"
sh tests/check_abi.sh build/libpkv.so

pass "AddressSanitizer + UndefinedBehaviorSanitizer build and tests"
# Intel's OpenCL runtime aborts ASan processes at platform enumeration (it
# dlopens with RTLD_DEEPBIND), so sanitized runs see PoCL only. The offline
# Intel kernel builds (label ocloc) ran in the normal pass already.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DPKV_WERROR=ON \
    -DPKV_SANITIZE=address,undefined
cmake --build build-asan -j "$JOBS"
# PoCL leaks while it compiles a program (tests/lsan.supp), and any test
# may reach PoCL: PKV_BACKEND_AUTO picks an OpenCL device when there is one.
OCL_ICD_VENDORS=$POCL_ICD \
    LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp \
    ctest --test-dir build-asan --output-on-failure -j "$JOBS" -LE ocloc

pass "ThreadSanitizer build (threads and redis labels: the connector's thread)"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DPKV_WERROR=ON \
    -DPKV_SANITIZE=thread -DPKV_BUILD_BENCH=OFF -DPKV_BUILD_EXAMPLES=OFF
cmake --build build-tsan -j "$JOBS"
OCL_ICD_VENDORS=$POCL_ICD \
    ctest --test-dir build-tsan --output-on-failure -L 'threads|redis'
