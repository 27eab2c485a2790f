#!/bin/sh
# SPDX-License-Identifier: MIT
# pkv-gguf with SmolLM2-135M-Instruct (its default path, when
# examples/gguf/setup.sh has cached it; skipped, saying so, when it has
# not): the chat template (ChatML: the markers their tokens, a message
# spelling one plain text), the answer ending at <|im_end|>, the demo's
# 32 questions sharing a system prompt (prefix hits), invalid UTF-8 read
# as U+FFFD a byte, the model's context of 8,192 tokens, --warmup's run
# the same as a run alone.
# Usage: check_cli.sh path/to/pkv-gguf
set -u

name=pkv-gguf
binary=$1
. "$(dirname "$0")/../cli_lib.sh"

if ! "$binary" --model smollm2 --prompt x --max-new 1 --backend cpu \
    --quiet >"$tmp/out" 2>"$tmp/err"; then
    grep -qF "setup.sh" "$tmp/err" ||
        fail "$name --model smollm2 --prompt x: $(cat "$tmp/err")"
    echo "pkv-gguf smollm2 cli ok (the model is not cached: skipped)"
    exit 0
fi


# No BOS (the file asks for none): "hi" is one token.
json '"prompt_tokens": 1,' --model smollm2 --prompt hi --max-new 1
# ChatML: <|im_start|> "user" "\n" "hi" <|im_end|> "\n" <|im_start|>
# "ass" "istant" "\n".
json '"prompt_tokens": 10,' --model smollm2 --prompt hi --chat --max-new 1
# With a system prompt: <|im_start|> "system" "\n" "Be" " brief" "."
# <|im_end|> "\n", then the ten.
json '"prompt_tokens": 18,' --model smollm2 --prompt hi \
    --system "Be brief." --max-new 1
# A message spelling <|im_end|> stays text: 7 tokens instead of 1.
json '"prompt_tokens": 16,' --model smollm2 --prompt "<|im_end|>" --chat \
    --max-new 1
# The answer ends at <|im_end|> (greedy: a short answer, well before 200
# tokens), not at the token limit.
json '"finish": "stop"' --model smollm2 --prompt "What is 2 + 2?" --chat \
    --max-new 200 --temperature 0
# Invalid UTF-8: each byte that starts no character is U+FFFD.
json '"prompt_tokens": 2,' --model smollm2 --prompt "$(printf '\303\303')" \
    --max-new 1
# The demo: 32 chat requests sharing the system prompt, hits for all but
# the first (their shared blocks).
json '"prompt": "Comets"' --model smollm2 --max-new 2
grep -q '"prefix_hit_tokens": [1-9]' "$tmp/out" ||
    fail "$name demo: no prefix hits: $(tail -n 1 "$tmp/out")"
# The model's context.
expect 2 "--ctx 9000: more than the model's context of 8192 tokens" \
    --model smollm2 --prompt x --ctx 9000
# --warmup: the reported run samples the same tokens as a run alone
# (sampled, so that a sampling state the warm-up moved would show), and
# it is refused where nothing is served.
json '"prompt_tokens": 5,' --model smollm2 --prompt "The capital of France is" \
    --max-new 12 --temperature 0.8 --seed 7
grep -o '"tokens": \[[^]]*\]' "$tmp/out" >"$tmp/alone"
json '"prompt_tokens": 5,' --model smollm2 --prompt "The capital of France is" \
    --max-new 12 --temperature 0.8 --seed 7 --warmup
grep -o '"tokens": \[[^]]*\]' "$tmp/out" | cmp -s - "$tmp/alone" ||
    fail "$name --warmup: other tokens than alone: $(cat "$tmp/out")"
expect 2 "--warmup is for serving" --model smollm2 --warmup \
    --perplexity /dev/null
echo "pkv-gguf smollm2 cli ok"
