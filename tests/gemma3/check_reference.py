#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The Gemma 3 host (pkv-gemma3, f32 KV through pkv) against the
independent numpy forward pass of reference.py.

Usage: check_reference.py GGUF WEIGHTS PKV_GEMMA3 G3_TOKENIZE [BACKEND...]

The prompt is BOS and the first tokens of /usr/share/common-licenses/GPL-3,
PROMPT_LEN in all: past the 512-token window of the windowed layers, so
both kinds of layer are checked beyond the window's edge. For each backend
(default: cpu), the host's logits at the last LOGIT_ROWS positions must be
within LOGIT_TOLERANCE of the reference's (the host rounds its weights to
f16, the reference keeps gguf's f32 dequantization) with the same argmax,
and its greedy continuation of GREEDY tokens must be the reference's.

Exit 0 when they agree, 1 with the first difference, 77 when numpy or
gguf cannot be imported.
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import gguf  # noqa: F401 (reference.py needs it)
except ImportError as e:
    print(f"check_reference: skipped, {e}")
    sys.exit(77)

GPL3 = "/usr/share/common-licenses/GPL-3"
PROMPT_LEN = 600
LOGIT_ROWS = 64
GREEDY = 32
LOGIT_TOLERANCE = 0.05
BOS = 2
HERE = os.path.dirname(os.path.abspath(__file__))


def run(args):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(args)} exited {r.returncode}:\n"
                 f"{r.stderr.strip()}")
    return r.stdout


def main(argv):
    if len(argv) < 5:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    gguf_path, weights, host, tokenize = argv[1:5]
    backends = argv[5:] or ["cpu"]
    text_ids = [int(t) for t in run([tokenize, "--file", GPL3,
                                     weights]).split()]
    ids = [BOS] + text_ids[:PROMPT_LEN - 1]
    vocab = None
    with tempfile.TemporaryDirectory() as tmp:
        ids_path = os.path.join(tmp, "ids")
        with open(ids_path, "w") as f:
            f.write(" ".join(map(str, ids)) + "\n")
        first = PROMPT_LEN - LOGIT_ROWS
        ref = os.path.join(tmp, "ref")
        run([sys.executable, os.path.join(HERE, "reference.py"), gguf_path,
             ids_path, ref, "--logits-from", str(first), "--greedy",
             str(GREEDY)])
        with open(ref + ".json") as f:
            want = json.load(f)
        want_logits = np.fromfile(ref + ".logits", dtype="<f4")
        vocab = want_logits.size // LOGIT_ROWS
        want_logits = want_logits.reshape(LOGIT_ROWS, vocab)
        for backend in backends:
            got_path = os.path.join(tmp, f"{backend}.logits")
            common = ["--weights", weights, "--prompt-ids", ids_path,
                      "--kv", "f32", "--backend", backend]
            run([host, *common, "--logits", got_path,
                 "--logits-from", str(first)])
            got = np.fromfile(got_path, dtype="<f4").reshape(LOGIT_ROWS,
                                                             vocab)
            diff = np.abs(got.astype(np.float64) - want_logits)
            worst = np.unravel_index(np.argmax(diff), diff.shape)
            if diff[worst] > LOGIT_TOLERANCE:
                sys.exit(f"FAIL: {backend}: logit of token {worst[1]} at "
                         f"position {first + worst[0]} differs by "
                         f"{diff[worst]:.4f} (> {LOGIT_TOLERANCE})")
            argmax = got.argmax(axis=1).tolist()
            if argmax != want["argmax"][first:]:
                sys.exit(f"FAIL: {backend}: argmax {argmax} != reference "
                         f"{want['argmax'][first:]}")
            out = json.loads(run([host, *common, "--max-new", str(GREEDY),
                                  "--temperature", "0", "--json"]))
            tokens = out["requests"][0]["tokens"]
            if tokens != want["greedy"]:
                sys.exit(f"FAIL: {backend}: greedy {tokens} != reference "
                         f"{want['greedy']}")
            print(f"check_reference: {backend}: logits at positions "
                  f"{first}..{PROMPT_LEN - 1} within {diff.max():.4f} "
                  f"(mean {diff.mean():.5f}), same argmax; {GREEDY} greedy "
                  f"tokens equal")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
