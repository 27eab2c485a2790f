#!/bin/sh
# SPDX-License-Identifier: MIT
# Set up and run every test, in passes: a normal build and its tests (the
# OpenCL ones on PoCL, then again on Intel's OpenCL runtime; Intel's
# offline GPU compiler checks; the Gemma 3 host against its references;
# the small kernel tests under the oclgrind simulator; install and ABI
# checks), then builds under AddressSanitizer + UndefinedBehaviorSanitizer
# and ThreadSanitizer.
# Usage: sh tests/run.sh  (from the repo root)
#
# Two sets (README.md says what each runs and how long it takes):
# - the default: the Intel GPU compiler checks with --quick (the kernels
#   pkv picks on an Intel GPU at head_dim 128 and 256, at each other
#   code path's geometry and at the served models', for tgllp and
#   dg2-g10) and the kernel tests
#   under oclgrind over their quick subsets (PKV_TEST_QUICK: every
#   kernel variant and dtype, windows, partitions, each split group);
# - PKV_TEST_FULL=1 (.ci/run sets it, so CI runs every check): the whole
#   compiler grid (adl-p too) and every oclgrind case.
# Everything else runs in both.
#
# Every pass runs, also after another failed (those that need the normal
# build are skipped when it failed, saying so); each says as it starts
# how long it takes, and the summary at the end lists each pass's result
# and time; the exit status is 1 when any pass failed. Passes that cannot
# keep both cores busy run beside the others: their output goes to
# build/logs/ and is printed when they end. A busy machine makes tests
# slower, never failed: ctest's timeouts only catch a hang, and
# PKV_TEST_TIMEOUT_SCALE (a whole number) multiplies them
# (cmake/timeouts). The Intel GPU compiler checks remember their results
# in ~/.cache/pkv/ocloc (tests/ocloc_lib.sh; PKV_ISA_REBUILD=1 builds them
# anew) and say how many builds are done every 15 s.
set -u
cd "$(dirname "$0")/.."
run_start=$(date +%s)
if ! sh tests/deps.sh; then
    echo "tests/run.sh: the set-up (tests/deps.sh) failed: no test ran"
    exit 1
fi
JOBS=$(nproc)
FULL=${PKV_TEST_FULL:-0}
case "$FULL" in
0) echo "tests/run.sh: the default set (PKV_TEST_FULL=1 runs every" \
        "check, as CI does: README.md)" ;;
1) echo "tests/run.sh: every check (PKV_TEST_FULL=1)" ;;
*) echo "tests/run.sh: PKV_TEST_FULL is 0 or 1, not $FULL" >&2; exit 2 ;;
esac
PKV_CACHE=${PKV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pkv}
POCL_ICD=/etc/OpenCL/vendors/pocl.icd
INTEL_ICD=$PKV_CACHE/intel-icd
MODEL=$PKV_CACHE/gemma3
SMOLLM2=$PKV_CACHE/smollm2
LOGS=build/logs
results=$(mktemp)
trap 'rm -f "$results" "$results".*' EXIT

# run_pass NAME FUNCTION EXPECTED: FUNCTION in a subshell that stops at
# its first failing command; its result, time and CPU time (user + system
# of every process it ran: what another load on the machine does not
# change) go to the summary. EXPECTED, said as it starts, is how long it
# took on a 2-core machine (README.md has the runs). Never call it as a
# condition: the shell would then ignore set -e inside it.
run_pass() {
    echo "== $1 ($3)"
    t0=$(date +%s)
    (
        (
            set -e
            "$2"
        )
        rc=$?
        cpu_mark "$results.$2"
        exit "$rc"
    )
    rc=$?
    if [ "$rc" -eq 0 ]; then r=ok; else r=FAILED; fi
    printf '%s|%s|%s|%s\n' "$1" "$r" $(($(date +%s) - t0)) \
        "$(cat "$results.$2")" >>"$results"
    return "$rc"
}

# cpu_mark FILE: the user + system seconds of the processes this shell
# has run so far, into FILE. times gives them (its second line, as
# "1m2.5s 0m3.1s"); it must run in this shell: in a pipe or a $(...) it
# would count a new process's, none.
cpu_mark() {
    times >"$1.times"
    awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/)
        printf "%d\n", u[1] * 60 + u[2] + s[1] * 60 + s[2] + 0.5 }' \
        "$1.times" >"$1"
}

# run_beside NAME FUNCTION EXPECTED: run_pass in the background, its
# output into $LOGS/FUNCTION.log; wait_beside prints it when it ends.
beside=""
run_beside() {
    mkdir -p "$LOGS"
    echo "== $1 ($3): runs beside the next passes (output: $LOGS/$2.log)"
    run_pass "$1" "$2" "$3" >"$LOGS/$2.log" 2>&1 &
    beside="$beside $!:$2"
}
wait_beside() {
    for job in $beside; do
        wait "${job%%:*}"
        echo
        cat "$LOGS/${job#*:}.log"
    done
    beside=""
}

