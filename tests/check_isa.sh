#!/bin/sh
# SPDX-License-Identifier: MIT
# What an Intel GPU would run, without one: compile the kernels pkv picks
# on an Intel GPU with Intel's offline compiler for tgllp, adl-p and
# dg2-g10, read the GEN assembly it dumps, print one line per kernel and
# fail on any spill (or private memory, which costs the same) in them.
#
# Usage: sh tests/check_isa.sh SOURCE_DIR [--quick] [--json FILE]
#   --quick   tgllp and dg2-g10 at head_dim 128 and 256 only (the intel
#             prefill kernel at GQA 8 and, beside block 16, block 8; of
#             the geometries it took last, U8 at head_dim 80 and 512,
#             GQA 12 and blocks 4 and 1; of the decode builds beyond the
#             grid, GQA 32 and block 1 with the intel variant, and
#             head_dim 80 at GQA 4 and 32 with the GPU variant)
#   --json    one JSON object per kernel line to FILE (pkv-bench isa)
#
# The programs, built as the OpenCL backend builds them
# (src/opencl/program.c, src/opencl/decode.c):
# - the generic program (append, freeze, paged attention, tiled prefill,
#   block copy), whose kernels take their geometry as arguments;
# - the intel prefill kernel (kernels/prefill_intel.cl), which AUTO picks
#   on every Intel GPU for steps with more rows than sequences, at every
#   geometry pkv accepts where the device's local memory holds it (64 KB
#   here: pkv__prefill_intel_shape's chunk for it): head_dim 64/96/128/256
#   at block 16 over the decode grid's formats with GQA 1 and 8 (2 rows
#   of a tile hold GQA 4's queries: the kernel's registers do not depend
#   on the group), blocks 8/32/64 for f16, u8 and u4 at GQA 4, head_dim
#   64 and 256; and the code only the other geometries compile: head_dim
#   80 (channels padded to 96) and 512 (8 tokens a chunk) at GQA 4 and
#   1, GQA 12 (slices of 8 heads) at head_dim 128, blocks 4 and 1
#   (chunks across blocks) at GQA 4, for f16, u8 and u4; u8 at GQA 16
#   and U8 keys with U4 values at head_dim 512 and block 4 besides;
# - the intel decode variant (kernels/decode_intel.cl: the partial and the
#   reduce kernel), which AUTO picks on every Intel GPU for head_dim a
#   multiple of 32, over head_dim 64/96/128/256, GQA 1/4/8 at block 16
#   for f32, f16, u8 and u4 (per-channel keys with per-token values, u4
#   groups of 32 channels) and, at head_dim 128 and 256, u8's per-token
#   keys and values and per-channel keys and values, u4's per-token keys
#   with per-channel values and u8 keys with u4 values; blocks 8/32/64 for
#   f16, u8 and u4 at GQA 4. PKV_INTEL_PAIRS follows
#   pkv__decode_intel_pairs (src/opencl/features.c;
#   tests/test_opencl_features.c checks its values);
# - beyond that grid, on tgllp and dg2-g10 (adl-p once, by hand:
#   docs/performance.md), the decode kernels pkv picks on an Intel GPU
#   at geometries the grid leaves out: the intel variant at GQA 12
#   (every format), 16 and 32 (the default u8 and u4), whose query
#   heads are split among work-groups of at most 8 (PKV_GROUP_SPLIT,
#   pkv__decode_split), and
#   the portable GPU variant (kernels/decode_gpu.cl), which AUTO picks
#   for head_dims that are not multiples of 32, in the shape
#   pkv__decode_gpu_shape_make gives an Intel GPU: head_dim 80 at GQA 4,
#   12 and 32 (every format) and 2 (f16, the default u8 and u4, u8 keys
#   with u4 values), head_dim 20 at GQA 12 and 32 and 100 at GQA 12 (those
#   four formats); and blocks of 1 and 4 tokens at GQA 16 with both (the
#   default u8 and u4). tests/ocloc_lib.sh's ocloc_decode_split and
#   ocloc_gpu_shape follow the host's rules;
# - with --quick too, the models the GGUF host (examples/gguf) serves,
#   at blocks of 16 in f16 (its default) and the default u8: the intel
#   prefill kernel at Gemma 3 270M's head_dim 256 and GQA 4 and
#   SmolLM2-135M's head_dim 64 and GQA 3, the intel decode variant at
#   SmolLM2's (on tgllp and dg2-g10; Gemma's is in the grid).
#
# A line: device, program, kernel, SIMD width (the dump that ships: IGC's
# retry at another width, "_1_" in the file name, when there is one),
# instructions, spill bytes, private memory bytes (private=: scratch, from
# the .asm; stateless=: a work-item's private memory in global memory,
# from the .cos, where Xe-HPG keeps it). It fails on a spill in
# any of them and on private memory in every kernel pkv picks on an
# Intel GPU. Reported only: pkv_paged_attention (CPU devices) and
# pkv_paged_attention_tiled (never picked on an Intel GPU: only where its
# local memory cannot hold the intel prefill kernel, or a GPU lacks
# Intel's subgroups), which keep arrays a work-item indexes at run time
# in private memory (docs/performance.md, "Intel GPU code"). For decode
# partials and the intel prefill kernel also the hottest loops' cost per
# KV byte (kb_inst, kb_cyc, vb_inst, vb_cyc: tests/isa_summary.awk says
# how; the prefill kernel's loops are those its comments name "score"
# and "value", counted with G = 8, the queries of a tile, so that
# products / G x 16 are the KV elements a turn reads).
# Each build's lines are cached (tests/ocloc_lib.sh: keyed by the exact
# source, options, device, compiler and summary program); the last line
# says how many were built and how many read. PKV_ISA_REBUILD=1 builds
# every one.
# Exit 77 (ctest: skipped) when ocloc is not installed.
set -u
root=$1
shift
quick=0
json=""
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) quick=1 ;;
    --json) json=$2; shift ;;
    *) echo "check_isa: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
