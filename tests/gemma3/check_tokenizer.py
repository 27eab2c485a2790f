#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The Gemma 3 host's tokenizer against SentencePiece itself.

Usage: check_tokenizer.py GGUF GGUF_TOKENIZE_BINARY
                          [--llama-tokenize LLAMA_TOKENIZE_BINARY]

A SentencePiece model is rebuilt from the GGUF's vocabulary (the pieces,
scores and types llama.cpp's converter copied out of Gemma's
tokenizer.model) and loaded with PyPI sentencepiece; its ids for the
strings below, for invalid UTF-8, for a few hundred seeded random byte
strings (valid and invalid UTF-8), and for
/usr/share/common-licenses/GPL-3 when present, must equal gguf-tokenize's
(built from tests/gemma3/tokenize.c, reading the vocabulary of the same
GGUF through ggml's gguf reader; it also checks each count against
gg_tokenize_bound). With --parse-special, the texts of control pieces
must read as their ids and the text between them as SentencePiece reads
it. gguf-tokenize --decode then checks every valid string decodes back.
With --llama-tokenize, the valid strings are also given to llama.cpp's
llama-tokenize, the tokenizer the host copies, including those
SentencePiece is known to read otherwise.

Exit 0 when all agree, 1 showing the first difference, 77 when
sentencepiece (or gguf) cannot be imported.
"""
import os
import random
import re
import subprocess
import sys
import tempfile

sys.path.insert(0,
                os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tokenizer_cases import (INVALID, STRINGS, check_gpl3,  # noqa: E402
                             compare, fail, gg_lines, ids_of,
                             random_strings, valid_utf8)

try:
    import gguf
    from sentencepiece import SentencePieceProcessor
    from sentencepiece import sentencepiece_model_pb2 as pb
except ImportError as e:
    print(f"check_tokenizer: skipped, {e}")
    sys.exit(77)

# Strings where SentencePiece itself and llama.cpp part ways, checked
# against llama.cpp only (--llama-tokenize); gguf-tokenize follows llama.cpp,
# whose converter and runtime this model is used with.
LLAMA_ONLY = [
    # "</s>" is user-defined in Gemma's vocabulary, so SentencePiece cuts it
    # out whole (id 212) wherever it appears; llama.cpp's loader turns it
    # into a control token (an end-of-generation text), which plain text
    # never matches, so it is merged like any text: "</", "s", ">" (and
    # "'>▁</'" after a space and a ">").
    "a</s>b",
    "</s>",
    "<0x41> </s> <unused5>",
    # A literal U+2581: SentencePiece cannot tell it from an escaped space,
    # so "\u2581\u2581" is its user-defined two-space piece; llama.cpp cuts
    # the space runs out of the raw text, where they are still spaces.
    "\u2581\u2581x \u2581",
]

# Strings that cannot decode back to themselves: U+2581 decodes to a
# space.
NO_ROUND_TRIP = {s for s in STRINGS + LLAMA_ONLY if "\u2581" in s}

def known_apart(b):
    """Texts where SentencePiece and llama.cpp are known to part ways
    (LLAMA_ONLY): the host follows llama.cpp there."""
    return b"</s>" in b or "\u2581".encode() in b


def sp_model(gguf_path):
    """A SentencePiece processor of the GGUF's vocabulary, set up as
    Gemma's tokenizer.model is: a BPE model (its scores are minus the merge
    rank) with byte fallback, identity normalization, spaces escaped to
    U+2581, no dummy prefix, no whitespace folding."""
    reader = gguf.GGUFReader(gguf_path)
    f = reader.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
    scores = reader.fields["tokenizer.ggml.scores"].contents()
    types = reader.fields["tokenizer.ggml.token_type"].contents()

    def key(k):
        return reader.fields[f"tokenizer.ggml.{k}"].contents()

    m = pb.ModelProto()
    for text, score, kind in zip(tokens, scores, types):
        if kind == pb.ModelProto.SentencePiece.USER_DEFINED:
            # The converter wrote the user-defined space runs with spaces
            # ("pre-normalize user-defined spaces") for llama.cpp, which
            # cuts them out of the raw text; SentencePiece matches them in
            # the escaped text.
            text = text.replace(" ", "\u2581")
        p = m.pieces.add()
        p.piece = text
        p.score = score
        p.type = kind
    t = m.trainer_spec
    t.model_type = pb.TrainerSpec.BPE
    t.vocab_size = len(tokens)
    t.byte_fallback = True
    t.split_digits = True
    t.unk_id = key("unknown_token_id")
    t.bos_id = key("bos_token_id")
    t.eos_id = key("eos_token_id")
    t.pad_id = key("padding_token_id")
    t.unk_piece = tokens[t.unk_id]
    t.bos_piece = tokens[t.bos_id]
    t.eos_piece = tokens[t.eos_id]
    t.pad_piece = tokens[t.pad_id]
    n = m.normalizer_spec
    n.name = "identity"
    n.add_dummy_prefix = bool(key("add_space_prefix"))
    n.remove_extra_whitespaces = False
    n.escape_whitespaces = True
    sp = SentencePieceProcessor()
    sp.LoadFromSerializedProto(m.SerializeToString())
    # The pieces llama.cpp's parse_special cuts out of the text besides the
    # user-defined ones: control and unknown pieces, and "</s>", which its
    # loader makes a control piece.
    control = {t: i for i, (t, k) in enumerate(zip(tokens, types))
               if k in (pb.ModelProto.SentencePiece.CONTROL,
                        pb.ModelProto.SentencePiece.UNKNOWN) or t == "</s>"}
    return sp, control


def special_ids(sp, control, s):
    """The ids of s with control-piece texts read as their ids (longest
    first: no two of them overlap in these strings) and SentencePiece's
    ids for the text between them."""
    pattern = "(" + "|".join(map(re.escape, sorted(control, key=len,
                                                   reverse=True))) + ")"
    ids = []
    for i, part in enumerate(re.split(pattern, s)):
        ids += [control[part]] if i % 2 else sp.encode(part)
    return ids


def special_strings(control, seed=20260215, count=60):
    """Chat-format strings, and count seeded random mixes of control-piece
    texts, user-defined pieces and plain text."""
    out = [
        "<start_of_turn>user\nWrite a poem.<end_of_turn>\n"
        "<start_of_turn>model\n",
        "<bos>text<eos>",
        "a</s>b",
        "<unused5>x<mask><pad><unk>",
        "<start_of_turn <end_of_turn> <start_of_turn>>",
    ]
    rng = random.Random(seed)
    names = sorted(control)
    plain = ["a", " ", "  ", "\n", "<", ">", "user", "<b>", "[multimodal]",
             "é"]
    while len(out) < count:
        out.append("".join(rng.choice(names) if rng.random() < 0.3
                           else rng.choice(plain)
                           for _ in range(rng.randint(1, 12))))
    return out


def llama_ids(binary, gguf_path, s):
    with tempfile.NamedTemporaryFile(delete=False) as f:
        f.write(s.encode("utf-8"))
    try:
        r = subprocess.run(
            [binary, "-m", gguf_path, "-f", f.name, "--ids", "--no-bos",
             "--no-escape", "--no-parse-special", "--log-disable"],
            capture_output=True)
    finally:
        os.unlink(f.name)
    if r.returncode != 0:
        fail(f"llama-tokenize: exit {r.returncode}")
    out = r.stdout.decode().strip()
    return [int(x) for x in out.strip("[]").split(",") if x.strip()]


def main(argv):
    llama = None
    if len(argv) == 5 and argv[3] == "--llama-tokenize":
        llama = argv[4]
        argv = argv[:3]
    if len(argv) != 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    gguf_path, binary = argv[1:]
    sp, control = sp_model(gguf_path)

    lines = gg_lines(binary, gguf_path, STRINGS + LLAMA_ONLY)
    got = dict(zip(STRINGS + LLAMA_ONLY, map(ids_of, lines)))
    tokens = 0
    for s in STRINGS:
        compare("string", s, sp.encode(s), got[s], "SentencePiece")
        tokens += len(got[s])
    checked = f"{len(STRINGS)} strings ({tokens} tokens)"

    randoms = random_strings(lambda b: not known_apart(b))
    invalid = INVALID + randoms
    for s, line in zip(invalid, gg_lines(binary, gguf_path, invalid)):
        compare("bytes", s, sp.encode(s), ids_of(line), "SentencePiece")
    bad = sum(not valid_utf8(s) for s in invalid)
    checked += f", {len(invalid)} byte strings ({bad} invalid UTF-8)"

    specials = special_strings(control)
    lines = gg_lines(binary, gguf_path, specials, flags=["--parse-special"])
    for s, line in zip(specials, lines):
        compare("--parse-special", s, special_ids(sp, control, s),
                ids_of(line), "control ids + SentencePiece")
    checked += f", {len(specials)} with control pieces"

    checked += check_gpl3(binary, gguf_path, sp.encode, "SentencePiece")

    gg_lines(binary, gguf_path,
             [s for s in STRINGS + LLAMA_ONLY if s not in NO_ROUND_TRIP] +
             [s for s in randoms if valid_utf8(s)], decode=True)
    checked += ", all decode back"

    if llama is not None:
        for s in STRINGS + LLAMA_ONLY:
            compare("string", s, llama_ids(llama, gguf_path, s), got[s],
                    "llama.cpp")
        checked += f"; {len(STRINGS) + len(LLAMA_ONLY)} strings equal " \
                   "llama.cpp's"
    print(f"check_tokenizer: ok: {checked}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
