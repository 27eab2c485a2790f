# SPDX-License-Identifier: MIT
# Sourced by tests/check_ocloc.sh and tests/check_isa.sh: a cache of
# Intel offline compiler results, and a runner of builds side by side.
#
# An ocloc build takes seconds and the checks make hundreds, though their
# inputs rarely change. A build's result (check_ocloc: it built;
# isa_check: its dump summary) is kept in $PKV_CACHE/ocloc/<check>/
# (PKV_CACHE defaults to ~/.cache/pkv, where Intel's CPU runtime and the
# model live) under a key over everything that determines it: the program
# source exactly as compiled (after concatenation), the options, the
# device, the compiler's own bytes (ocloc and the IGC libraries it loads,
# so a new driver rebuilds everything) and, for isa_check, the program
# that summarises the dump. Only successful builds are kept: a build error
# is compiled again every run. The checks judge the summaries each run, so
# a cached summary can pass only where the same compile would.
# PKV_ISA_REBUILD=1 ignores what is cached (and writes it anew).
# Entries not used for 30 days are removed.

# ocloc_cache_init NAME: sets ocloc_cache_dir to the cache folder NAME
# (isa_check: check_isa.sh's summaries; ocloc_check: check_ocloc.sh's
# builds; the folders keep the names the checks had when they were made,
# so a rename of a script does not discard them), or leaves it empty (no
# caching, said on stdout) when the compiler's libraries are not found.
ocloc_cache_init() {
    ocloc_cache_dir=""
    libs=$(ldconfig -p 2>/dev/null |
        awk '/lib(ocloc|igdfcl|igc)\.so/ { print $NF }' | sort -u)
    if [ -z "$libs" ]; then
        echo "$1: the compiler's libraries (libocloc, libigc) were not" \
             "found by ldconfig: nothing is cached"
        return 0
    fi
    # shellcheck disable=SC2086 # one word a library
    ocloc_compiler_id=$(cat "$(command -v ocloc)" $libs | sha256sum |
        cut -d' ' -f1)
    root_cache=${PKV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pkv}
    ocloc_cache_dir=$root_cache/ocloc/$1
    mkdir -p "$ocloc_cache_dir" || { ocloc_cache_dir=""; return 0; }
    find "$ocloc_cache_dir" -type f -mtime +30 -delete 2>/dev/null
    return 0
}

# ocloc_hash FILE...: the sha256 of the files' bytes, in order.
ocloc_hash() {
    cat "$@" | sha256sum | cut -d' ' -f1
}

# ocloc_key SOURCE_HASH DEVICE OPTIONS [EXTRA]: a build's cache key.
ocloc_key() {
    printf '%s\n%s\n%s\n%s\n%s\n' "$ocloc_compiler_id" "$1" "$2" "$3" \
        "${4:-}" | sha256sum | cut -d' ' -f1
}

# ocloc_cache_get KEY OUT: copy the cached result to OUT; 0 when found.
ocloc_cache_get() {
    [ -n "$ocloc_cache_dir" ] && [ "${PKV_ISA_REBUILD:-0}" != 1 ] &&
        [ -f "$ocloc_cache_dir/$1" ] || return 1
    touch "$ocloc_cache_dir/$1" 2>/dev/null
    cp "$ocloc_cache_dir/$1" "$2"
}

# ocloc_cache_put KEY FILE: keep FILE as KEY's result (written whole, then
# renamed, so a reader beside it never sees half a file).
ocloc_cache_put() {
    [ -n "$ocloc_cache_dir" ] || return 0
    cp "$2" "$ocloc_cache_dir/$1.$$" 2>/dev/null &&
        mv -f "$ocloc_cache_dir/$1.$$" "$ocloc_cache_dir/$1"
}