if ! command -v ocloc >/dev/null 2>&1; then
    echo "check_isa: SKIPPED: Intel's offline compiler 'ocloc' is not" \
         "installed (Debian package intel-opencl-icd)"
    exit 77
fi
. "$root/tests/ocloc_lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
ocloc_cache_init isa_check

devices="tgllp adl-p dg2-g10"
dims="64 96 128 256"
# The intel prefill kernel's GQA (at block 16) and other blocks; the
# geometries it took last (new, below).
pgroups="1 8"
pblocks="8 32 64"
new_layouts="1,1,1 2,1,2 3,1,2"
[ "$quick" = 1 ] && devices="tgllp dg2-g10" && dims="128 256" &&
    pgroups="8" && pblocks="8" && new_layouts="2,1,2"

ocloc_generic_source "$root" "$tmp/generic.cl"
for v in intel gpu; do
    cat "$root/src/kv_layout.h" "$root/kernels/tensor_io.cl" \
        "$root/kernels/decode_common.cl" "$root/kernels/decode_$v.cl" \
        >"$tmp/decode_$v.cl"
done
cat "$root/src/kv_layout.h" "$root/src/kv_step.h" \
    "$root/kernels/tensor_io.cl" "$root/kernels/prefill_intel.cl" \
    >"$tmp/prefill_intel.cl"
base="-cl-std=CL1.2 -cl-fp32-correctly-rounded-divide-sqrt"


