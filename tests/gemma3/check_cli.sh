#!/bin/sh
# SPDX-License-Identifier: MIT
# pkv-gemma3's command line, without the model: a bad argument is named
# (exit 2), a missing model file says how to get one, a bad one why
# (exit 1).
# Usage: check_cli.sh path/to/pkv-gemma3
set -u

name=pkv-gemma3
binary=$1
. "$(dirname "$0")/../cli_lib.sh"
expect 2 "--kv u9: expected f32, f16, u8, u4 or u8k-u4v" --kv u9
expect 2 "--top-p 0: expected a number in (0, 1]" --top-p 0
expect 2 "--keys needs a value" --keys
expect 2 "unknown option --frobnicate" --frobnicate
expect 2 "exclude each other" --prompt a --file b
expect 2 "--logits needs --prompt-ids" --logits x
expect 1 "sh examples/gemma3/setup.sh" --weights "$tmp/none.gguf"
printf 'not a model file' >"$tmp/bad.gguf"
expect 1 "not a readable GGUF file: not one, truncated or damaged" --weights "$tmp/bad.gguf"
# A GGUF v3 header with no tensors and no keys.
printf 'GGUF\003\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000' \
    >"$tmp/empty.gguf"
expect 1 "no key general.architecture in the file" --weights "$tmp/empty.gguf"
echo "pkv-gemma3 cli ok"
