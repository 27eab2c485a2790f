#!/bin/sh
# SPDX-License-Identifier: MIT
# Hybrid memory, pkv-gguf's default, against --every-token on Gemma 3
# 270M, whose windowed layers see 512 tokens: past that window (where a
# windowed group slides, giving back the blocks behind it) the two must
# give the same outputs bit for bit, and hybrid memory must hold the KV
# its groups need, not every token's. On the CPU backend:
# - the greedy tokens of a 600-token prompt, f16 and u8 KV (decode rows
#   past the window; u8 blocks frozen while the window slides);
# - the logits of that prompt's last 32 positions, byte for byte;
# - the perplexity of a 1,024-token chunk, 128 rows a step: the same nll
#   to the last bit, and the most KV the engine held at once, exactly
#   the figure below for each.
# Exits 77 (ctest: skipped) when Gemma 3 is not cached.
# Usage: check_memory.sh path/to/pkv-gguf
set -u

name=pkv-gguf
binary=$1
. "$(dirname "$0")/../cli_lib.sh"

if ! "$binary" --prompt x --max-new 1 --backend cpu --quiet \
    >"$tmp/out" 2>"$tmp/err"; then
    grep -qF "setup.sh" "$tmp/err" ||
        fail "$name --prompt x: $(cat "$tmp/err")"
    echo "pkv-gguf memory: skipped, Gemma 3 is not cached" \
        "(sh examples/gguf/setup.sh)"
    exit 77
fi

# run OUT ARGS...: pkv-gguf on the CPU backend, stdout into OUT.
run() {
    out=$1
    shift
    "$binary" --backend cpu "$@" >"$out" 2>"$tmp/err" ||
        fail "$name $*: $(cat "$tmp/err")"
}
# field FILE NAME: a number field of the JSON in FILE.
field() {
    sed -n "s/.*\"$2\": \([-0-9.e+]*\).*/\1/p" "$1"
}

# 600 token ids, BOS first: positions up to 599, past the window.
awk 'BEGIN { printf "2"; for (i = 1; i < 600; i++)
    printf " %d", 100 + (i * 7919) % 20000; print "" }' >"$tmp/ids"

for kv in f16 u8; do
    run "$tmp/hybrid" --prompt-ids "$tmp/ids" --max-new 32 \
        --temperature 0 --kv "$kv" --json
    run "$tmp/every" --prompt-ids "$tmp/ids" --max-new 32 \
        --temperature 0 --kv "$kv" --json --every-token
    for mode in hybrid every; do
        sed -n 's/.*"tokens": \[\([^]]*\)\].*/\1/p' "$tmp/$mode" \
            >"$tmp/$mode.tokens"
        # Decode rows from position 600 on: past 608, where the windowed
        # groups give back a block, at 17 tokens or more.
        [ "$(field "$tmp/$mode" generated)" -ge 17 ] ||
            fail "$kv $mode: fewer than 17 tokens: $(cat "$tmp/$mode")"
    done
    cmp -s "$tmp/hybrid.tokens" "$tmp/every.tokens" ||
        fail "$kv: hybrid memory's tokens $(cat "$tmp/hybrid.tokens")" \
            "!= every token's $(cat "$tmp/every.tokens")"
done

run "$tmp/out" --prompt-ids "$tmp/ids" --logits "$tmp/hybrid.logits" \
    --logits-from 568
run "$tmp/out" --prompt-ids "$tmp/ids" --logits "$tmp/every.logits" \
    --logits-from 568 --every-token
[ -s "$tmp/hybrid.logits" ] || fail "--logits wrote nothing"
cmp "$tmp/hybrid.logits" "$tmp/every.logits" >"$tmp/cmp" 2>&1 ||
    fail "logits of positions 568..599 differ: $(cat "$tmp/cmp")"

# The perplexity of one chunk of 1,024 tokens (1,023 computed, 128 rows a
# step). Gemma 3 270M: 18 layers, every sixth full (3), the others
# windowed to 512 tokens; one KV head of 256 channels: 1,024 bytes of
# f16 K and V per token and layer; blocks of 16 tokens. Every token's
# KV: 18 layers x 64 blocks. Hybrid memory: the full layers' 64 blocks,
# and at the last step (rows 896..1022, whose first row's window starts
# at 385) the windowed layers' 40 blocks from token 384 on.
awk 'BEGIN { for (i = 0; i < 1200; i++) printf "item %d of the list. ", i }' \
    >"$tmp/text"
run "$tmp/hybrid" --perplexity "$tmp/text" --ctx 1024 --max-tokens 1024 \
    --kv f16
run "$tmp/every" --perplexity "$tmp/text" --ctx 1024 --max-tokens 1024 \
    --kv f16 --every-token
nll=$(field "$tmp/hybrid" nll)
[ -n "$nll" ] || fail "--perplexity: no nll: $(cat "$tmp/hybrid")"
[ "$nll" = "$(field "$tmp/every" nll)" ] ||
    fail "nll $nll with hybrid memory, $(field "$tmp/every" nll) with" \
        "every token"
# peak MODE BYTES: the KV MODE's run held at most is BYTES.
peak() {
    got=$(field "$tmp/$1" kv_peak_bytes)
    [ "$got" = "$2" ] ||
        fail "$1: KV held at most $got bytes, not $2: $(cat "$tmp/$1")"
}
block=$((16 * 1024))
peak hybrid $(((3 * 64 + 15 * 40) * block))
peak every $((18 * 64 * block))
echo "pkv-gguf memory ok: hybrid memory and every token alike (tokens," \
    "f16 and u8; logits; nll $nll), KV at most $(field "$tmp/hybrid" \
    kv_peak_bytes) and $(field "$tmp/every" kv_peak_bytes) bytes"