# The list of builds: id, device, source, group, K and V element bytes,
# label, options (the rest of the line).
n=0
add() { # device source group kbytes vbytes label options...
    n=$((n + 1))
    echo "$n $*" >>"$tmp/builds"
}
: >"$tmp/builds"
for dev in $devices; do
    add "$dev" generic.cl 0 0 0 generic "$base"
    for layout in "0 1 1" "1 1 1" "2 1 2" "2 2 2" "2 1 1" "3 1 2" "3 2 1" \
        "4 1 2"; do
        set -- $layout
        dt=$1 kq=$2 vq=$3
        for d in $dims; do
            for g in 1 4 8; do
                for bs in 8 16 32 64; do
                    if [ "$bs" != 16 ]; then
                        # Other blocks: f16 and the default u8 and u4 at
                        # GQA 4.
                        [ "$g" = 4 ] || continue
                        case "$layout" in
                        "1 1 1" | "2 1 2" | "3 1 2") ;;
                        *) continue ;;
                        esac
                    fi
                    # The other quantized layouts at head_dim 128 and 256
                    # only.
                    case "$layout" in
                    "2 1 2" | "3 1 2") ;;
                    "2 "* | "3 "* | "4 "*) [ "$d" -ge 128 ] || continue ;;
                    esac
                    qch=0
                    [ "$dt" -ge 2 ] && [ "$vq" = 1 ] && qch=1
                    np=$(ocloc_intel_pairs "$d" "$g" "$qch")
                    # Element bytes of the K and the V parts.
                    case "$dt" in
                    0) kb=4 vb=4 ;;
                    1) kb=2 vb=2 ;;
                    2) kb=1 vb=1 ;;
                    3) kb=0.5 vb=0.5 ;;
                    4) kb=1 vb=0.5 ;;
                    esac
                    add "$dev" decode_intel.cl "$g" "$kb" "$vb" \
                        "intel-d$d-g$g-b$bs-kv$dt-k$kq-v$vq" \
                        "$base -cl-std=CL2.0 -DPKV_INTEL_SUBGROUPS" \
                        "-DPKV_INTEL_PAIRS=$np -DPKV_INTEL_PARTITION=256" \
                        "-DPKV_HEAD_DIM=$d -DPKV_BLOCK_SIZE=$bs" \
                        "-DPKV_GROUP=$g -DPKV_KV_DTYPE=$dt" \
                        "-DPKV_KEY_QUANT=$kq -DPKV_VALUE_QUANT=$vq -DPKV_U4_GROUP=32"
                done
            done
        done
    done
done

