#!/bin/sh
# SPDX-License-Identifier: MIT
# What an Intel GPU would run, without one: compile the kernels pkv picks
# on an Intel GPU with Intel's offline compiler for tgllp, adl-p and
# dg2-g10, read the GEN assembly it dumps, print one line per kernel and
# fail on any spill (or private memory, which costs the same) in them.
#
# Usage: sh tests/isa_check.sh SOURCE_DIR [--quick] [--json FILE]
#   --quick   tgllp and dg2-g10 at head_dim 128 and 256 only
#   --json    one JSON object per kernel line to FILE (pkv-bench isa)
#
# The programs, built as the OpenCL backend builds them
# (src/opencl/program.c, src/opencl/decode.c):
# - the generic program (append, seal, paged attention, tiled prefill,
#   block copy), whose kernels take their geometry as arguments;
# - the intel decode variant (kernels/decode_intel.cl: the partial and the
#   reduce kernel), which AUTO picks on every Intel GPU for head_dim a
#   multiple of 32, over head_dim 64/96/128/256, GQA 1/4/8 at block 16
#   for f32, f16, u8 and u4 (per-channel keys with per-token values, u4
#   groups of 32 channels) and, at head_dim 128 and 256, u8's per-token
#   keys and values and per-channel keys and values, u4's per-token keys
#   with per-channel values and u8 keys with u4 values; blocks 8/32/64 for
#   f16, u8 and u4 at GQA 4. PKV_INTEL_PAIRS follows
#   pkv__decode_intel_pairs (src/opencl/features.c;
#   tests/test_opencl_features.c checks its values).
#
# A line: device, program, kernel, SIMD width (the dump that ships: IGC's
# retry at another width, "_1_" in the file name, when there is one),
# instructions, spill bytes, private memory bytes. It fails on a spill in
# any of them and on private memory in the decode programs; the generic
# program's attention kernels keep arrays a work-item indexes at run time
# in private memory (reported: docs/performance.md, "Intel GPU code").
# For decode partials
# also the hottest loops' cost per KV byte: each innermost loop with at
# least 8 G mad instructions streams KV (the loops over 16 channels of 16
# tokens and over runs of 16 tokens; fewer are the one-token loops at a
# partition's edge); it reads (mads / G) x 16 lanes x element-bytes bytes
# a turn (one mad per head per element a lane; u4: half a byte an
# element; the mads that fold or dequantise parameters count as elements
# too, so quantized figures lean low); loops
# before the kernel's first exp are the score pass, after it the value
# pass. kb_inst/vb_inst: instructions per K and V byte of the costliest
# such loop; kb_cyc/vb_cyc: cycles of an 8-wide ALU per byte, a SIMD16
# instruction 2 cycles, sends and control flow 0 (docs/performance.md,
# "Intel GPU code", has the model that uses them).
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
    *) echo "isa_check: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
if ! command -v ocloc >/dev/null 2>&1; then
    echo "isa_check: SKIPPED: Intel's offline compiler 'ocloc' is not" \
         "installed (Debian package intel-opencl-icd)"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
jobs=$(nproc)

devices="tgllp adl-p dg2-g10"
dims="64 96 128 256"
[ "$quick" = 1 ] && devices="tgllp dg2-g10" && dims="128 256"

# The generic program: the backend's files, decode kernels excepted.
files=$(sed -n '/^set(PKV_KERNEL_FILES/,/)/p' "$root/CMakeLists.txt" |
    sed 's/set(PKV_KERNEL_FILES//; s/)//')
: >"$tmp/generic.cl"
for f in $files; do
    case "$f" in *decode*.cl) continue ;; esac
    cat "$root/$f" >>"$tmp/generic.cl"
    echo >>"$tmp/generic.cl"
done
cat "$root/src/kv_layout.h" "$root/kernels/tensor_io.cl" \
    "$root/kernels/decode_common.cl" "$root/kernels/decode_intel.cl" \
    >"$tmp/decode_intel.cl"
base="-cl-std=CL1.2 -cl-fp32-correctly-rounded-divide-sqrt"

# pkv__decode_intel_pairs.
pairs() { # head_dim group quantized_channel_values
    per=$((2 * $2 + 4 * $3))
    if [ $(($1 % 64)) -eq 0 ] && [ $((2 * per)) -le 16 ]; then
        echo 2
    else
        echo 1
    fi
}

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
                    np=$(pairs "$d" "$g" "$qch")
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

