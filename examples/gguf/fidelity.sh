#!/bin/sh
# SPDX-License-Identifier: MIT
# The KV formats on Gemma 3 270M (docs/fidelity.md, "Gemma 3 270M"):
# perplexity over the first 4,096 tokens of /usr/share/common-licenses/GPL-3
# at context 512 and 2,048 for f32, f16, U8 and U4 (per-channel keys, and
# per-token keys), and U8 keys with U4 values, on the CPU backend and the
# OpenCL device; then top-1 agreement with f32 over 1,000 greedy tokens
# (8 prompts x 125). One JSON object per line to OUT (default
# build/gemma3-fidelity.json), and a table at the end. About 80 minutes on
# a 2-core machine.
# Usage: sh examples/gguf/fidelity.sh [OUT]  (after sh examples/demo.sh
# or sh tests/run.sh: the model cached, build/examples/pkv-gguf built)
set -eu
cd "$(dirname "$0")/../.."
out=${1:-build/gemma3-fidelity.json}
host=build/examples/pkv-gguf
text=/usr/share/common-licenses/GPL-3
: >"$out"
for backend in cpu opencl; do
    for ctx in 512 2048; do
        for kv in "f32" "f16" "u8" "u8 --keys token" "u4" "u4 --keys token" \
            "u8k-u4v"; do
            echo "fidelity: perplexity, ctx $ctx, kv $kv, $backend" >&2
            # shellcheck disable=SC2086 # kv holds an option and its value
            "$host" --perplexity "$text" --ctx "$ctx" --max-tokens 4096 \
                --backend "$backend" --kv $kv | tee -a "$out"
        done
    done
done
for run in "f16 cpu" "u8 cpu" "u8 --keys token cpu" "u8 opencl" "u4 cpu" \
    "u4 --keys token cpu" "u8k-u4v cpu" "u4 opencl"; do
    set -- $run
    backend=$(eval echo "\${$#}")
    kv=$(echo "$run" | sed 's/ [a-z]*$//')
    echo "fidelity: agreement, kv $kv, $backend" >&2
    # shellcheck disable=SC2086
    "$host" --agreement --max-new 125 --backend "$backend" --kv $kv |
        tee -a "$out"
done
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
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
print("\n| backend | kv | top-1 agreement with f32 |")
print("|---|---|---|")
for r in rows:
    if "agreement" in r:
        print(f"| {r['backend'].split()[0]} | {r['kv']} | "
              f"{100 * r['agreement']:.2f}% "
              f"({r['same']}/{r['tokens']}) |")
PY