# Element bytes of the K and the V parts of dtype $1, as "kb vb".
elem_bytes() {
    case "$1" in
    0) echo "4 4" ;;
    1) echo "2 2" ;;
    2) echo "1 1" ;;
    3) echo "0.5 0.5" ;;
    4) echo "1 0.5" ;;
    esac
}
# Decode geometries beyond that grid, as pkv builds them for an Intel
# GPU: more than 8 query heads a kv head (the intel and GPU variants
# split them among work-groups of at most 8: PKV_GROUP_SPLIT), and
# head_dims that are not multiples of 32 (the GPU variant, shaped by
# ocloc_gpu_shape), with u4 groups as the engine's default (32, or the
# whole row).
decode_more() { # device variant head_dim group block dtype kq vq
    sp=$(ocloc_decode_split "$4")
    heads=$(($4 / sp))
    u4g=32
    [ $(($3 % 32)) -eq 0 ] || u4g=$3
    geo="-DPKV_HEAD_DIM=$3 -DPKV_BLOCK_SIZE=$5 -DPKV_GROUP=$4"
    geo="$geo -DPKV_KV_DTYPE=$6 -DPKV_KEY_QUANT=$7 -DPKV_VALUE_QUANT=$8"
    geo="$geo -DPKV_U4_GROUP=$u4g"
    [ "$sp" -gt 1 ] && geo="$geo -DPKV_GROUP_SPLIT=$sp"
    if [ "$2" = intel ]; then
        qch=0
        [ "$6" -ge 2 ] && [ "$8" = 1 ] && qch=1
        np=$(ocloc_intel_pairs "$3" "$heads" "$qch")
        vopts="-cl-std=CL2.0 -DPKV_INTEL_SUBGROUPS -DPKV_INTEL_PARTITION=256"
        vopts="$vopts -DPKV_INTEL_PAIRS=$np"
    else
        # shellcheck disable=SC2046 # two words
        set -- "$@" $(ocloc_gpu_shape "$3" "$heads")
        vopts="-DPKV_GPU_CHUNKS=$9 -DPKV_GPU_TOKENS=${10}"
        vopts="$vopts -DPKV_GPU_PARTITION=256"
    fi
    # shellcheck disable=SC2046 # two words
    add "$1" "decode_$2.cl" "$heads" $(elem_bytes "$6") \
        "$2-d$3-g$4-b$5-kv$6-k$7-v$8" "$base $vopts $geo"
}
mdevices="tgllp dg2-g10"
for dev in $mdevices; do
    for layout in "0 1 1" "1 1 1" "2 1 2" "2 2 2" "2 1 1" "3 1 2" "3 2 1" \
        "4 1 2"; do
        # f16, the default u8 and u4, u8 keys with u4 values.
        case "$layout" in
        "1 1 1" | "2 1 2" | "3 1 2" | "4 1 2") main=1 ;;
        *) main=0 ;;
        esac
        set -- $layout
        # The intel variant at GQA 12 (6 heads a work-group) in every
        # format; at 16 and 32 (8 heads) in the default u8 and u4.
        for g in 12 16 32; do
            [ "$quick" = 1 ] && [ "$g" != 32 ] && continue
            case "$g $layout" in
            "12 "* | *" 2 1 2" | *" 3 1 2") ;;
            *) continue ;;
            esac
            decode_more "$dev" intel 128 "$g" 16 "$@"
        done
        # The GPU variant: at head_dim 80 every format with GQA 4, 12 and
        # 32 (2 chunks a lane, then 1 with 6 and 8 heads), the main ones
        # with GQA 2 (4 chunks); head_dim 20 at GQA 12 and 32, and 100 at
        # GQA 12, in the main formats.
        for d in 20 80 100; do
            for g in 2 4 12 32; do
                case "$d $g $main" in
                "80 4 "? | "80 12 "? | "80 32 "? | *" 1") ;;
                *) continue ;;
                esac
                case "$d $g" in
                "20 2" | "20 4" | "100 2" | "100 4" | "100 32") continue ;;
                esac
                [ "$quick" = 1 ] && { [ "$main" = 0 ] || [ "$d" != 80 ] ||
                    [ "$g" = 2 ] || [ "$g" = 12 ]; } && continue
                decode_more "$dev" gpu "$d" "$g" 16 "$@"
            done
        done
    done
    # Blocks of 1 and 4 tokens at GQA 16: both variants with the default
    # u8 and u4 (--quick: u4 and block 1).
    for layout in "2 1 2" "3 1 2"; do
        for bs in 1 4; do
            [ "$quick" = 1 ] && { [ "$bs" = 4 ] || [ "$layout" = "2 1 2" ]; } &&
                continue
            # shellcheck disable=SC2086 # three words
            decode_more "$dev" intel 128 16 "$bs" $layout
            # shellcheck disable=SC2086 # three words
            decode_more "$dev" gpu 80 16 "$bs" $layout
        done
    done
    # The models the GGUF host serves (examples/gguf: blocks of 16, f16 by
    # default), f16 and the default u8: SmolLM2-135M's head_dim 64 at GQA
    # 3 (Gemma 3 270M's, head_dim 256 at GQA 4, is in the grid above).
    for layout in "1 1 1" "2 1 2"; do
        # shellcheck disable=SC2086 # three words
        decode_more "$dev" intel 64 3 16 $layout
    done
done

