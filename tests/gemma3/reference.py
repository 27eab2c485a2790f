#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Independent numpy reference for the Gemma 3 (270M) forward pass.

Reads a GGUF file with ggml's own `gguf` package, dequantizes every tensor to
float32 with `gguf.quants.dequantize` (no f16 rounding). The transformer
blocks run in float64 (weights are the exact dequantized float32 values,
widened); only the tied output head (262144 x 640) runs as a float32 matmul
on the float64 hidden state rounded to float32 (tests/reference_run.py).

The architecture follows llama.cpp's gemma3 implementation (llm_build_gemma3
and its gemma3 hyperparameter loading):
  - embedding row scaled by sqrt(n_embd); logits tied to token_embd;
  - sandwich norms: attn_norm / post_attention_norm / ffn_norm / post_ffw_norm,
    all RMSNorm x / sqrt(mean(x^2) + eps) times a weight that already includes
    Gemma's +1 (added by llama.cpp's converter);
  - per-head RMSNorm of q and k (attn_q_norm / attn_k_norm), then NEOX RoPE
    (pairs (i, i + head_dim/2)); query scaled by 1/sqrt(head_dim);
  - GQA softmax attention; every 6th layer (il % 6 == 5) is global with rope
    base gemma3.rope.freq_base, the others are sliding-window (query p sees key
    j iff 0 <= p - j < sliding_window) with rope base 10000;
  - FFN: down(gelu_tanh(gate h) * up h);
  - final logit softcapping only if the file has gemma3.final_logit_softcapping.

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


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def rope_neox(x, pos, base):
    """NEOX RoPE on x [m, heads, d]: rotate pairs (i, i + d/2) by pos * base^(-2i/d)."""
    half = x.shape[-1] // 2
    inv = base ** (-np.arange(half, dtype=F) * 2.0 / x.shape[-1])
    ang = pos.astype(F)[:, None, None] * inv            # [m, 1, half]
    c, s = np.cos(ang), np.sin(ang)
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


class Gemma3:
    def __init__(self, path):
        r = gguf.GGUFReader(path)
        arch = r.fields["general.architecture"].contents()
        if arch != "gemma3":
            sys.exit(f"unsupported architecture {arch!r}")

        def kv(key, default=None):
            f = r.fields.get(f"{arch}.{key}")
            return default if f is None else f.contents()

        self.n_layer = kv("block_count")
        self.n_embd = kv("embedding_length")
        self.n_head = kv("attention.head_count")
        self.n_head_kv = kv("attention.head_count_kv")
        self.head_dim = kv("attention.key_length")
        self.eps = kv("attention.layer_norm_rms_epsilon")
        self.base_full = kv("rope.freq_base")
        self.base_swa = 10000.0                   # fixed in llama.cpp for gemma3
        self.window = kv("attention.sliding_window")
        self.softcap = kv("final_logit_softcapping", 0.0)
        assert kv("attention.value_length") == self.head_dim

        # GGUF ne = [in, out]; the reader gives row-major [out][in], i.e. y = W @ x.
        w = {t.name: gguf.quants.dequantize(t.data, t.tensor_type) for t in r.tensors}
        self.embd = w.pop("token_embd.weight")    # [vocab][n_embd], kept float32
        self.out = self.embd
        self.n_vocab = self.embd.shape[0]
        assert self.embd.shape == (self.n_vocab, self.n_embd)
        self.output_norm = w.pop("output_norm.weight").astype(F)
        assert "output.weight" not in w, "untied output head not supported"
        self.layers = []
        for il in range(self.n_layer):
            p = f"blk.{il}."
            self.layers.append({k[len(p):].removesuffix(".weight"): w.pop(k).astype(F)
                                for k in [k for k in w if k.startswith(p)]})
        L = self.layers[0]
        qd, kd = self.n_head * self.head_dim, self.n_head_kv * self.head_dim
        assert L["attn_q"].shape == (qd, self.n_embd)
        assert L["attn_k"].shape == L["attn_v"].shape == (kd, self.n_embd)
        assert L["attn_output"].shape == (self.n_embd, qd)

    def new_cache(self):
        """Per-layer K (normed, roped) and V, each [T, n_head_kv, head_dim]."""
        e = np.zeros((0, self.n_head_kv, self.head_dim), F)
        return {"n": 0, "k": [e] * self.n_layer, "v": [e] * self.n_layer}

    def forward(self, ids, cache):
        """Run tokens `ids` at positions cache["n"]...; returns final-normed hidden [m][n_embd]."""
        m, hd, nkv = len(ids), self.head_dim, self.n_head_kv
        grp = self.n_head // nkv                  # query heads per kv head
        pos = np.arange(cache["n"], cache["n"] + m)
        kpos = np.arange(cache["n"] + m)
        dist = pos[:, None] - kpos[None, :]       # query pos - key pos, [m, T]
        mask_full = dist >= 0
        mask_swa = mask_full & (dist < self.window)

        x = self.embd[ids].astype(F) * np.sqrt(F(self.n_embd))
        for il, L in enumerate(self.layers):
            full = il % 6 == 5
            base, mask = (self.base_full, mask_full) if full else (self.base_swa, mask_swa)

            h = rmsnorm(x, L["attn_norm"], self.eps)
            q = (h @ L["attn_q"].T).reshape(m, self.n_head, hd)
            k = (h @ L["attn_k"].T).reshape(m, nkv, hd)
            v = (h @ L["attn_v"].T).reshape(m, nkv, hd)
            q = rope_neox(rmsnorm(q, L["attn_q_norm"], self.eps), pos, base) / np.sqrt(F(hd))
            k = rope_neox(rmsnorm(k, L["attn_k_norm"], self.eps), pos, base)
            K = cache["k"][il] = np.concatenate([cache["k"][il], k])
            V = cache["v"][il] = np.concatenate([cache["v"][il], v])

            # [nkv, grp, m, hd] @ [nkv, 1, hd, T] -> scores [nkv, grp, m, T]
            qg = q.reshape(m, nkv, grp, hd).transpose(1, 2, 0, 3)
            s = qg @ K.transpose(1, 2, 0)[:, None]
            s = np.where(mask, s, -np.inf)
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            o = s @ V.transpose(1, 0, 2)[:, None]     # [nkv, grp, m, hd]
            o = o.transpose(2, 0, 1, 3).reshape(m, self.n_head * hd)
            x = x + rmsnorm(o @ L["attn_output"].T, L["post_attention_norm"], self.eps)

            h = rmsnorm(x, L["ffn_norm"], self.eps)
            f = (gelu_tanh(h @ L["ffn_gate"].T) * (h @ L["ffn_up"].T)) @ L["ffn_down"].T
            x = x + rmsnorm(f, L["post_ffw_norm"], self.eps)
        cache["n"] += m
        return rmsnorm(x, self.output_norm, self.eps)


if __name__ == "__main__":
    reference_run.main(Gemma3, __doc__.split("\n")[0])
