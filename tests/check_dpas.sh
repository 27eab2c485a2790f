#!/bin/sh
# SPDX-License-Identifier: MIT
# The DPAS prefill kernel (kernels/prefill_dpas.cl) as DG2 would run it,
# without one: compile its program with Intel's offline compiler for
# dg2-g10 over the geometries the backend would build it for, read the
# GEN assembly dumps, print one line per build and fail on a build error,
# a build without dpas instructions, a spill or private memory.
#
# Usage: sh tests/check_dpas.sh SOURCE_DIR [--quick]
#   --quick   head_dim 128 and 256, f16 and u8 only
#
# The program is the backend's (src/opencl/program.c,
# src/opencl/prefill_dpas.c): the files below with -cl-std=CL2.0 and the
# geometry as -D options, plus -Dcl_intel_subgroup_matrix_multiply_accumulate:
# a driver defines that macro for a device that reports the extension
# (DG2 does), the offline compiler does not, and without it the program
# would carry the emulated builtin (kernels/dpas_emulation.cl). The
# program also holds paged_attention.cl's pkv_paged_attention (its
# helpers are shared), which only the CPU-shaped path runs: not judged.
#
# A line: label, kernel, SIMD width (IGC's retry at another width, "_1_"
# in the dump's name, when there is one: it ships), instructions, spill
# bytes, dpas instructions, private memory bytes (the .cos dump's
# PerThreadPrivateMemorySize; this IGC's .asm header does not say it), and
# the token loop's instructions per query-key pair and per value element
# (tests/dpas_summary.awk). Then, for comparison, the tiled kernel of the
# generic program (kernels/paged_attention_tiled.cl) at each head_dim,
# its loops read the same way (reported, not judged). Results are cached
# as tests/check_isa.sh's are (tests/ocloc_lib.sh; PKV_ISA_REBUILD=1
# builds anew).
# Exit 77 (ctest: skipped) when ocloc is not installed.
set -u
root=$1
shift
quick=0
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) quick=1 ;;
    *) echo "check_dpas: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
if ! command -v ocloc >/dev/null 2>&1; then
    echo "check_dpas: SKIPPED: Intel's offline compiler 'ocloc' is not" \
         "installed (Debian package intel-opencl-icd)"
    exit 77
fi
. "$root/tests/ocloc_lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
ocloc_cache_init dpas_check

dims="64 96 128 256"
layouts="0:1:1 1:1:1 2:1:2 2:2:2 3:1:2 4:1:2"
if [ "$quick" = 1 ]; then
    dims="128 256"
    layouts="1:1:1 2:1:2"
fi

cat "$root/src/kv_layout.h" "$root/src/kv_step.h" \
    "$root/kernels/pkv_common.cl" "$root/kernels/tensor_io.cl" \
    "$root/kernels/paged_attention.cl" "$root/kernels/dpas_emulation.cl" \
    "$root/kernels/prefill_dpas.cl" >"$tmp/dpas.cl"
# The generic program, for the tiled kernel's figures beside these.
ocloc_generic_source "$root" "$tmp/generic.cl"
base="-cl-std=CL1.2 -cl-fp32-correctly-rounded-divide-sqrt"

# pkv__dpas_rows (src/opencl/prefill_dpas.c).
rows() { if [ "$1" -le 64 ]; then echo 4; else echo 2; fi; }

