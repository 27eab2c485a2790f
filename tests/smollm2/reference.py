#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Independent numpy reference for a llama-architecture forward pass
(SmolLM2-135M-Instruct).

Reads a GGUF file with ggml's own `gguf` package and dequantizes every
tensor to float32 with `gguf.quants.dequantize` (Q4_1, Q8_0, ...). The
transformer blocks run in float64 (the weights are the exact dequantized
float32 values, widened); the output head (tied to token_embd unless the
file has output.weight) runs as a float32 matmul on the float64 hidden
state rounded to float32.

The architecture follows llama.cpp's llama graph:
  - pre-norm layers, RMSNorm x / sqrt(mean(x^2) + eps) times a weight:
    x += attn(norm(x) * attn_norm); x += ffn(norm(x) * ffn_norm);
  - RoPE on adjacent pairs (2i, 2i + 1) of each head, theta
    base^(-2i/head_dim), base llama.rope.freq_base (the converter
    permuted q and k for this form); query scaled by 1/sqrt(head_dim);
  - grouped-query softmax attention over every earlier token (no window);
  - FFN: down(silu(gate h) * up h); final RMSNorm, then the output head.

Usage: as tests/reference_run.py says.
"""
import os
import sys

import gguf
import numpy as np

sys.path.insert(0,
                os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import reference_run  # noqa: E402
from reference_run import F, rmsnorm  # noqa: E402


def silu(x):
    return x / (1.0 + np.exp(-x))


def rope_pairs(x, pos, base):
    """RoPE on x [m, heads, d], rotating adjacent pairs (2i, 2i + 1) by
    pos * base^(-2i/d)."""
    d = x.shape[-1]
    inv = base ** (-np.arange(0, d, 2, dtype=F) / d)
    ang = pos.astype(F)[:, None, None] * inv            # [m, 1, d/2]
    c, s = np.cos(ang), np.sin(ang)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x0 * s + x1 * c
    return out


class Llama:
    def __init__(self, path):
        r = gguf.GGUFReader(path)
        arch = r.fields["general.architecture"].contents()
        if arch != "llama":
            sys.exit(f"unsupported architecture {arch!r}")

        def kv(key, default=None):
            f = r.fields.get(f"{arch}.{key}")
            return default if f is None else f.contents()

        self.n_layer = kv("block_count")
        self.n_embd = kv("embedding_length")
        self.n_head = kv("attention.head_count")
        self.n_head_kv = kv("attention.head_count_kv")
        self.head_dim = kv("attention.key_length",
                           self.n_embd // self.n_head)
        self.eps = kv("attention.layer_norm_rms_epsilon")
        self.base = kv("rope.freq_base", 10000.0)

        # GGUF ne = [in, out]; the reader gives row-major [out][in]: y = W @ x.
        w = {t.name: gguf.quants.dequantize(t.data, t.tensor_type)
             for t in r.tensors}
        self.embd = w.pop("token_embd.weight")    # [vocab][n_embd], float32
        self.out = w.pop("output.weight", self.embd)
        self.softcap = 0.0
        self.n_vocab = self.embd.shape[0]
        self.output_norm = w.pop("output_norm.weight").astype(F)
        self.layers = []
        for il in range(self.n_layer):
            p = f"blk.{il}."
            self.layers.append({k[len(p):].removesuffix(".weight"):
                                w.pop(k).astype(F)
                                for k in [k for k in w if k.startswith(p)]})
        L = self.layers[0]
        qd = self.n_head * self.head_dim
        kd = self.n_head_kv * self.head_dim
        assert L["attn_q"].shape == (qd, self.n_embd)
        assert L["attn_k"].shape == L["attn_v"].shape == (kd, self.n_embd)

    def new_cache(self):
        e = np.zeros((0, self.n_head_kv, self.head_dim), F)
        return {"n": 0, "k": [e] * self.n_layer, "v": [e] * self.n_layer}

    def forward(self, ids, cache):
        """Tokens ids at positions cache["n"]...; final-normed hidden
        [m][n_embd]."""
        m, hd, nkv = len(ids), self.head_dim, self.n_head_kv
        grp = self.n_head // nkv
        pos = np.arange(cache["n"], cache["n"] + m)
        kpos = np.arange(cache["n"] + m)
        mask = pos[:, None] - kpos[None, :] >= 0
        x = self.embd[ids].astype(F)
        for il, L in enumerate(self.layers):
            h = rmsnorm(x, L["attn_norm"], self.eps)
            q = (h @ L["attn_q"].T).reshape(m, self.n_head, hd)
            k = (h @ L["attn_k"].T).reshape(m, nkv, hd)
            v = (h @ L["attn_v"].T).reshape(m, nkv, hd)
            q = rope_pairs(q, pos, self.base) / np.sqrt(F(hd))
            k = rope_pairs(k, pos, self.base)
            K = cache["k"][il] = np.concatenate([cache["k"][il], k])
            V = cache["v"][il] = np.concatenate([cache["v"][il], v])
            qg = q.reshape(m, nkv, grp, hd).transpose(1, 2, 0, 3)
            s = qg @ K.transpose(1, 2, 0)[:, None]    # [nkv, grp, m, T]
            s = np.where(mask, s, -np.inf)
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            o = s @ V.transpose(1, 0, 2)[:, None]     # [nkv, grp, m, hd]
            o = o.transpose(2, 0, 1, 3).reshape(m, self.n_head * hd)
            x = x + o @ L["attn_output"].T
            h = rmsnorm(x, L["ffn_norm"], self.eps)
            f = (silu(h @ L["ffn_gate"].T) * (h @ L["ffn_up"].T)) \
                @ L["ffn_down"].T
            x = x + f
        cache["n"] += m
        return rmsnorm(x, self.output_norm, self.eps)


if __name__ == "__main__":
    reference_run.main(Llama, __doc__.split("\n")[0])
