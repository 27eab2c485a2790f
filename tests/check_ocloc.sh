#!/bin/sh
# SPDX-License-Identifier: MIT
# Compile every OpenCL kernel file with Intel's offline compiler for real
# Intel GPUs (tgllp, adl-p, dg2-g10), with the Intel fast paths enabled
# (-cl-std=CL2.0 -DPKV_INTEL_SUBGROUPS) and without them (-cl-std=CL1.2),
# after the options the backend gives every program on these GPUs,
# failing on any build error. (tests/check_isa.sh reads what the compiler
# made of the kernels pkv picks on Intel GPUs.)
#
# Usage: sh tests/check_ocloc.sh SOURCE_DIR [--quick] [PROGRAM_FILE...]
#   --quick   tgllp and dg2-g10 only (adl-p is Xe-LP as tgllp is; the
#             default of tests/run.sh, as check_isa.sh --quick)
#   PROGRAM_FILEs (relative to SOURCE_DIR) are the files the backend
#   embeds (CMake's PKV_KERNEL_FILES, read from SOURCE_DIR/CMakeLists.txt
#   when none are given); all but the decode and intel prefill kernels
#   are concatenated, in order, into the generic program, as the backend
#   does. The intel prefill program is src/kv_layout.h, src/kv_step.h,
#   tensor_io.cl and prefill_intel.cl, with its -D geometry. The decode
#   programs are src/kv_layout.h, tensor_io.cl, decode_common.cl, then
#   paged_decode.cl, decode_gpu.cl or decode_intel.cl, with their -D
#   geometry (as the backend builds them), and paged_decode.cl and
#   decode_intel.cl once more with -DPKV_DECODE_CONTIGUOUS (pkv-bench's
#   baseline). The DPAS prefill program (src/opencl/program.c) with its
#   emulated builtin. Any other
#   kernels/*.cl is compiled alone after src/kv_layout.h. Exit 77 (ctest:
#   skipped) when ocloc is not installed.
# Builds run side by side, and a build that succeeded is remembered
# (tests/ocloc_lib.sh: keyed by the exact source, options, device and
# compiler; PKV_ISA_REBUILD=1 builds every one), also one that
# tests/check_isa.sh made (the same program, device and options: read
# here, not compiled again); the last line says how many were built and
# how many read.
set -u
root=$1
shift
devices="tgllp adl-p dg2-g10"
if [ "${1:-}" = --quick ]; then
    devices="tgllp dg2-g10"
    shift
