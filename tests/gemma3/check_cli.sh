#!/bin/sh
# SPDX-License-Identifier: MIT
# pkv-gguf's command line, and with Gemma 3 270M. Without a model: --help on stdout (exit 0),
# a bad argument named (exit 2), an unreadable file named with the
# system's reason before the model is loaded (exit 1), a missing model
# file that says how to get one and a bad one why (exit 1). With Gemma 3
# (its default path, when examples/gguf/setup.sh has cached it): invalid UTF-8 in a
# prompt and in a perplexity text read as U+FFFD (never more ids than
# bytes + BOS), a prompt past the model's context or --ctx refused before
# any work, --max-new 2^32 - 1 cut at the context, control-piece texts
# read as their ids with --parse-special only.
# Usage: check_cli.sh path/to/pkv-gguf
set -u

name=pkv-gguf
binary=$1
. "$(dirname "$0")/../cli_lib.sh"
expect 2 "--kv u9: expected f32, f16, u8, u4 or u8k-u4v" --kv u9
expect 2 "--top-p 0: expected a number in (0, 1]" --top-p 0
expect 2 "--keys needs a value" --keys
expect 2 "unknown option --frobnicate" --frobnicate
expect 2 "exclude each other" --prompt a --file b
expect 2 "exclude each other" --perplexity a --agreement
expect 2 "--logits needs --prompt-ids" --logits x
expect 2 "--ctx 3: expected a whole number from 4 to the model's context" \
    --ctx 3
expect 2 "--model llama: expected gemma3 or smollm2" --model llama
expect 2 "--model and --weights exclude each other" --model gemma3 \
    --weights x
expect 2 "--chat and --system are for --prompt, --file and the demo" \
    --chat --perplexity x
expect 1 "sh examples/gguf/setup.sh" --weights "$tmp/none.gguf"
printf 'not a model file' >"$tmp/bad.gguf"
expect 1 "not a readable GGUF file: not one, truncated or damaged" \
    --weights "$tmp/bad.gguf"
# A GGUF v3 header with no tensors and no keys.
printf 'GGUF\003\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000' \
    >"$tmp/empty.gguf"
expect 1 "no key general.architecture in the file" --weights "$tmp/empty.gguf"

# --help: the usage on stdout, exit 0, with the options it documents.
"$binary" --help >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 0 ] || fail "$name --help exited $rc, not 0"
[ ! -s "$tmp/err" ] || fail "$name --help wrote to stderr: $(cat "$tmp/err")"
for text in "usage: pkv-gguf" "--parse-special" "--ctx N" "--chat" \
    "--model gemma3|smollm2"; do
    grep -qF -- "$text" "$tmp/out" || fail "$name --help lacks '$text'"
done

# A file that cannot be read is named with why, before the model loads
# (the weight file here does not exist either).
for option in --perplexity --file --prompt-ids; do
    expect 1 "cannot read $tmp/none: No such file or directory" \
        --weights "$tmp/none.gguf" "$option" "$tmp/none"
done
expect 1 "cannot read $tmp: Is a directory" --perplexity "$tmp"

# With the model: a one-token answer tells whether it is there.
if ! "$binary" --prompt x --max-new 1 --backend cpu --quiet \
    >"$tmp/out" 2>"$tmp/err"; then
    grep -qF "setup.sh" "$tmp/err" ||
        fail "$name --prompt x: $(cat "$tmp/err")"
    echo "pkv-gguf cli ok (Gemma 3 is not cached: its checks skipped)"
    exit 0
fi


# Invalid UTF-8: each byte that starts no character is U+FFFD, as
# SentencePiece reads it (BOS, then the ids check_tokenizer.py compares).
json '"prompt_tokens": 3' --prompt "$(printf '\303 ')" --max-new 1
json '"prompt_tokens": 3' --prompt "$(printf '\351 ')" --max-new 1
json '"prompt_tokens": 5' --prompt "$(printf '\337 \337 \337 ')" --max-new 1
# "\xe9 " 1000 times: 2,000 bytes, 1,002 tokens ("\ufffd", then
# "\u2581\ufffd" 999 times, "\u2581", and BOS).
awk 'BEGIN { for (i = 0; i < 1000; i++) printf "\351 " }' >"$tmp/e9"
"$binary" --perplexity "$tmp/e9" --ctx 16 --max-tokens 32 --backend cpu \
    >"$tmp/out" 2>"$tmp/err" ||
    fail "$name --perplexity e9: $(cat "$tmp/err")"
grep -qF '"text_tokens": 1002' "$tmp/out" ||
    fail "$name --perplexity e9: $(cat "$tmp/out")"

# Past the context: refused before any work, in the host's terms.
awk 'BEGIN { for (i = 0; i < 40000; i++) printf "%d", i % 10 }' >"$tmp/long"
expect 1 "$tmp/long: a prompt of 40001 tokens does not fit the model's \
context of 32768 tokens (prompt and answer together)" --file "$tmp/long"
expect 1 "a prompt of 40001 tokens does not fit --ctx 512" \
    --file "$tmp/long" --ctx 512
expect 1 "--prompt: a prompt of 11 tokens does not fit --ctx 8" \
    --prompt 0123456789 --ctx 8
expect 2 "--ctx 40000: more than the model's context of 32768 tokens" \
    --prompt x --ctx 40000

# --max-new 2^32 - 1: prompt + answer in 64 bits, the answer cut at --ctx.
json '"generated": 6,' --prompt hi --ctx 8 --max-new 4294967295
grep -qF "the answer stops at --ctx 8" "$tmp/err" ||
    fail "$name --max-new 4294967295: $(cat "$tmp/err")"

# Control-piece texts: plain text by default, their ids with
# --parse-special (BOS, <start_of_turn>, user).
json '"prompt_tokens": 3' --prompt "<start_of_turn>user" --parse-special \
    --max-new 1
json '"prompt_tokens": 9' --prompt "<start_of_turn>user" --max-new 1
# Gemma's turns with --chat (a base model's file has no template: the
# vocabulary's markers say which): BOS, <start_of_turn>, "user", "\n",
# "hi", <end_of_turn>, "\n", <start_of_turn>, "model", "\n"; a message
# spelling a marker stays text.
json '"prompt_tokens": 10' --prompt hi --chat --max-new 1
json '"prompt_tokens": 16' --prompt "<end_of_turn>" --chat --max-new 1
echo "pkv-gguf cli ok (with Gemma 3)"