# The intel prefill kernel's chunk on 64 KB of local memory, as
# pkv__prefill_intel_shape picks it (src/opencl/features.c;
# tests/test_opencl_features.c checks its values): 16 tokens, a block of
# 8, halved while the kernel's local memory exceeds 64 KB.
prefill_chunk() { # head_dim block
    c=16
    [ "$2" = 8 ] && c=8
    dp=$((($1 + 31) / 32 * 32))
    while [ $((4 * (16 * dp + c * dp + dp / 32 * 128 + 8 * c + 24))) \
        -gt 65536 ]; do
        c=$((c / 2))
    done
    echo "$c"
}
# The intel prefill kernel (pkv__prefill_intel_shape: 8 / GQA rows a
# tile, 1 past GQA 8).
prefill() { # device head_dim group block dtype kq vq
    # shellcheck disable=SC2046 # two words
    set -- "$@" $(elem_bytes "$5")
    rows=$((8 / $3))
    [ "$rows" = 0 ] && rows=1
    add "$1" prefill_intel.cl 8 "$8" "$9" \
        "prefill-d$2-g$3-b$4-kv$5-k$6-v$7" \
        "$base -cl-std=CL2.0 -DPKV_PREFILL_ROWS=$rows" \
        "-DPKV_PREFILL_CHUNK=$(prefill_chunk "$2" "$4")" \
        "-DPKV_HEAD_DIM=$2 -DPKV_BLOCK_SIZE=$4 -DPKV_GROUP=$3" \
        "-DPKV_KV_DTYPE=$5 -DPKV_KEY_QUANT=$6 -DPKV_VALUE_QUANT=$7" \
        "-DPKV_U4_GROUP=32"
}
for dev in $devices; do
    for layout in "0 1 1" "1 1 1" "2 1 2" "2 2 2" "2 1 1" "3 1 2" "3 2 1" \
        "4 1 2"; do
        for d in $dims; do
            case "$layout" in
            "0 "* | "1 "* | "2 1 2" | "3 1 2") ;;
            *) [ "$d" -ge 128 ] || continue ;;
            esac
            for g in $pgroups; do
                # shellcheck disable=SC2086 # three words
                prefill "$dev" "$d" "$g" 16 $layout
            done
        done
    done
    for layout in "1 1 1" "2 1 2" "3 1 2"; do
        for d in $dims; do
            case "$d" in 64 | 256) ;; *) continue ;; esac
            for bs in $pblocks; do
                # shellcheck disable=SC2086 # three words
                prefill "$dev" "$d" 4 "$bs" $layout
            done
        done
    done
    # The geometries it took last, f16, u8 and u4 (u8 in --quick):
    # head_dim 80 and 512, GQA 12, blocks 4 and 1; u8 at GQA 16, U8 keys
    # with U4 values at head_dim 512 and block 4 besides.
    for layout in $new_layouts; do
        for geometry in "80 4 16" "512 1 16" "128 12 16" "128 4 4" \
            "128 4 1"; do
            # shellcheck disable=SC2046,SC2086 # three words each
            prefill "$dev" $geometry $(echo "$layout" | tr , ' ')
        done
    done
    # The models the GGUF host serves, f16 and the default u8: Gemma 3
    # 270M (head_dim 256, GQA 4) and SmolLM2-135M (head_dim 64, GQA 3).
    for layout in "1 1 1" "2 1 2"; do
        # shellcheck disable=SC2086 # three words
        prefill "$dev" 256 4 16 $layout
        # shellcheck disable=SC2086 # three words
        prefill "$dev" 64 3 16 $layout
    done
    if [ "$quick" = 0 ]; then
        prefill "$dev" 128 16 16 2 1 2
        prefill "$dev" 512 1 16 4 1 2
        prefill "$dev" 128 4 4 4 1 2
    fi
done