# One build: its dumps into a directory of its own (dumps of one source
# overwrite each other across devices), then its lines into out.N.
build() { # id device source group kbytes vbytes label options...
    id=$1 dev=$2 src=$3 g=$4 keb=$5 veb=$6 label=$7
    shift 7
    dir=$tmp/dump.$id
    mkdir -p "$dir"
    if ! IGC_ShaderDumpEnable=1 IGC_DumpLLVMIR=0 IGC_DumpToCustomDir=$dir \
        ocloc compile -q -file "$tmp/$src" -device "$dev" -options "$*" \
        -output_no_suffix -output "$dir/out" >"$dir/log" 2>&1; then
        echo "$dev $label BUILD-FAILED" >"$tmp/out.$id"
        sed 's/^/    /' "$dir/log" | head -20 >>"$tmp/out.$id"
        return
    fi
    for asm in "$dir"/*.asm; do
        # A kernel IGC retried at another width ships its "_1_" dump.
        case "$asm" in
        *_1_simd*) ;;
        *) ls "$dir"/*_1_simd*_entry_"${asm##*_entry_}" >/dev/null 2>&1 &&
            continue ;;
        esac
        awk -v dev="$dev" -v label="$label" -v G="$g" -v keb="$keb" \
            -v veb="$veb" \
            -v file="$asm" '
        /^\/\/\.kernel / { kernel = $2 }
        /^\/\/\.instCount / { inst = $2 }
        /^\/\/\.spill size / { spill = $3 }
        /^\/\/\.private memory size / { priv = $4 }
        /^\/\//  { next }
        /^[ \t]*$/ { next }
        /^[A-Za-z_0-9]+:[ \t]*$/ { sub(/:.*/, ""); lab[$0] = n; next }
        {
            code = $0; sub(/\/\/.*/, "", code)
            line[n] = code
            # The opcode: the first word that is not a predicate.
            op = ""
            for (i = 1; i <= split(code, w, /[ \t]+/); i++)
                if (w[i] != "" && w[i] !~ /^\(/) { op = w[i]; break }
            sub(/\..*/, "", op)
            opc[n] = op
            if (op == "while" || op == "jmpi" || op == "goto")
                for (i = split(code, w, /[ \t]+/); i > 0; i--)
                    if (w[i] in lab) {
                        lstart[nl] = lab[w[i]]; lend[nl] = n; nl++; break
                    }
            if (op == "math" && code ~ /exp/ && firstexp == "") firstexp = n
            n++
        }
        function cyc(k,   m, s) {
            if (opc[k] ~ /^(send|sendc|sync|if|else|endif|while|break|cont|jmpi|goto|join|nop|halt)$/) return 0
            s = 1
            if (match(line[k], /\([0-9]+\|M[0-9]+\)/)) {
                m = substr(line[k], RSTART + 1, RLENGTH - 2); sub(/\|.*/, "", m)
                s = int(m / 8); if (s < 1) s = 1
            }
            return s
        }
        END {
            simd = file; sub(/.*_simd/, "", simd); sub(/_.*/, "", simd)
            kb_i = kb_c = vb_i = vb_c = 0
            for (l = 0; l < nl && G > 0; l++) {
                inner = 0
                for (k = 0; k < nl; k++)
                    if (k != l && lstart[k] >= lstart[l] && lend[k] <= lend[l]) inner = 1
                if (inner) continue
                mads = 0; c = 0
                for (k = lstart[l]; k <= lend[l]; k++) {
                    if (opc[k] == "mad") mads++
                    c += cyc(k)
                }
                if (mads < 8 * G) continue
                ins = lend[l] - lstart[l] + 1
                if (firstexp == "" || lstart[l] < firstexp) {
                    bytes = mads / G * 16 * keb
                    if (c / bytes > kb_c) { kb_c = c / bytes; kb_i = ins / bytes }
                } else {
                    bytes = mads / G * 16 * veb
                    if (c / bytes > vb_c) { vb_c = c / bytes; vb_i = ins / bytes }
                }
            }
            printf "%s %s %s simd%s inst=%d spill=%d private=%d", dev, label, kernel, simd, inst, spill, priv
            # A pass whose loop the compiler unrolled away has no figure.
            if (kb_c > 0)
                printf " kb_inst=%.3f kb_cyc=%.3f", kb_i, kb_c
            if (vb_c > 0)
                printf " vb_inst=%.3f vb_cyc=%.3f", vb_i, vb_c
            printf "\n"
        }' "$asm" >>"$tmp/out.$id"
    done
    rm -rf "$dir"
}

running=0
while read -r line; do
    set -- $line
    build "$@" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait
        running=0
    fi
done <"$tmp/builds"
wait

fails=0
for i in $(seq 1 "$n"); do
    cat "$tmp/out.$i"
    if grep -q "BUILD-FAILED\|spill=[1-9]" "$tmp/out.$i" ||
        grep -v " generic " "$tmp/out.$i" | grep -q "private=[1-9]"; then
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
echo "isa_check: $n builds, $(grep -c . "$tmp/all") lines, $fails failed" \
     "(a spill, private memory in a decode program, or a build error)," \
     "$(($(date +%s) - start))s"
[ "$fails" -eq 0 ]