skip() { # NAME WHY
    echo "== $1: skipped, $2"
    printf '%s|skipped|-|-\n' "$1" >>"$results"
}

# The models, the venvs of their checks and ggml, which
# examples/gguf/setup.sh (run by tests/deps.sh) caches; the host is
# built only when CMake found ggml (and PCRE2).
model_cached() {
    [ -f "$MODEL/gemma-3-270m-q4_k_m.gguf" ] &&
        [ -x "$MODEL/venv/bin/python" ] &&
        [ -f "$PKV_CACHE/ggml/install/pkv-ggml.txt" ] &&
        [ -x build/examples/pkv-gguf ]
}
smollm2_cached() {
    [ -f "$SMOLLM2/SmolLM2-135M-Instruct.Q4_1.gguf" ] &&
        [ -f "$SMOLLM2/SmolLM2-135M-Instruct.f32.gguf" ] &&
        [ -x "$SMOLLM2/venv/bin/python" ] &&
        [ -f "$PKV_CACHE/ggml/install/pkv-ggml.txt" ] &&
        [ -x build/examples/pkv-gguf ]
}

normal_build() {
    cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPKV_WERROR=ON
    cmake --build build -j "$JOBS"
}

normal_tests() {
    # The default device is PoCL here: the machine has no GPU. The Intel
    # GPU compiler checks (label ocloc) are a pass of their own.
    OCL_ICD_VENDORS=$POCL_ICD ctest --test-dir build --output-on-failure \
        -j "$JOBS" -LE ocloc
}

# Intel's offline GPU compiler (the ctest tests of label ocloc, run here
# rather than by ctest so that their progress shows: each says how many
# builds are done every 15 s): what pkv picks on an Intel GPU
# free of spills and private memory (check_isa.sh), every kernel file
# built (check_ocloc.sh), the DG2 matrix-engine prefill kernel
# (check_dpas.sh). check_isa first: the builds check_ocloc shares with it
# are then read from the cache, not compiled again. Their lines go to
# $LOGS, printed whole when a check fails.
ocloc_checks() {
    mkdir -p "$LOGS"
    scope=--quick
    [ "$FULL" = 1 ] && scope=""
    failed=0
    for check in isa ocloc dpas; do
        # shellcheck disable=SC2086 # no word or one
        if sh "tests/check_$check.sh" . $scope >"$LOGS/check_$check.log"
        then
            tail -n 1 "$LOGS/check_$check.log"
        else
            failed=1
            cat "$LOGS/check_$check.log"
        fi
    done
    [ "$failed" -eq 0 ]
}

intel_tests() {
    OCL_ICD_VENDORS=$INTEL_ICD LD_LIBRARY_PATH=$PKV_CACHE/intel-opencl/lib \
        ctest --test-dir build --output-on-failure -L opencl -j "$JOBS"
}

gemma3_tests() {
    gguf=$MODEL/gemma-3-270m-q4_k_m.gguf
    "$MODEL/venv/bin/python" tests/gemma3/check_tokenizer.py "$gguf" \
        build/examples/gguf-tokenize
    OCL_ICD_VENDORS=$POCL_ICD "$MODEL/venv/bin/python" \
        tests/check_reference.py gemma3 "$gguf" build/examples/pkv-gguf \
        build/examples/gguf-tokenize cpu opencl
}

smollm2_tests() {
    gguf=$SMOLLM2/SmolLM2-135M-Instruct.Q4_1.gguf
    "$SMOLLM2/venv/bin/python" tests/smollm2/check_tokenizer.py "$gguf" \
        build/examples/gguf-tokenize
    OCL_ICD_VENDORS=$POCL_ICD "$SMOLLM2/venv/bin/python" \
        tests/check_reference.py smollm2 "$gguf" build/examples/pkv-gguf \
        build/examples/gguf-tokenize \
        --f32 "$SMOLLM2/SmolLM2-135M-Instruct.f32.gguf" cpu opencl
}