# One build: its lines into out.N, from the cache or from its dumps (in a
# directory of its own: dumps of one source overwrite each other across
# devices).
build() { # a builds line: id device source group kbytes vbytes label options...
    # shellcheck disable=SC2086 # a line is a list of words
    set -- $1
    id=$1 dev=$2 src=$3 g=$4 keb=$5 veb=$6 label=$7
    shift 7
    key=$(ocloc_key "$(cat "$tmp/$src.sha256")" "$dev" "$*" \
        "$summary_id $g $keb $veb $label")
    if ocloc_cache_get "$key" "$tmp/out.$id"; then
        : >"$tmp/read.$id"
        return
    fi
    : >"$tmp/built.$id"
    dir=$tmp/dump.$id
    mkdir -p "$dir"
    if ! IGC_ShaderDumpEnable=1 IGC_DumpLLVMIR=0 IGC_DumpToCustomDir=$dir \
        ocloc compile -q -file "$tmp/$src" -device "$dev" -options "$*" \
        -output_no_suffix -output "$dir/out" >"$dir/log" 2>&1; then
        echo "$dev $label BUILD-FAILED" >"$tmp/out.$id"
        sed 's/^/    /' "$dir/log" | head -20 >>"$tmp/out.$id"
        return
    fi
    ocloc_note_built "$(cat "$tmp/$src.sha256")" "$dev" "$*" "$dir/log"
    : >"$tmp/out.$id"
    for asm in "$dir"/*.asm; do
        # A kernel IGC retried at another width ships its "_1_" dump.
        case "$asm" in
        *_1_simd*) ;;
        *) ls "$dir"/*_1_simd*_entry_"${asm##*_entry_}" >/dev/null 2>&1 &&
            continue ;;
        esac
        stateless=$(sed -n 's/.*PerThreadPrivateMemorySize *= *//p' \
            "${asm%.asm}.cos" 2>/dev/null | sort -n | tail -1)
        awk -v dev="$dev" -v label="$label" -v G="$g" -v keb="$keb" \
            -v veb="$veb" -v file="$asm" -v stateless="${stateless:-0}" \
            -f "$root/tests/isa_summary.awk" "$asm" >>"$tmp/out.$id"
    done
    rm -rf "$dir"
    ocloc_cache_put "$key" "$tmp/out.$id"
}

for src in generic.cl decode_intel.cl decode_gpu.cl prefill_intel.cl; do
    ocloc_hash "$tmp/$src" >"$tmp/$src.sha256"
done
summary_id=$(ocloc_hash "$root/tests/isa_summary.awk")
ocloc_run_all "$tmp/builds" build check_isa

fails=0
for i in $(seq 1 "$n"); do
    cat "$tmp/out.$i"
    if grep -q "BUILD-FAILED\|spill=[1-9]" "$tmp/out.$i" ||
        grep -v " pkv_paged_attention\(_tiled\)\? " "$tmp/out.$i" |
        grep -q "private=[1-9]\|stateless=[1-9]"; then
        fails=$((fails + 1))
    fi
done >"$tmp/all"
cat "$tmp/all"
if [ -n "$json" ]; then
    grep -v "^ " "$tmp/all" | awk '{
        printf "{\"bench\":\"isa\",\"device\":\"%s\",\"program\":\"%s\"", $1, $2
        if ($3 == "BUILD-FAILED") { printf ",\"error\":\"build failed\"}\n"; next }
        printf ",\"kernel\":\"%s\",\"simd\":%s", $3, substr($4, 5)
        for (i = 5; i <= NF; i++) { split($i, kv, "="); printf ",\"%s\":%s", kv[1], kv[2] }
        printf "}\n"
    }' >"$json"
fi
echo "check_isa: $n builds ($(ocloc_counts)), $(grep -c . "$tmp/all")" \
     "lines, $fails failed (a spill, private memory in a kernel pkv picks" \
     "on an Intel GPU, or a build error; pkv_paged_attention, for CPU" \
     "devices, and pkv_paged_attention_tiled, never picked on an Intel" \
     "GPU but where its local memory cannot hold the intel prefill" \
     "kernel, are reported only)," \
     "$(($(date +%s) - start))s"
[ "$fails" -eq 0 ]