# The list of builds: id, source, mode, head_dim, rows, label, options.
n=0
add() {
    n=$((n + 1))
    echo "$n $*" >>"$tmp/builds"
}
: >"$tmp/builds"
add generic.cl tiled 0 0 generic "$base"
for d in $dims; do
    for layout in $layouts; do
        dt=${layout%%:*} kq=${layout#*:} vq=${layout##*:}
        kq=${kq%%:*}
        for g in 1 4 8; do
            for bs in 8 16 32; do
                # Other blocks: f16 at GQA 4.
                [ "$bs" = 16 ] || { [ "$dt" = 1 ] && [ "$g" = 4 ]; } ||
                    continue
                add dpas.cl dpas "$d" "$(rows "$d")" \
                    "dpas-d$d-g$g-b$bs-kv$dt-k$kq-v$vq" \
                    "$base -cl-std=CL2.0" \
                    "-Dcl_intel_subgroup_matrix_multiply_accumulate" \
                    "-DPKV_HEAD_DIM=$d -DPKV_BLOCK_SIZE=$bs -DPKV_GROUP=$g" \
                    "-DPKV_KV_DTYPE=$dt -DPKV_KEY_QUANT=$kq" \
                    "-DPKV_VALUE_QUANT=$vq -DPKV_U4_GROUP=32"
            done
        done
    done
done

# One build: its dump summaries (one line per kernel, the private memory
# appended) into out.N, from the cache or from its dumps.
build() { # a builds line: id source mode head_dim rows label options...
    # shellcheck disable=SC2086 # a line is a list of words
    set -- $1
    id=$1 src=$2 mode=$3 d=$4 r=$5 label=$6
    shift 6
    key=$(ocloc_key "$(cat "$tmp/$src.sha256")" dg2-g10 "$*" \
        "$summary_id $mode $d $r $label $dims")
    if ocloc_cache_get "$key" "$tmp/out.$id"; then
        echo read >"$tmp/how.$id"
        return
    fi
    echo built >"$tmp/how.$id"
    dir=$tmp/dump.$id
    if ! ocloc_dump "$dir" "$tmp/$src" dg2-g10 "$*"; then
        echo "$label BUILD-FAILED" >"$tmp/out.$id"
        sed 's/^/    /' "$dir/log" | head -20 >>"$tmp/out.$id"
        return
    fi
    : >"$tmp/out.$id"
    for asm in $(ocloc_shipped "$dir"); do
        kernel=$(sed -n 's|^//\.kernel ||p' "$asm")
        case "$mode:$kernel" in
        dpas:pkv_prefill_dpas | tiled:pkv_paged_attention_tiled) ;;
        *) continue ;;
        esac
        priv=$(sed -n 's/.*PerThreadPrivateMemorySize= *//p' \
            "${asm%.asm}.cos" | head -1)
        # The tiled kernel's loops do not depend on head_dim (an
        # argument): one line per head_dim the dpas builds have.
        for dd in $([ "$mode" = tiled ] && echo "$dims" || echo "$d"); do
            line=$(awk -v label="$label" -v mode="$mode" -v D="$dd" \
                -v R="$r" -v file="$asm" -f "$root/tests/dpas_summary.awk" \
                "$asm")
            [ "$mode" = tiled ] && line=$(echo "$line" |
                sed "s/^generic /tiled-d$dd /")
            echo "$line private=${priv:-unknown}" >>"$tmp/out.$id"
        done
    done
    rm -rf "$dir"
    ocloc_cache_put "$key" "$tmp/out.$id"
}

for src in generic.cl dpas.cl; do
    ocloc_hash "$tmp/$src" >"$tmp/$src.sha256"
done
summary_id=$(ocloc_hash "$root/tests/dpas_summary.awk")
ocloc_run_all "$tmp/builds" build check_dpas

# A dpas build fails without its kernel's line, or with a build error, a
# spill, private memory or no dpas; the generic build only on an error.
fails=0
for i in $(seq 1 "$n"); do
    cat "$tmp/out.$i"
    if grep -q BUILD-FAILED "$tmp/out.$i"; then
        fails=$((fails + 1))
    elif grep -q "^dpas" "$tmp/out.$i" &&
        ! grep "^dpas" "$tmp/out.$i" | grep -q \
            "spill=0 dpas=[1-9].* private=0$"; then
        fails=$((fails + 1))
    fi
done >"$tmp/all"
cat "$tmp/all"
echo "check_dpas: $n builds ($(ocloc_counts)), $fails failed (a build" \
     "error, no dpas, a spill or private memory in pkv_prefill_dpas)," \
     "$(($(date +%s) - start))s"
[ "$fails" -eq 0 ]
