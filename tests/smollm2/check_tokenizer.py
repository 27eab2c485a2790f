#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The GGUF host's byte-level BPE tokenizer against Hugging Face's
tokenizers, on SmolLM2-135M-Instruct's vocabulary.

Usage: check_tokenizer.py GGUF GGUF_TOKENIZE_BINARY

A tokenizers Tokenizer is built from the GGUF's vocabulary and merges
(those llama.cpp's converter copied out of SmolLM2's tokenizer.json) with
SmolLM2's pre-tokenizer (every digit apart, then GPT-2's ByteLevel
expression) and loaded with PyPI tokenizers; its ids must equal
gguf-tokenize's (built from tests/gguf_tokenize.c, reading the same GGUF
through ggml's gguf reader; it also checks each count against
gg_tokenize_bound) on the cases Gemma's tokenizer is checked on
(tests/tokenizer_cases.py): texts of every kind, invalid UTF-8 (given to
tokenizers with each byte that starts no valid character decoded as
U+FFFD, as the host reads it), a few hundred seeded random byte strings
(valid and invalid UTF-8), and /usr/share/common-licenses/GPL-3 when
present. With --parse-special, the texts of control pieces must read as
their ids (the Tokenizer given them as special added tokens) and the
text between them as plain text. gguf-tokenize --decode then checks every
valid string decodes back.

Exit 0 when all agree, 1 showing the first difference, 77 when tokenizers
(or gguf) cannot be imported.
"""
import os
import random
import sys

sys.path.insert(0,
                os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tokenizer_cases import (INVALID, STRINGS, as_host_reads,  # noqa: E402
                             check_gpl3, compare, fail, gg_lines, ids_of,
                             random_strings, valid_utf8)

try:
    import gguf
    from tokenizers import AddedToken, Tokenizer, decoders, models
    from tokenizers import pre_tokenizers
except ImportError as e:
    print(f"check_tokenizer: skipped, {e}")
    sys.exit(77)

CONTROL = 3

# Chat texts and SmolLM2's own markers, as plain text and (with
# --parse-special) as their tokens.
CHAT = [
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n"
    "Hi!<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>text<|im_end|>",
    "<|im_start|<|im_end|> <|im_start|>> <repo_name>x<reponame>",
    "a<|im_end|>b<file_sep>c<jupyter_code>d",
    "1<|im_start|>2",
]


def hf_tokenizer(gguf_path, special):
    """tokenizers' BPE on the GGUF's vocabulary and merges, SmolLM2's
    pre-tokenizer; with special, its control pieces as special added
    tokens (cut out of the text whole, as llama.cpp's parse_special
    does)."""
    reader = gguf.GGUFReader(gguf_path)
    f = reader.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
    f = reader.fields["tokenizer.ggml.merges"]
    merges = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    pre = reader.fields["tokenizer.ggml.pre"].contents()
    if pre != "smollm":
        fail(f"tokenizer.ggml.pre is {pre!r}, this check builds 'smollm'")
    # As llama.cpp splits a merge: at its first space after the first
    # byte.
    pairs = [(m[:m.index(" ", 1)], m[m.index(" ", 1) + 1:]) for m in merges]
    t = Tokenizer(models.BPE(vocab={s: i for i, s in enumerate(tokens)},
                             merges=pairs))
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    t.decoder = decoders.ByteLevel()
    control = {s: i for i, (s, k) in enumerate(zip(tokens, types))
               if k == CONTROL}
    if special:
        t.add_special_tokens([AddedToken(s, special=True, normalized=False)
                              for s in control])
    return t, control


def hf_ids(t, s):
    text = as_host_reads(s) if isinstance(s, bytes) else s
    return t.encode(text, add_special_tokens=False).ids


def special_strings(control, seed=20260215, count=60):
    """CHAT, and count seeded random mixes of control-piece texts and
    plain text."""
    out = list(CHAT)
    rng = random.Random(seed)
    names = sorted(control)
    plain = ["a", " ", "  ", "\n", "<", ">", "|", "user", "12", "é"]
    while len(out) < count:
        out.append("".join(rng.choice(names) if rng.random() < 0.3
                           else rng.choice(plain)
                           for _ in range(rng.randint(1, 12))))
    return out


def main(argv):
    if len(argv) != 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    gguf_path, binary = argv[1:]
    plain, control = hf_tokenizer(gguf_path, False)
    special, _ = hf_tokenizer(gguf_path, True)

    strings = STRINGS + CHAT
    tokens = 0
    for s, line in zip(strings, gg_lines(binary, gguf_path, strings)):
        compare("string", s, hf_ids(plain, s), ids_of(line), "tokenizers")
        tokens += len(ids_of(line))
    checked = f"{len(strings)} strings ({tokens} tokens)"

    randoms = random_strings()
    invalid = INVALID + randoms
    for s, line in zip(invalid, gg_lines(binary, gguf_path, invalid)):
        compare("bytes", s, hf_ids(plain, s), ids_of(line), "tokenizers")
    bad = sum(not valid_utf8(s) for s in invalid)
    checked += f", {len(invalid)} byte strings ({bad} invalid UTF-8)"

    specials = special_strings(control)
    lines = gg_lines(binary, gguf_path, specials, flags=["--parse-special"])
    for s, line in zip(specials, lines):
        compare("--parse-special", s, hf_ids(special, s), ids_of(line),
                "tokenizers with special tokens")
    checked += f", {len(specials)} with control pieces"

    checked += check_gpl3(binary, gguf_path, lambda text: hf_ids(plain, text), "tokenizers")

    gg_lines(binary, gguf_path,
             strings + [s for s in randoms if valid_utf8(s)], decode=True)
    checked += ", all decode back"
    print(f"check_tokenizer: ok: {checked}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
