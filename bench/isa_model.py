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
(prefill_table below says how). Then occupancy: the work-groups of the
intel decode and prefill kernels a sub-slice holds at once (by shared
local memory, hardware threads and barriers), the threads an EU then
holds against those the decode needs to hide the memory's latency, and
the work-groups a decode step launches against those the device holds.

Usage: pkv-bench isa --json isa.json (or sh tests/check_isa.sh . --json
isa.json); python3 bench/isa_model.py isa.json [prefill kernel]
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
    # pkv__prefill_intel_shape: 8 queries (NV), chunks of up to 16 tokens
    # (so at the geometries modelled here: GQA up to 8, head_dim up to
    # 448, blocks of 8 or more; past them a tile is one row of 8 heads
    # and the chunk another).
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
    worst, issued = {}, {}
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
                issued[(dv, name, kv)] = (d, issue, mem, f32)
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
    return issued


issued = prefill_table()


# Occupancy: the work-groups a sub-slice holds at once and whether that
# bounds the step. The sub-slice is the unit whose shared local memory
# (SLM) a work-group takes: Xe-LP's dual sub-slice, Xe-HPG's Xe-core. Per
# target: sub-slices, EUs a sub-slice, hardware threads an EU, SLM bytes
# a sub-slice, barrier registers a sub-slice. From the device_info table
# of Intel's GPU Occupancy Calculator (oneAPI-samples,
# Tools/GPU-Occupancy-Calculator/index.html): "Xe LP / TGL,RPL,RKL,ADL"
# 16 EUs, 7 threads, 64 KB, 64 barriers; "Xe HPG / Arc / DG2" 16 EUs, 8
# threads, 128 KB (64 KB at most a work-group), 128 barriers. Sub-slices:
# 96 EUs in 6 on Xe-LP (the oneAPI GPU Optimization Guide, "Thread
# Mapping and GPU Occupancy": 16 EUs and 112 threads a sub-slice); 512 in
# 32 Xe-cores on the A770. The Guide's Xe-LP page gives a dual sub-slice
# 128 KB of SLM where the calculator gives 64: the calculator's is taken.
SUBSLICE = {"tgllp": (6, 16, 7, 64 << 10, 64),
            "adl-p": (6, 16, 7, 64 << 10, 64),
            "dg2-g10": (32, 16, 8, 128 << 10, 128)}
# The latency of a load that misses the GPU's caches: 300 GPU cycles, the
# Guide's figure measured at the vector engine ("GPU Memory System", for
# its Data Center GPU Max; a TLB miss adds 50-150). No figure for these
# three targets was found: an assumption, and likely short for the iGPUs,
# whose memory sits behind the CPU's ring and last-level cache.
LATENCY = 300
# The intel decode variant's partitions (PKV__DECODE_INTEL_PARTITION) and
# the work-groups its plan aims at a compute unit (PKV__DECODE_ITEMS_PER_CU
# in src/opencl/decode_plan.h); Intel's runtime reports an EU as a compute
# unit (compute-runtime, opencl/source/cl_device/cl_device_caps.cpp:
# maxComputUnits = EUCount).
PARTITION, ITEMS_PER_CU = 256, 8


def slm_taken(nbytes):
    """The SLM a work-group asking nbytes takes: the next power of two, 1
    KB at least (Mesa's intel_compute_slm_calculate_size for Gen9 to
    Xe-HPG; the calculator's TG_SLM_Sizes)."""
    taken = 1024
    while taken < nbytes:
        taken *= 2
    return taken


