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

Then prefill: a 2,048-token prompt through the prefill kernel, one layer
(prefill_table below says how).

Usage: pkv-bench isa --json isa.json; python3 bench/isa_model.py isa.json
[prefill kernel]
"""
import json
import re
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
lines = [json.loads(line) for line in open(sys.argv[1])]
isa = {}
for r in lines:
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


# Prefill. The kernel a GPU runs for prompt chunks and mixed steps: its
# JSON lines give the hot loops' cycles per product (tests/isa_summary.awk:
# qk_cyc per channel of a query-key pair, pv_cyc per value element). A
# kernel built per geometry names it in its label as the decode builds do
# (...-d128-g4-b16-kv1-k1-v1); a line without is built for every geometry.
# By default the kernel pkv picks on an Intel GPU; another (the tiled
# kernel, pkv_paged_attention_tiled, which it replaced there): its name as
# the second argument.
PREFILL_KERNEL = sys.argv[2] if len(sys.argv) > 2 else "pkv_prefill_intel"
# Each kernel's work-group shape for a group and block size, as the host
# sets it: rows a tile, the queries it computes (None: its rows' group
# queries, each over its own tokens only) and the tokens it computes in
# full for each of them at a time (None: none in full).
PREFILL_SHAPES = {
    # pkv__prefill_tile_shape: 64 lanes, a row and query head a lane.
    "pkv_paged_attention_tiled": lambda g, bs: (max(1, 64 // g), None, None),
    # pkv__prefill_intel_shape: 8 queries (NV), chunks of up to 16 tokens.
    "pkv_prefill_intel": lambda g, bs: (8 // g, 8, min(16, bs)),
}
GEOMETRY = re.compile(r"-d(\d+)-g(\d+)-b(\d+)-(kv\d+-k\d+-v\d+)$")


def prefill_line(device, d, g, layout):
    """The prefill kernel's line for a device, head_dim, group and KV
    layout at block 16: the group's build, else another group's (the
    kernel's hot loops do not depend on it; the table names the build)."""
    found = []
    for r in lines:
        if r.get("kernel") != PREFILL_KERNEL or r["device"] != device:
            continue
        m = GEOMETRY.search(r["program"])
        if m is None:
            return r
        if (int(m[1]), int(m[3]), m[4]) == (d, 16, layout):
            found.append((int(m[2]) != g, r))
    if not found:
        sys.exit("isa_model: no %s line for %s, head_dim %d, %s" %
                 (PREFILL_KERNEL, device, d, layout))
    return min(found, key=lambda f: f[0])[1]


# f32 lanes an EU (Xe-LP) or vector engine (Xe-HPG) issues a cycle, each an
# FMA (2 flops); f16 at twice that on both: Intel's oneAPI GPU
# Optimization Guide ("Intel Xe GPU Architecture") and its Gen12 PRM
# (Volume 4, "Configurations"). tgllp: 96 x 8 x 2 x 1.35 GHz = 2.07 TFLOPS
# f32, as Intel quotes for the i7-1185G7's Iris Xe.
F32_LANES = 8
# A 2,048-token prompt in chunks of the engine's default: max_batch_tokens
# 2048 and no long_prefill_threshold (pkv_engine_params_init in
# src/engine_params.c), so one chunk of 2,048 rows.
PROMPT, CHUNK = 2048, 2048


def prefill_work(hq, hkv, d, token_bytes):
    """Per layer: the products of each pass the kernel computes, the
    query-key pairs of the causal triangle, the KV bytes read and the
    work-groups. A work-group takes a tile of rows of a chunk and one KV
    head, and reads every token from 0 to its last row's once (no
    window), computing as PREFILL_SHAPES says at block 16."""
    g = hq // hkv
    rows, width, tc = PREFILL_SHAPES[PREFILL_KERNEL](g, 16)
    products = pairs = read = wgs = 0
    for c0 in range(0, PROMPT, CHUNK):
        n = min(CHUNK, PROMPT - c0)
        pairs += hq * (n * c0 + n * (n + 1) // 2)
        for t0 in range(c0, c0 + n, rows):
            last = min(t0 + rows, c0 + n)  # tokens the tile reads
            read += hkv * last * token_bytes
            wgs += hkv
            if tc:
                products += hkv * width * d * tc * -(-last // tc)
            else:
                products += hq * d * sum(range(t0 + 1, last + 1))
    return rows, products, pairs, read, wgs


def prefill_table():
    print()
    print("| device | model | KV | build | rows a tile | work-groups "
          "| cycles a pair | sends a pair | f32 peak ms | f16 peak ms "
          "| issue ms | KV read MB | memory ms | predicted ms | of f32 peak |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:"
          "|---:|---:|")
    # Gemma 3's sliding windows are ignored: every layer global, the
    # longest a layer takes.
    pgeo = {"Llama-3-8B": (32, 8, 128), "Gemma 3 270M": (4, 1, 256)}
    worst = {}
    for name, (hq, hkv, d) in pgeo.items():
        for dv, (eu, ghz, bw) in dev.items():
            # KV, its build label, and the bytes a token of one KV head, K
            # and V: codes and, for u8, per-channel key parameters (4 bytes
            # a channel a 16-token block) and per-token values' (4 bytes).
            for kv, lab, tb in (("f16", "kv1-k1-v1", 2 * 2 * d),
                                ("u8", "kv2-k1-v2", 2 * d + d * 4 / 16 + 4)):
                r = prefill_line(dv, d, hq // hkv, lab)
                rows, products, pairs, read, wgs = prefill_work(
                    hq, hkv, d, tb)
                hz = eu * ghz * 1e9
                f32 = 2 * pairs * d / (F32_LANES * hz) * 1e3
                # An EU's cycles and sends (local and private memory, not
                # in the cycles) a pair, over the products computed.
                cyc = products * (r["qk_cyc"] + r["pv_cyc"]) / pairs
                sends = products * (r["qk_send"] + r["pv_send"]) / pairs
                issue = pairs * cyc / hz * 1e3
                mem = read / (eff * bw * 1e9) * 1e3
                pred = max(issue, mem)
                a, b = worst.get(dv, (1.0, 1.0))
                worst[dv] = (min(a, f32 / pred), min(b, f32 / issue))
                print("| %s | %s | %s | %s | %d | %d | %.0f | %.0f | %.2f "
                      "| %.2f | %.2f | %.0f | %.2f | %.2f | %.2f |" % (
                          dv, name, kv, r["program"], rows, wgs, cyc, sends,
                          f32, f32 / 2, issue, read / 1e6, mem, pred,
                          f32 / pred))
    # By issue alone too: the KV reads count every work-group's as memory
    # traffic, an upper bound where the work-groups running at once read
    # the same blocks through the cache.
    for dv in ("tgllp", "adl-p"):
        frac, by_issue = worst[dv]
        print("%s: %.2f of the f32 FMA peak at worst (%.2f by issue alone), "
              "target 0.5 %s" % (dv, frac, by_issue,
                                 "met" if frac >= 0.5 else "missed"))


prefill_table()
