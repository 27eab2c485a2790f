# SPDX-License-Identifier: MIT
"""What the numpy references of the GGUF host's models share
(tests/gemma3/reference.py, tests/smollm2/reference.py): the output head
over the vocabulary in chunks, and the command line that runs a prompt
and a greedy continuation and writes the logits. A model class gives
n_vocab, out (the [vocab][n_embd] float32 output matrix), softcap (0 for
none), new_cache() and forward(ids, cache) -> final-normed hidden rows.

Usage of a reference: reference.py GGUF IDS_FILE OUT_PREFIX
                      [--logits-from K] [--greedy N]
  IDS_FILE   whitespace-separated token ids (used as is; no BOS is added)
  OUT.logits float32 little-endian logits of prompt rows K..n-1, vocab each
             (default K = max(0, n - 64))
  OUT.json   {"n", "logits_from", "argmax" and "margin" (top-1 minus
              top-2 logit) per prompt row, "greedy": N tokens of greedy
              continuation, "greedy_margin": the margin of each}
"""
import argparse
import json
import sys
import time

import numpy as np

F = np.float64        # compute precision of the transformer blocks
VOCAB_CHUNK = 8192    # output rows per logits chunk (bounds memory)


def rmsnorm(x, w, eps):
    """RMSNorm over the last axis, times weight w."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def head_logits(model, h, sink=None, first=0):
    """The logits of hidden rows h [n][n_embd], chunked over the vocab: the
    output head as a float32 matmul on h rounded to float32 (measured
    error on Gemma 3 <= ~3e-5 absolute on logits up to ~36).

    Returns the argmax of every row (first maximum on ties) and its
    margin over the second largest logit. If `sink` ([n - first][vocab])
    is given, rows first..n-1 are stored there."""
    n = h.shape[0]
    h32 = h.astype(np.float32)
    best = np.full(n, -np.inf)
    second = np.full(n, -np.inf)
    arg = np.zeros(n, dtype=np.int64)
    rows = np.arange(n)
    for c in range(0, model.n_vocab, VOCAB_CHUNK):
        lg = h32 @ model.out[c:c + VOCAB_CHUNK].T   # [n, chunk], float32
        if model.softcap:
            lg = np.tanh(lg / model.softcap) * model.softcap
        j = lg.argmax(axis=1)
        val = lg[rows, j].astype(np.float64)
        top2 = np.partition(lg, -2, axis=1)[:, -2].astype(np.float64)
        upd = val > best
        second = np.where(upd, np.maximum(best, top2),
                          np.maximum(second, val))
        best[upd], arg[upd] = val[upd], j[upd] + c
        if sink is not None:
            sink[:, c:c + lg.shape[1]] = lg[first:]
    return arg, best - second


def main(model_class, description):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("gguf")
    ap.add_argument("ids_file")
    ap.add_argument("out_prefix")
    ap.add_argument("--logits-from", type=int, default=None, metavar="K")
    ap.add_argument("--greedy", type=int, default=0, metavar="N")
    a = ap.parse_args()

    with open(a.ids_file) as f:
        ids = [int(t) for t in f.read().split()]
    n = len(ids)
    if n == 0:
        sys.exit("empty prompt")
    first = max(0, n - 64) if a.logits_from is None else a.logits_from
    if not 0 <= first <= n:
        sys.exit(f"--logits-from {first} outside 0..{n}")

    t0 = time.time()
    model = model_class(a.gguf)
    if max(ids) >= model.n_vocab or min(ids) < 0:
        sys.exit("token id out of range")
    t1 = time.time()

    cache = model.new_cache()
    h = model.forward(np.array(ids), cache)
    rows = n - first
    if rows:   # memmap: logits are written chunk by chunk, never all in memory
        sink = np.memmap(a.out_prefix + ".logits", dtype="<f4", mode="w+",
                         shape=(rows, model.n_vocab))
    else:
        open(a.out_prefix + ".logits", "wb").close()
        sink = None
    argmax, margin = head_logits(model, h, sink, first)
    if sink is not None:
        sink.flush()
        del sink
    t2 = time.time()

    greedy, greedy_margin = [], []
    nxt, gap = int(argmax[-1]), float(margin[-1])
    for i in range(a.greedy):
        greedy.append(nxt)
        greedy_margin.append(gap)
        if i + 1 < a.greedy:
            arg, mar = head_logits(model, model.forward(np.array([nxt]), cache))
            nxt, gap = int(arg[0]), float(mar[0])
    t3 = time.time()

    with open(a.out_prefix + ".json", "w") as f:
        json.dump({"n": n, "logits_from": first,
                   "argmax": [int(t) for t in argmax],
                   "margin": [float(g) for g in margin],
                   "greedy": greedy, "greedy_margin": greedy_margin}, f)
        f.write("\n")
    print(f"reference: load {t1 - t0:.1f}s, prompt {n} tokens {t2 - t1:.1f}s, "
          f"greedy {a.greedy} tokens {t3 - t2:.1f}s", file=sys.stderr)