def resident(dv, nbytes, threads):
    """Work-groups of nbytes of SLM and `threads` hardware threads that a
    sub-slice of dv holds at once, by SLM, by threads and by barrier
    registers (both kernels have barriers, and a work-group with one
    takes a register: the calculator's rule), then the least of them."""
    _, eus, per_eu, slm, barriers = SUBSLICE[dv]
    by = (slm // slm_taken(nbytes), eus * per_eu // threads, barriers)
    return by + (min(by),)


def decode_threads_needed(dv, d, g, pairs, lab, eb, vg):
    """Hardware threads an EU needs for the decode to run at the memory's
    rate, by Little's law, as (a, b): a + b x latency in cycles. A thread
    loads one turn of a hot loop, waits out the latency, then spends the
    turn's ALU cycles on it with nothing else in flight (the pessimistic
    case). Over a partition, with as many K as V code bytes, a thread so
    moves 2 / (latency / Bk + latency / Bv + K and V cycles a byte) bytes
    a cycle, and the EU must take its share of 80% of the memory's peak
    (code bytes only: the parameters, as in the first table, take the
    rest). A score turn reads Bk = 16 lanes x 16 channels of K (32 at GQA
    8: K_TURN), a value turn Bv = 16 tokens x 32 x pairs channels of V
    (kernels/decode_intel.cl). a alone is about the first table's
    instruction to memory ratio: above 1 no number of threads makes the
    step memory-bound."""
    eu, ghz, bw = dev[dv]
    r = isa[(dv, "intel-d%d-g%d-b16-%s" % (d, g, lab))]
    params = d * 4 / 16 + 4 * vg if vg else 0
    rate = eff * bw / (eu * ghz) * 2 * d * eb / (2 * d * eb + params)
    bk = 16 * 16 * (2 if g >= 8 else 1) * eb
    bv = 16 * 32 * pairs * eb
    return (rate * (r["kb_cyc"] + r["vb_cyc"]) / 2,
            rate * (1 / bk + 1 / bv) / 2)


def decode_shape(dv, d, g):
    """The intel decode work-group at the default KV layouts (per-token
    values): pairs a lane (pkv__decode_intel_pairs), hardware threads (its
    lanes over the dump's SIMD width) and the SLM it asks
    (pkv__decode_intel_local_bytes)."""
    pairs = 2 if d % 64 == 0 and 4 * g <= 16 else 1
    lanes = 16 * d // (32 * pairs)
    simd = isa[(dv, "intel-d%d-g%d-b16-kv1-k1-v1" % (d, g))]["simd"]
    return pairs, -(-lanes // simd), 4 * g * (d + d // 8 + PARTITION + 3)


def decode_occupancy():
    """Per target and geometry: the work-groups a sub-slice holds, the
    threads an EU then holds, those each KV format needs at LATENCY, and
    the longest latency the resident threads hide."""
    for dv in dev:
        print()
        print("| %s decode: head_dim | GQA | threads a WG | local bytes "
              "(taken) | WGs a sub-slice by SLM / threads / barriers "
              "| threads an EU | needed f16 / u8 / u4 | latency covered, "
              "cycles | bound |" % dv)
        print("|---:|---:|---:|---:|---|---:|---|---|---|")
        for d in (64, 96, 128, 256):
            # KV, build label, element bytes, value groups a row (as in
            # the first table).
            kvs = (("f16", "kv1-k1-v1", 2, 0), ("u8", "kv2-k1-v2", 1, 1),
                   ("u4", "kv3-k1-v2", 0.5, d // 32))
            for g in (1, 4, 8):
                pairs, threads, nbytes = decode_shape(dv, d, g)
                by_slm, by_thr, by_bar, wgs = resident(dv, nbytes, threads)
                per_eu = wgs * threads / SUBSLICE[dv][1]
                ab = [decode_threads_needed(dv, d, g, pairs, lab, eb, vg)
                      for _, lab, eb, vg in kvs]
                need = [a + b * LATENCY for a, b in ab]
                # The longest latency the resident threads hide.
                covered = [max(0, (per_eu - a) / b) for a, b in ab]
                bound = [kv for (kv, _, _, _), n in zip(kvs, need)
                         if n > per_eu]
                print("| %d | %d | %d | %d (%d KB) | %d / %d / %d | %.2f "
                      "| %s | %s | %s |" % (
                          d, g, threads, nbytes, slm_taken(nbytes) >> 10,
                          by_slm, by_thr, by_bar, per_eu,
                          " / ".join("%.2f" % n for n in need),
                          " / ".join("%d" % c for c in covered),
                          ", ".join(bound) or "no"))


def decode_partitions(seqs, hkv, ctx, cus):
    """Partitions a sequence (src/opencl/decode_plan.c at block 16, no
    window, the intel variant's longest partition)."""
    span = -(-ctx // 16)
    want = cus * ITEMS_PER_CU
    parts = 1 if seqs * hkv >= want else -(-want // (seqs * hkv))
    blocks = min(max(-(-span // parts), PARTITION // 16), PARTITION // 16,
                 span)
    return -(-span // blocks)


def decode_fill():
    """Whether a step's work-groups (sequences x kv heads x partitions)
    fill the device: against the work-groups it holds at once, and the
    threads an EU then holds (the first wave's, spread over every EU)."""
    print()
    print("| device | model | batch x ctx | WGs a step | WGs at once "
          "| waves | threads an EU |")
    print("|---|---|---|---:|---:|---:|---:|")
    for name, (_, hkv, d, g) in geo.items():
        for dv, (eu, _, _) in dev.items():
            _, threads, nbytes = decode_shape(dv, d, g)
            at_once = resident(dv, nbytes, threads)[3] * SUBSLICE[dv][0]
            for seqs in (1, 16):
                wgs = seqs * hkv * decode_partitions(seqs, hkv, 4096, eu)
                print("| %s | %s | %d x 4096 | %d | %d | %.2f | %.2f |" % (
                    dv, name, seqs, wgs, at_once, wgs / at_once,
                    min(wgs, at_once) * threads / eu))


def prefill_shape(dv, d):
    """The intel prefill kernel's work-group at block 16: hardware threads
    (head_dim / 2 lanes, pkv__prefill_intel_shape, over the dump's SIMD
    width) and the SLM it asks (pkv__prefill_intel_local_bytes: 8 queries
    a tile, chunks of 16 tokens)."""
    simd = prefill_line(dv, d, 8, "kv1-k1-v1")["simd"]
    nbytes = 4 * (2 * d * 8 + 16 * d + d // 32 * 16 * 8 + 16 * 8 + 3 * 8)
    return -(-(d // 2) // simd), nbytes


def prefill_occupancy():
    """An EU issues only while it holds a thread: with fewer threads than
    EUs a sub-slice, the hot loops' issue time grows by EUs / threads."""
    for dv in dev:
        print()
        print("| %s prefill: head_dim | threads a WG | local bytes (taken) "
              "| WGs a sub-slice by SLM / threads / barriers "
              "| threads an EU |" % dv)
        print("|---:|---:|---:|---|---:|")
        for d in (64, 96, 128, 256):
            threads, nbytes = prefill_shape(dv, d)
            by_slm, by_thr, by_bar, wgs = resident(dv, nbytes, threads)
            print("| %d | %d | %d (%d KB) | %d / %d / %d | %.2f |" % (
                d, threads, nbytes, slm_taken(nbytes) >> 10, by_slm, by_thr,
                by_bar, wgs * threads / SUBSLICE[dv][1]))
    print()
    print("| device | model | KV | threads an EU | issue ms | at occupancy "
          "| memory ms | predicted ms | of f32 peak |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for (dv, name, kv), (d, issue, mem, f32) in issued.items():
        threads, nbytes = prefill_shape(dv, d)
        per_eu = resident(dv, nbytes, threads)[3] * threads / SUBSLICE[dv][1]
        slow = issue / min(1.0, per_eu)
        print("| %s | %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |" % (
            dv, name, kv, per_eu, issue, slow, mem, max(slow, mem),
            f32 / max(slow, mem)))


print()
print("Occupancy (a sub-slice: Xe-LP's dual sub-slice, Xe-HPG's Xe-core; "
      "needed: threads an EU at %d cycles of latency)" % LATENCY)
decode_occupancy()
decode_fill()
if PREFILL_KERNEL == "pkv_prefill_intel":
    prefill_occupancy()
