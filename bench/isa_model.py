#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The decode step on Intel GPUs, modelled from what their compiler made
of pkv's intel decode kernel: memory time (the KV bytes a step reads, at
80% of the memory's peak, as in docs/performance.md's bandwidth model)
against ALU issue time (the hottest loops' cycles per K and V byte, from
`pkv-bench isa --json`, times the bytes, over EUs x clock). A SIMD16 f32
instruction takes 2 cycles of an EU's 8-wide ALU; sends and control flow
are not counted; the predicted step time is the longer of the two; the
softmax, the query and the epilogue are left out
(a few percent of the loops' cycles at 256-token partitions). KV: f16,
u8 and u4 with their default groups (per-channel keys, per-token values;
u4 groups of 32 channels), parameters as f16 lo and scale, block 16.

Usage: pkv-bench isa --json isa.json; python3 bench/isa_model.py isa.json
"""
import json
import sys

# Each target: EUs, GPU clock (GHz), memory peak (GB/s). tgllp: Iris Xe
# of the Core i7-1185G7 (96 EUs, 1.35 GHz, LPDDR4x-4266 128-bit); adl-p:
# Iris Xe of the Core i7-1280P (96 EUs, 1.45 GHz, LPDDR5-5200 128-bit);
# dg2-g10: Arc A770 (32 Xe-cores of 16 EUs, 2.1 GHz, GDDR6 16 Gb/s
# 256-bit). Intel's product pages for the EUs and clocks.
dev = {"tgllp": (96, 1.35, 68.3), "adl-p": (96, 1.45, 83.2), "dg2-g10": (512, 2.1, 512.0)}
# Geometry: layers, kv heads, head_dim, group (Llama-3-70B: GQA 8, twice
# the fmas per KV byte).
geo = {"Llama-3-8B": (32, 8, 128, 4), "Gemma 3 270M": (18, 1, 256, 4),
       "Llama-3-70B": (80, 8, 128, 8)}
isa = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("kernel") == "pkv_decode_partial":
        isa[(r["device"], r["program"])] = r
tokens, eff = 16 * 4096, 0.8  # batch 16 x ctx 4096
print("| device | model | KV | bytes/token | memory ms | instruction ms | ratio | predicted ms |")
print("|---|---|---|---:|---:|---:|---:|---:|")
for name, (L, hkv, d, g) in geo.items():
    for dv, (eu, ghz, bw) in dev.items():
        # KV, build label, element bytes, value groups a row (0: none).
        for kv, lab, eb, vg in (("f16", "kv1-k1-v1", 2, 0), ("u8", "kv2-k1-v2", 1, 1),
                                ("u4", "kv3-k1-v2", 0.5, d // 32)):
            r = isa[(dv, "intel-d%d-g%d-b16-%s" % (d, g, lab))]
            code = hkv * d * eb  # K or V code bytes per token and layer
            # Per-channel keys: 4 bytes a channel over 16 tokens; per-token
            # values: 4 bytes a group.
            params = hkv * (d * 4 / 16 + 4 * vg) if vg else 0
            nbytes = 2 * code + params
            mem = tokens * L * nbytes / (eff * bw * 1e9) * 1e3
            cyc = r["kb_cyc"] * code + r["vb_cyc"] * code
            ins = tokens * L * cyc / (eu * ghz * 1e9) * 1e3
            # The step takes the longer of the two (no overlap is modelled
            # beyond that).
            print("| %s | %s | %s | %d | %.1f | %.1f | %.2f | %.1f |" % (dv, name, kv, nbytes, mem, ins, ins / mem, max(mem, ins)))