fi
if [ $# -eq 0 ]; then
    set -- $(sed -n '/^set(PKV_KERNEL_FILES/,/)/p' "$root/CMakeLists.txt" |
        sed 's/set(PKV_KERNEL_FILES//; s/)//')
fi
if ! command -v ocloc >/dev/null 2>&1; then
    echo "check_ocloc: SKIPPED: Intel's offline compiler 'ocloc' is not" \
         "installed (Debian package intel-opencl-icd); the Intel kernel" \
         "builds were not checked"
    exit 77
fi
. "$root/tests/ocloc_lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
ocloc_cache_init ocloc_check
# What a build with "-I" may include: all of it keys such builds.
includes_id=$(ocloc_hash "$root"/src/*.h "$root"/kernels/*.cl)

# build NAME FILE OPTIONS: one build per device, a line each in
# $tmp/builds (id|device|file|name|options) for build_one.
n=0
: >"$tmp/builds"
build() {
    for dev in $devices; do
        n=$((n + 1))
        printf '%s|%s|%s|%s|%s\n' "$n" "$dev" "$2" "$1" "$3" >>"$tmp/builds"
    done
}

build_one() { # a builds line
    line=$1
    id=${line%%|*} line=${line#*|}
    dev=${line%%|*} line=${line#*|}
    file=${line%%|*} line=${line#*|}
    name=${line%%|*} opts=${line#*|}
    # The include options name this tree's directories: the key has SRC in
    # their place (matched as a string: a path is no pattern, and "."
    # would be one that matches every character), so another clone of the
    # same sources reads the same entries; what they may include keys it.
    kopts=$opts extra=""
    case "$opts" in
    *"$inc"*)
        kopts="${opts%%"$inc"*}-I SRC/src -I SRC/kernels${opts#*"$inc"}"
        extra=$includes_id
        ;;
    esac
    key=$(ocloc_key "$(ocloc_hash "$file")" "$dev" "$kopts" "$extra")
    t0=$(date +%s.%N)
    if ocloc_cache_get "$key" "$tmp/log.$id"; then
        echo read >"$tmp/how.$id"
        status=ok
        took=cached
    else
        echo built >"$tmp/how.$id"
        if ocloc compile -q -file "$file" -device "$dev" -options "$opts" \
            -output_no_suffix -output "$tmp/bin.$id" >"$tmp/log.$id" 2>&1
        then
            status=ok
            ocloc_cache_put "$key" "$tmp/log.$id"
        else
            status=FAILED
        fi
        rm -f "$tmp/bin.$id"*
        took=$(printf '%.1fs' "$(echo "$(date +%s.%N) - $t0" | bc)")
    fi
    {
        printf '%-6s %-7s %6s  %s [%s]\n' "$status" "$dev" "$took" "$name" \
            "$opts"
        [ "$status" = ok ] || sed 's/^/    /' "$tmp/log.$id"
    } >"$tmp/out.$id"
}

# The options the backend builds with on these GPUs (src/opencl/program.c:
# f32 division and square roots correctly rounded), then the program's
# own, in the order tests/check_isa.sh gives them: a build that both
# checks make is one build, compiled once (ocloc_note_built).
plain="-cl-std=CL1.2 -cl-fp32-correctly-rounded-divide-sqrt"
intel="$plain -cl-std=CL2.0 -DPKV_INTEL_SUBGROUPS"
inc="-I $root/src -I $root/kernels"

# The backend's main program, concatenated as the backend does.
covered=" "
if [ $# -gt 0 ]; then
    : >"$tmp/program.cl"
    for f in "$@"; do
        case "$f" in *decode*.cl | *prefill_intel.cl) continue ;; esac
        cat "$root/$f" >>"$tmp/program.cl"
        echo >>"$tmp/program.cl"
        names="${names:-}$f "
        covered="$covered$(basename "$f") "
    done
    build "program: ${names:-}" "$tmp/program.cl" "$plain"
    build "program: ${names:-}" "$tmp/program.cl" "$intel"
fi

# The decode kernels: every dtype; u8 and u4 with both quantization
# groupings; u8 keys with u4 values.
decode_src() { # variant file -> the program source
    cat "$root/src/kv_layout.h" "$root/kernels/tensor_io.cl" \
        "$root/kernels/decode_common.cl" "$root/kernels/$1"
}
decode_src paged_decode.cl >"$tmp/decode.cl"
decode_src decode_gpu.cl >"$tmp/decode_gpu.cl"
decode_src decode_intel.cl >"$tmp/decode_intel.cl"
cat "$root/src/kv_layout.h" "$root/src/kv_step.h" \
    "$root/kernels/tensor_io.cl" "$root/kernels/prefill_intel.cl" \
    >"$tmp/prefill_intel.cl"
geom="-DPKV_HEAD_DIM=128 -DPKV_BLOCK_SIZE=16 -DPKV_GROUP=4"
ishape="-DPKV_INTEL_PARTITION=256 -DPKV_INTEL_PAIRS"
gpu="-DPKV_GPU_CHUNKS=4 -DPKV_GPU_TOKENS=8 -DPKV_GPU_PARTITION=256"
# f32 and f16 ignore the quantization options (decode_common.cl): they
# get check_isa's.
for variant in "0 1 1" "1 1 1" "2 1 2" "2 2 1" "3 1 2" "3 2 1" "4 1 2"; do
    set -- $variant
    d="$geom -DPKV_KV_DTYPE=$1 -DPKV_KEY_QUANT=$2 -DPKV_VALUE_QUANT=$3 -DPKV_U4_GROUP=32"
    build paged_decode.cl "$tmp/decode.cl" "$plain $d"
    # The pairs the backend picks: per-channel quantized values take one.
    qch=0
    [ "$1" -ge 2 ] && [ "$3" = 1 ] && qch=1
    np=$(ocloc_intel_pairs 128 4 "$qch")
    build decode_intel.cl "$tmp/decode_intel.cl" \
        "$intel -DPKV_INTEL_PAIRS=$np -DPKV_INTEL_PARTITION=256 $d"
    build decode_gpu.cl "$tmp/decode_gpu.cl" "$plain $d $gpu"
    build prefill_intel.cl "$tmp/prefill_intel.cl" \
        "$plain -cl-std=CL2.0 -DPKV_PREFILL_ROWS=2 -DPKV_PREFILL_CHUNK=16 $d"
done
# Another geometry.
build decode_intel.cl "$tmp/decode_intel.cl" \
    "$intel $ishape=1 -DPKV_HEAD_DIM=64 -DPKV_BLOCK_SIZE=32 -DPKV_GROUP=8 -DPKV_KV_DTYPE=2 -DPKV_KEY_QUANT=1 -DPKV_VALUE_QUANT=2 -DPKV_U4_GROUP=32"
build decode_intel.cl "$tmp/decode_intel.cl" \
    "$intel $ishape=1 -DPKV_HEAD_DIM=96 -DPKV_BLOCK_SIZE=32 -DPKV_GROUP=8 -DPKV_KV_DTYPE=3 -DPKV_KEY_QUANT=2 -DPKV_VALUE_QUANT=1 -DPKV_U4_GROUP=8"
build decode_gpu.cl "$tmp/decode_gpu.cl" \
    "$plain -DPKV_HEAD_DIM=96 -DPKV_BLOCK_SIZE=8 -DPKV_GROUP=8 -DPKV_KV_DTYPE=2 -DPKV_KEY_QUANT=2 -DPKV_VALUE_QUANT=1 -DPKV_U4_GROUP=32 -DPKV_GPU_CHUNKS=1 -DPKV_GPU_TOKENS=2 -DPKV_GPU_PARTITION=256"
# More than 8 query heads a kv head: split among work-groups.
build decode_intel.cl "$tmp/decode_intel.cl" \
    "$intel $ishape=1 -DPKV_HEAD_DIM=128 -DPKV_BLOCK_SIZE=4 -DPKV_GROUP=32 -DPKV_GROUP_SPLIT=4 -DPKV_KV_DTYPE=3 -DPKV_KEY_QUANT=1 -DPKV_VALUE_QUANT=2 -DPKV_U4_GROUP=32"
build decode_gpu.cl "$tmp/decode_gpu.cl" \
    "$plain -DPKV_HEAD_DIM=80 -DPKV_BLOCK_SIZE=1 -DPKV_GROUP=12 -DPKV_GROUP_SPLIT=2 -DPKV_KV_DTYPE=4 -DPKV_KEY_QUANT=1 -DPKV_VALUE_QUANT=2 -DPKV_U4_GROUP=80 -DPKV_GPU_CHUNKS=1 -DPKV_GPU_TOKENS=3 -DPKV_GPU_PARTITION=256"
d="$geom -DPKV_KV_DTYPE=2 -DPKV_KEY_QUANT=1 -DPKV_VALUE_QUANT=2 -DPKV_U4_GROUP=32"
build "paged_decode.cl (contiguous)" "$tmp/decode.cl" \
    "$plain -DPKV_DECODE_CONTIGUOUS $d"
build "decode_intel.cl (contiguous)" "$tmp/decode_intel.cl" \
    "$intel $ishape=2 -DPKV_DECODE_CONTIGUOUS $d"
covered="$covered decode_common.cl paged_decode.cl decode_gpu.cl decode_intel.cl "
covered="$covered prefill_intel.cl "

# The DPAS prefill program (src/opencl/program.c) with the emulated
# builtin: no offline build defines the extension's macro, and these
# devices but dg2-g10 lack the instruction; tests/check_dpas.sh builds the
# matrix-engine one for dg2-g10.
cat "$root/src/kv_layout.h" "$root/src/kv_step.h" \
    "$root/kernels/pkv_common.cl" "$root/kernels/tensor_io.cl" \
    "$root/kernels/paged_attention.cl" "$root/kernels/dpas_emulation.cl" \
    "$root/kernels/prefill_dpas.cl" >"$tmp/prefill_dpas.cl"
dpas_opts="$plain -cl-std=CL2.0 $geom -DPKV_KV_DTYPE=2 -DPKV_KEY_QUANT=1"
build "prefill_dpas.cl (emulated)" "$tmp/prefill_dpas.cl" \
    "$dpas_opts -DPKV_VALUE_QUANT=2 -DPKV_U4_GROUP=32"
covered="$covered dpas_emulation.cl prefill_dpas.cl "

# Any other kernel file, alone after kv_layout.h.
for f in "$root"/kernels/*.cl; do
    base=$(basename "$f")
    case "$covered" in *" $base "*) continue ;; esac
    cat "$root/src/kv_layout.h" "$f" >"$tmp/alone.$base"
    build "$base (alone)" "$tmp/alone.$base" "$plain $inc"
    build "$base (alone)" "$tmp/alone.$base" "$intel $inc"
done

# The builds were only listed: they run now, side by side.
ocloc_run_all "$tmp/builds" build_one check_ocloc
fails=0
for i in $(seq 1 "$n"); do
    cat "$tmp/out.$i"
    grep -q "^FAILED" "$tmp/out.$i" && fails=$((fails + 1))
done
echo "check_ocloc: $n builds ($(ocloc_counts)), $fails failed," \
    "$(($(date +%s) - start))s"
[ "$fails" -eq 0 ]