# ocloc_note_built SOURCE_HASH DEVICE OPTIONS LOG: for another check
# that compiled a program check_ocloc compiles too (check_isa, which
# tests/run.sh runs first): its success remembered where and as
# check_ocloc would remember it, so that check_ocloc reads it and the
# program is compiled once. LOG is the compiler's output.
ocloc_note_built() {
    [ -n "$ocloc_cache_dir" ] || return 0
    ocloc_check_dir=${ocloc_cache_dir%/*}/ocloc_check
    mkdir -p "$ocloc_check_dir" || return 0
    note=$ocloc_check_dir/$(ocloc_key "$1" "$2" "$3")
    cp "$4" "$note.$$.tmp" 2>/dev/null && mv -f "$note.$$.tmp" "$note"
}

# ocloc_run_all LIST FUNCTION NAME: FUNCTION with each line of LIST as
# its argument, nproc at a time, the next starting as soon as one ends
# (builds take from a second to a minute: waiting for the slowest of each
# batch left a core idle). Each call records "read" or "built" in
# $tmp/how.<first word> (ocloc_counts sums them). While they run, a line
# on stderr says how many are done, at least every 20 s, so that a long
# first run shows where it is.
ocloc_run_all() {
    jobs=$(nproc)
    total=$(grep -c . "$1")
    echo "$3: $total builds, $jobs at a time" >&2
    # A job takes a slot from the fifo before it starts and gives it back
    # when it ends. A subshell around FUNCTION, so that whatever ends it
    # still gives the slot back.
    mkfifo "$tmp/slots"
    exec 3<>"$tmp/slots"
    i=0
    while [ "$i" -lt "$jobs" ]; do
        echo >&3
        i=$((i + 1))
    done
    ocloc_ticker "$3" "$total" &
    ticker=$!
    i=0
    while read -r line; do
        read -r _ <&3
        i=$((i + 1))
        { ("$2" "$line"); : >"$tmp/done.$i"; echo >&3; } &
    done <"$1"
    # Every slot back: every job has ended.
    i=0
    while [ "$i" -lt "$jobs" ]; do
        read -r _ <&3
        i=$((i + 1))
    done
    exec 3<&-
    kill "$ticker"
    wait
    ocloc_progress "$3" "$total" >&2
}

# ocloc_ticker NAME TOTAL: ocloc_progress every 20 s until killed (the
# sleep killed with it), or until the check itself is gone ($$ is its
# process in a subshell too).
ocloc_ticker() {
    trap 'kill "$nap" 2>/dev/null; exit 0' TERM
    while kill -0 "$$" 2>/dev/null; do
        sleep 20 &
        nap=$!
        wait "$nap"
        ocloc_progress "$1" "$2" >&2
    done
}

# ocloc_progress NAME TOTAL: "NAME: D of TOTAL builds done (R read from
# the cache, C compiled), S s".
ocloc_progress() {
    done_n=$(find "$tmp" -maxdepth 1 -name 'done.*' | wc -l)
    # A read takes milliseconds: counted done as soon as it is recorded.
    read_n=$(cat "$tmp"/how.* 2>/dev/null | grep -c read)
    built_n=$((done_n - read_n))
    [ "$built_n" -ge 0 ] || built_n=0
    echo "$1: $done_n of $2 builds done ($read_n read from the cache," \
         "$built_n compiled), $(($(date +%s) - start)) s"
}

# ocloc_counts: "N built, M read from the cache (DIR)".
ocloc_counts() {
    built=$(cat "$tmp"/how.* 2>/dev/null | grep -c built)
    read_n=$(cat "$tmp"/how.* 2>/dev/null | grep -c read)
    if [ -n "$ocloc_cache_dir" ]; then
        echo "$built built, $read_n read from the cache ($ocloc_cache_dir)"
    else
        echo "$built built, no cache"
    fi
}

# ocloc_dump DIR FILE DEVICE OPTIONS: compile FILE for DEVICE with its GEN
# assembly dumped into DIR (the compiler's output in DIR/log); 0 when it
# built.
ocloc_dump() {
    mkdir -p "$1"
    IGC_ShaderDumpEnable=1 IGC_DumpLLVMIR=0 IGC_DumpToCustomDir=$1 \
        ocloc compile -q -file "$2" -device "$3" -options "$4" \
        -output_no_suffix -output "$1/out" >"$1/log" 2>&1
}

# ocloc_shipped DIR: the .asm dumps in DIR that ship, one a line: for a
# kernel IGC retried at another width, the retry's ("_1_" in the name).
ocloc_shipped() {
    for asm in "$1"/*.asm; do
        case "$asm" in
        *_1_simd*) ;;
        *) ls "$1"/*_1_simd*_entry_"${asm##*_entry_}" >/dev/null 2>&1 &&
            continue ;;
        esac
        echo "$asm"
    done
}

# ocloc_intel_pairs HEAD_DIM GROUP QUANTIZED_CHANNEL_VALUES: the channel
# pairs a lane the intel decode variant is built with, as
# pkv__decode_intel_pairs (src/opencl/features.c) picks them.
ocloc_intel_pairs() { # head_dim group quantized_channel_values
    per=$((2 * $2 + 4 * $3))
    if [ $(($1 % 64)) -eq 0 ] && [ $((2 * per)) -le 16 ]; then
        echo 2
    else
        echo 1
    fi
}

# ocloc_decode_split GROUP: the work-groups a kv head's GROUP query heads
# are split among in the GPU and intel decode variants, as
# pkv__decode_split (src/opencl/features.c) picks them: GROUP / its
# largest divisor up to 8.
ocloc_decode_split() { # group
    h=$1
    [ "$h" -gt 8 ] && h=8
    while [ "$h" -gt 1 ] && [ $(($1 % h)) -ne 0 ]; do
        h=$((h - 1))
    done
    echo $(($1 / h))
}

# ocloc_gpu_shape HEAD_DIM HEADS: "chunks tokens" of the GPU decode
# variant on an Intel GPU with HEADS query heads a work-group, as
# pkv__decode_gpu_shape_make (src/opencl/features.c) makes them: at most 8
# float4 accumulators a lane, about 64 lanes.
ocloc_gpu_shape() { # head_dim heads
    if [ $((4 * $2)) -le 8 ] && [ $(($1 % 16)) -eq 0 ]; then
        c=4
    elif [ $((2 * $2)) -le 8 ] && [ $(($1 % 8)) -eq 0 ]; then
        c=2
    else
        c=1
    fi
    rl=$(($1 / (4 * c)))
    if [ "$rl" -ge 64 ]; then
        echo "$c 1"
    else
        echo "$c $((64 / rl))"
    fi
}

# ocloc_generic_source ROOT OUT: the generic program as the backend builds
# it (src/opencl/program.c): CMakeLists.txt's PKV_KERNEL_FILES in order,
# but for the decode and intel prefill files, programs of their own built
# with -D geometry.
ocloc_generic_source() {
    : >"$2"
    for f in $(sed -n '/^set(PKV_KERNEL_FILES/,/)/p' "$1/CMakeLists.txt" |
        sed 's/set(PKV_KERNEL_FILES//; s/)//'); do
        case "$f" in *decode*.cl | *prefill_intel.cl) continue ;; esac
        cat "$1/$f" >>"$2"
        echo >>"$2"
    done
}