# The small kernel tests under oclgrind, any report failing the pass.
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
grind() { # name, test binary, test filter, VAR=value, oclgrind checks...
    name=$1 binary=$2 filter=$3 setting=$4
    shift 4
    t0=$(date +%s)
    cpu_mark "$results.$name.0"
    env OCLGRIND_BUILD_OPTIONS=-cl-opt-disable PKV_TEST_FILTER="$filter" \
        PKV_TEST_QUICK=$((1 - FULL)) $setting oclgrind "$@" \
        --log "$LOGS/oclgrind.$name" \
        "build/tests/$binary" >"$LOGS/oclgrind.$name.out" 2>&1 ||
        echo "oclgrind: $name exited $?" >>"$LOGS/oclgrind.$name"
    cpu_mark "$results.$name.1"
    echo "oclgrind: $name $(($(date +%s) - t0))s (CPU" \
        "$(($(cat "$results.$name.1") - $(cat "$results.$name.0")))s)"
}
oclgrind_tests() {
    all_checks="--check-api --data-races --uninitialized"
    rm -f "$LOGS"/oclgrind.*
    # Two lanes of about equal time (idle: about 350 s each), so that the
    # pass keeps both cores once the passes beside it have ended.
    (
        grind prefill_tiles test_opencl test_small_variants \
            PKV_TEST_PREFILL=tiles $all_checks
        grind copy_and_swap test_opencl test_copy_and_swap \
            PKV_OPENCL_PREFILL=auto $all_checks
        grind decode_cpu test_opencl test_small_variants \
            PKV_TEST_DECODE=cpu --check-api --data-races
        grind validation test_opencl test_validation \
            PKV_OPENCL_PREFILL=auto $all_checks
    ) &
    lane=$!
    grind decode_gpu test_opencl test_small_variants PKV_TEST_DECODE=gpu \
        $all_checks
    # The u8 freeze writing a rollback window, through the engine.
    grind u8_window test_speculative_opencl test_u8_window \
        PKV_OPENCL_DECODE=gpu $all_checks
    # Per-layer windows through the engine, U8. Without --uninitialized: a
    # step uploads only the block-table rows that changed, and oclgrind
    # forgets what it knew of a buffer at a host write that covers part of
    # it, so it reports the rows earlier steps wrote (with every row
    # written every step: none).
    grind windows test_windows_opencl test_mixed_windows_u8 \
        PKV_OPENCL_DECODE=gpu --check-api --data-races
    wait "$lane"
    reports=0
    for log in "$LOGS"/oclgrind.*; do
        case "$log" in *.out) continue ;; esac
        [ -s "$log" ] || continue
        reports=1
        echo "oclgrind reported, ${log#"$LOGS"/oclgrind.} (first 40 lines" \
             "of $log; the test's output: $log.out):"
        head -n 40 "$log"
    done
    [ "$reports" -eq 0 ]
    echo "oclgrind: no reports"
}

install_check() {
    sh tests/check_install.sh build
}

abi_check() {
    sh tests/check_abi.sh build/libpkv.so
}

asan_tests() {
    # Intel's OpenCL runtime aborts ASan processes at platform enumeration
    # (it dlopens with RTLD_DEEPBIND), so sanitized runs see PoCL only. The
    # offline Intel kernel builds (label ocloc) ran in the normal pass.
    # Debug keeps the library's invariant checks trapping; -O1 is the
    # sanitizers' own advice for speed (about twice -O0's) and keeps every
    # check.
    cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DPKV_WERROR=ON \
        -DCMAKE_C_FLAGS_DEBUG="-g -O1" -DCMAKE_CXX_FLAGS_DEBUG="-g -O1" \
        -DPKV_SANITIZE=address,undefined
    cmake --build build-asan -j "$JOBS"
    # PoCL leaks while it compiles a program (tests/lsan.supp), and any test
    # may reach PoCL: PKV_BACKEND_KIND_AUTO picks an OpenCL device when there is
    # one.
    # pkv-server's and pkv-router's tests (label serving) run here too,
    # the programs they start sanitized: the request parser and stream
    # writer, KV events, the router's event reader, a fleet with its
    # Redis store (tests/sanitizer_reports.sh collects every report).
    # A test that fails is run once more: on a loaded machine LeakSanitizer
    # itself sometimes crashes in its exit-time check while PoCL's threads
    # come and go ("Tracer caught signal 11", after every test passed). A
    # leak or an error is found again by the second run; the first run's
    # output stays in the log.
    OCL_ICD_VENDORS=$POCL_ICD \
        LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp \
        ctest --test-dir build-asan --output-on-failure -j "$JOBS" -LE ocloc \
        --repeat until-pass:2
    if model_cached; then
        # The tokenizers against their references again under the
        # sanitizers: invalid UTF-8 and seeded random bytes.
        gguf=$MODEL/gemma-3-270m-q4_k_m.gguf
        "$MODEL/venv/bin/python" tests/gemma3/check_tokenizer.py "$gguf" \
            build-asan/examples/gguf-tokenize
    fi
    if smollm2_cached; then
        "$SMOLLM2/venv/bin/python" tests/smollm2/check_tokenizer.py \
            "$SMOLLM2/SmolLM2-135M-Instruct.Q4_1.gguf" \
            build-asan/examples/gguf-tokenize
    fi
}

