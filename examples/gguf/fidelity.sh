#!/bin/sh
# SPDX-License-Identifier: MIT
# The KV formats on a real model (docs/fidelity.md): perplexity over the
# first 4,096 tokens of /usr/share/common-licenses/GPL-3 at context 512 and
# 2,048, one JSON object per line to OUT, and a table at the end.
# - Gemma 3 270M (the default; docs/fidelity.md, "Gemma 3 270M"): f32,
#   f16, U8 and U4 (per-channel keys, and per-token keys), and U8 keys
#   with U4 values, on the CPU backend and the OpenCL device; then top-1
#   agreement with f32 over 1,000 greedy tokens (8 prompts x 125). About
#   80 minutes on a 2-core machine. OUT: build/gemma3-fidelity.json.
# - --model smollm2 (docs/fidelity.md, "SmolLM2-135M-Instruct"): f32,
#   f16, U8, U8 with per-token keys, U8 keys with U4 values and U4 on the
#   CPU backend, then llama.cpp's llama-perplexity on the same GGUF and
#   chunks with f32, f16 (flash attention off and on), q8_0 and q4_0 K and
#   V, where bench/peer.py has built it ($PKV_CACHE/llama.cpp); then the
#   same on the model's weights dequantized to f32 (the set-up's
#   SmolLM2-135M-Instruct.f32.gguf), where ggml rounds no activation to 8
#   bits before a product and the KV format's own cost shows. Each line
#   names its "weights". About 40 minutes.
#   OUT: build/smollm2-fidelity.json.
# Usage: sh examples/gguf/fidelity.sh [--model gemma3|smollm2] [OUT]
#   (after sh examples/demo.sh or sh tests/run.sh: the models cached,
#   build/examples/pkv-gguf built)
set -eu
cd "$(dirname "$0")/../.."
model=gemma3
if [ "${1:-}" = --model ]; then
    model=${2:?--model needs gemma3 or smollm2}
    shift 2
fi
out=${1:-build/$model-fidelity.json}
host="build/examples/pkv-gguf --model $model"
text=/usr/share/common-licenses/GPL-3
cache=${PKV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pkv}
: >"$out"
weights=default
perplexity() { # BACKEND CTX KV...
    backend=$1 ctx=$2
    shift 2
    echo "fidelity: $model perplexity, ctx $ctx, kv $*, $backend," \
        "weights $weights" >&2
    $host --perplexity "$text" --ctx "$ctx" --max-tokens 4096 \
        --backend "$backend" --kv "$@" |
        sed "s/}\$/, \"weights\": \"$weights\"}/" | tee -a "$out"
}
if [ "$model" = smollm2 ]; then
    llama=$cache/llama.cpp/build/bin/llama-perplexity
    [ -x "$llama" ] || echo "fidelity: no $llama (python3 bench/peer.py" \
        "builds it): llama.cpp's rows skipped" >&2
    for gguf in "$cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" \
        "$cache/smollm2/SmolLM2-135M-Instruct.f32.gguf"; do
        weights=$(basename "$gguf" .gguf | sed 's/.*\.//')
        if [ ! -f "$gguf" ]; then
            echo "fidelity: no $gguf (examples/gguf/smollm2.sh makes it):" \
                "its rows skipped" >&2
            continue
        fi
        host="build/examples/pkv-gguf --weights $gguf"
        for ctx in 512 2048; do
            for kv in "f32" "f16" "u8" "u8 --keys token" "u8k-u4v" "u4"; do
                # shellcheck disable=SC2086 # kv holds an option and its value
                perplexity cpu "$ctx" $kv
            done
        done
        [ -x "$llama" ] || continue
        for run in "f32 off" "f16 off" "f16 on" "q8_0 on" "q4_0 on"; do
            set -- $run
            for ctx in 512 2048; do
                echo "fidelity: llama-perplexity, ctx $ctx, kv $1, fa $2," \
                    "weights $weights" >&2
                ppl=$("$llama" -m "$gguf" -f "$text" -c "$ctx" \
                    --chunks $((4096 / ctx)) -t 2 -fa "$2" -ctk "$1" \
                    -ctv "$1" 2>&1 |
                    sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p')
                echo "{\"llama_perplexity\": $ppl, \"ctx\": $ctx," \
                    "\"kv\": \"$1\", \"flash_attn\": \"$2\"," \
                    "\"weights\": \"$weights\"}" | tee -a "$out"
            done
        done
    done
else
    for backend in cpu opencl; do
        for ctx in 512 2048; do
            for kv in "f32" "f16" "u8" "u8 --keys token" "u4" \
                "u4 --keys token" "u8k-u4v"; do
                # shellcheck disable=SC2086
                perplexity "$backend" "$ctx" $kv
            done
        done
    done
    for run in "f16 cpu" "u8 cpu" "u8 --keys token cpu" "u8 opencl" \
        "u4 cpu" "u4 --keys token cpu" "u8k-u4v cpu" "u4 opencl"; do
        set -- $run
        backend=$(eval echo "\${$#}")
        kv=$(echo "$run" | sed 's/ [a-z]*$//')
        echo "fidelity: agreement, kv $kv, $backend" >&2
        # shellcheck disable=SC2086
        $host --agreement --max-new 125 --backend "$backend" --kv $kv |
            tee -a "$out"
    done
fi
python3 - "$out" <<'PY'
import json, sys


def tables(rows):
    print("\n| backend | kv | ppl ctx 512 | ppl ctx 2048 |")
    print("|---|---|---|---|")
    for b in ("cpu", "opencl"):
        for kv in ("f32", "f16", "u8", "u8-token-keys", "u4", "u4-token-keys",
                   "u8k-u4v"):
            p = {r["ctx"]: r["perplexity"] for r in rows
                 if "perplexity" in r and r["kv"] == kv and
                 r["backend"].startswith(b)}
            if p:
                f16 = {r["ctx"]: r["perplexity"] for r in rows
                       if "perplexity" in r and r["kv"] == "f16" and
                       r["backend"].startswith(b)}
                cell = [f"{p[c]:.4f} ({100 * (p[c] / f16[c] - 1):+.2f}%)"
                        for c in (512, 2048)]
                print(f"| {b} | {kv} | {cell[0]} | {cell[1]} |")
    llama = [r for r in rows if "llama_perplexity" in r]
    if llama:
        print("\n| llama.cpp KV | flash attention | ppl ctx 512 | ppl ctx 2048 |")
        print("|---|---|---|---|")
        for kv, fa in dict.fromkeys((r["kv"], r["flash_attn"]) for r in llama):
            p = {r["ctx"]: r["llama_perplexity"] for r in llama
                 if r["kv"] == kv and r["flash_attn"] == fa}
            print(f"| {kv} | {fa} | {p.get(512, 0):.4f} | {p.get(2048, 0):.4f} |")
    agree = [r for r in rows if "agreement" in r]
    if agree:
        print("\n| backend | kv | top-1 agreement with f32 |")
        print("|---|---|---|")
    for r in agree:
        print(f"| {r['backend'].split()[0]} | {r['kv']} | "
              f"{100 * r['agreement']:.2f}% "
              f"({r['same']}/{r['tokens']}) |")


every = [json.loads(l) for l in open(sys.argv[1])]
for weights in dict.fromkeys(r.get("weights", "default") for r in every):
    if weights != "default":
        print(f"\nweights: {weights}")
    tables([r for r in every if r.get("weights", "default") == weights])
PY