# The threaded code: the engine's threads, the Redis connector, and
# pkv-server's and pkv-router's threads (HTTP, the step loop, the KV
# events' publisher and replay, the router's event subscribers; label
# serving), the model on one thread there (examples/CMakeLists.txt says
# why). libzmq is not instrumented: tests/tsan.supp. Not
# server_kv_events (90 s here): its threads are the fleet's servers'
# (router_fleet: events published, replayed to a restarted router), and
# what it adds, the events' contents, is one thread's code, checked in
# the ASan+UBSan pass.
tsan_tests() {
    cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DPKV_WERROR=ON \
        -DCMAKE_C_FLAGS_DEBUG="-g -O1" -DCMAKE_CXX_FLAGS_DEBUG="-g -O1" \
        -DPKV_SANITIZE=thread -DPKV_BUILD_BENCH=OFF
    cmake --build build-tsan -j "$JOBS"
    OCL_ICD_VENDORS=$POCL_ICD \
        TSAN_OPTIONS=suppressions=$PWD/tests/tsan.supp \
        ctest --test-dir build-tsan --output-on-failure -j "$JOBS" \
        -L 'threads|redis|serving' -E server_kv_events
}

# How long each pass took (EXPECTED above), from the runs README.md
# gives: the default set and PKV_TEST_FULL=1's where they differ, the
# first run (nothing cached) and the next.
if [ "$FULL" = 1 ]; then
    t_ocloc="about 10 min the first time, 30 s once cached"
    t_grind="about 15 min"
else
    t_ocloc="about 4 min the first time, 15 s once cached"
    t_grind="about 7 min"
fi
run_pass "normal build" normal_build "about 2 min"
built=$?
if [ "$built" -eq 0 ]; then
    # oclgrind interprets kernels on few threads: it runs beside the rest.
    run_beside "oclgrind: kernel tests at small shapes, any report fails" \
        oclgrind_tests "$t_grind"
fi
# Sources only: they run whether or not the build did.
if command -v ocloc >/dev/null 2>&1; then
    run_pass "Intel GPU compiler (ocloc): spills, private memory, builds" \
        ocloc_checks "$t_ocloc"
else
    skip "Intel GPU compiler (ocloc): spills, private memory, builds" \
        "ocloc is not installed (Debian package intel-opencl-icd)"
fi
if [ "$built" -eq 0 ]; then
    run_pass "normal tests (OpenCL on PoCL)" normal_tests "about 4 min"
    if [ -f "$INTEL_ICD/intel-cpu.icd" ]; then
        run_pass "OpenCL tests on Intel's OpenCL runtime for CPUs" \
            intel_tests "about 5 min"
    else
        skip "OpenCL tests on Intel's OpenCL runtime for CPUs" \
            "the runtime is not installed (PKV_NO_INTEL_RUNTIME)"
    fi
    if model_cached; then
        run_pass "Gemma 3 270M on ggml: tokenizer vs SentencePiece, host vs numpy" \
            gemma3_tests "about 1 min"
    else
        skip "Gemma 3 270M on ggml: tokenizer vs SentencePiece, host vs numpy" \
            "the model or ggml is not cached (offline, or PKV_NO_MODEL=1)"
    fi
    if smollm2_cached; then
        run_pass "SmolLM2-135M on ggml: tokenizer vs tokenizers, host vs numpy, CPU vs OpenCL" \
            smollm2_tests "about 3 min"
    else
        skip "SmolLM2-135M on ggml: tokenizer vs tokenizers, host vs numpy, CPU vs OpenCL" \
            "the model or ggml is not cached (offline, or PKV_NO_MODEL=1)"
    fi
    run_pass "install; examples/minimal.c via find_package and pkg-config" \
        install_check "under a minute"
    run_pass "ABI against the committed baseline (tests/abi/libpkv.abi)" \
        abi_check "under a minute"
else
    on_build="tests, Intel's runtime, Gemma 3, oclgrind, install, ABI"
    skip "the passes on the normal build ($on_build)" "it failed"
fi
run_pass "AddressSanitizer + UndefinedBehaviorSanitizer build and tests" \
    asan_tests "about 5 min"
run_pass "ThreadSanitizer build (threads, redis and serving labels)" tsan_tests \
    "about 2 min"
wait_beside

echo
echo "== summary"
printf '%-66s %-8s %6s %6s\n' pass result time CPU
failed=0
cpu=0
while IFS='|' read -r name result seconds cpu_s; do
    printf '%-66s %-8s %6s %6s\n' "$name" "$result" \
        "$([ "$seconds" = - ] || echo "${seconds}s")" \
        "$([ "$cpu_s" = - ] || echo "${cpu_s}s")"
    [ "$result" = FAILED ] && failed=$((failed + 1))
    [ "$cpu_s" = - ] || cpu=$((cpu + cpu_s))
done <"$results"
echo "total: $(($(date +%s) - run_start))s (CPU ${cpu}s in the passes)," \
     "$failed failed pass(es)"
[ "$failed" -eq 0 ]
