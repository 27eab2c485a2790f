#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The default backend on a CPU: pkv's CPU backend against pkv's OpenCL
kernels run by a CPU's OpenCL runtime (PoCL; Intel's CPU runtime where
the set-up cached it), the same pkv-gguf, model and threads.

    python3 bench/cpu_device.py [--runs N] [--threads N] [--json FILE|-]
                                [--pkv-gguf PATH] [--model gemma3|smollm2]

This is the choice `--backend auto` makes where the only OpenCL device is
the CPU itself: it takes the CPU backend when the host lends at least 2
threads (src/backend.c). Workloads, each run once a side per round, the
sides in turn (the order rotating each round), medians of --runs rounds:
  decode    1 / the mean time between tokens, a 16-token prompt, 64 new
            tokens, KV f16 and u8
  depth     the same after a 2,048-token prompt (--prompt-ids), KV u8
  prompt    512 / seconds to the first token of a 512-token prompt, f16
  demo      the demo's 32 requests at once, 48 new tokens: generated
            tokens/s, f16
The OpenCL side gets the host's threads too (pkv-gguf --threads), which
its ggml products use; the runtime runs the attention on its own
threads. The load average (1 minute) is sampled beside each figure.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from peer import pkv_cache  # bench/: $PKV_CACHE, as the set-up places it

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def fail(msg):
    print("cpu_device: " + msg, file=sys.stderr)
    sys.exit(1)


def sides():
    """(name, --backend, extra environment) of each side that can run
    here."""
    out = [("cpu backend", "cpu", {})]
    pocl = "/etc/OpenCL/vendors/pocl.icd"
    if os.path.exists(pocl):
        out.append(("opencl, PoCL", "opencl", {"OCL_ICD_VENDORS": pocl}))
    intel = os.path.join(pkv_cache(), "intel-icd")
    lib = os.path.join(pkv_cache(), "intel-opencl", "lib")
    if os.path.exists(os.path.join(intel, "intel-cpu.icd")):
        out.append(("opencl, Intel CPU runtime", "opencl",
                    {"OCL_ICD_VENDORS": intel, "LD_LIBRARY_PATH": lib}))
    return out


def run(opt, backend, env, args):
    full = dict(os.environ, **env)
    out = subprocess.run([opt.pkv_gguf, "--model", opt.model, "--backend",
                          backend, "--threads", str(opt.threads), "--json"]
                         + args, capture_output=True, text=True, env=full)
    if out.returncode:
        fail(f"{backend} {' '.join(args)}: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout)


def workloads(opt, ids):
    prompt = "Here is a long story about a lighthouse keeper:"
    decode = ["--prompt", prompt, "--temperature", "0", "--max-new", "64"]
    return [
        ("decode tokens/s, f16", decode + ["--kv", "f16"],
         lambda r: 1.0 / r["requests"][0]["itl_s"]),
        ("decode tokens/s, u8", decode + ["--kv", "u8"],
         lambda r: 1.0 / r["requests"][0]["itl_s"]),
        ("decode tokens/s at depth 2048, u8",
         ["--prompt-ids", ids[2048], "--kv", "u8", "--temperature", "0",
          "--max-new", "64"],
         lambda r: 1.0 / r["requests"][0]["itl_s"]),
        ("prompt 512 tokens/s, f16",
         ["--prompt-ids", ids[512], "--kv", "f16", "--max-new", "1"],
         lambda r: 512 / r["seconds"]),
        ("demo tokens/s, f16", ["--kv", "f16", "--max-new", "48"],
         lambda r: r["generated"] / r["seconds"]),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", default="gemma3", choices=("gemma3",
                                                          "smollm2"))
    ap.add_argument("--json", help="JSON lines to FILE, or - for stdout")
    ap.add_argument("--pkv-gguf", default=os.path.join(
        ROOT, "build", "examples", "pkv-gguf"))
    opt = ap.parse_args()
    if opt.runs < 1 or opt.threads < 1:
        fail("--runs and --threads take a number >= 1")
    if not os.path.exists(opt.pkv_gguf):
        fail(f"{opt.pkv_gguf} is missing (build pkv first)")
    js = (sys.stdout if opt.json == "-" else
          open(opt.json, "w") if opt.json else None)
    backends = sides()
    values, loads = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        ids = {}
        bos, vocab = (2, 262144) if opt.model == "gemma3" else (None, 49152)
        for n in (512, 2048):
            ids[n] = os.path.join(tmp, f"{n}.ids")
            with open(ids[n], "w") as f:
                f.write(" ".join(str(bos if i == 0 and bos else
                                     1000 + i * 7919 % (vocab - 2000))
                                 for i in range(n)) + "\n")
        for r in range(opt.runs):
            order = backends[r % len(backends):] + backends[:r %
                                                            len(backends)]
            for name, args, figure in workloads(opt, ids):
                for side, backend, env in order:
                    la = os.getloadavg()[0]
                    v = figure(run(opt, backend, env, args))
                    values.setdefault((name, side), []).append(v)
                    loads.setdefault((name, side), []).append(la)
                    print(f"... round {r + 1}: {name}, {side}: {v:.1f} "
                          f"(load {la:.2f})", file=sys.stderr, flush=True)
    print(f"\npkv-gguf --model {opt.model}, {opt.threads} threads, "
          f"{opt.runs} rounds, the sides in turn; median [min-max], "
          "ratio to the CPU backend")
    for name, _, _ in workloads(opt, {512: "", 2048: ""}):
        base = statistics.median(values[(name, "cpu backend")])
        for side, _, _ in backends:
            vals = values[(name, side)]
            med = statistics.median(vals)
            print(f"{name:<36} {side:<27} {med:8.1f} "
                  f"[{min(vals):.1f}-{max(vals):.1f}] {med / base:6.2f}x "
                  f"load {statistics.median(loads[(name, side)]):.2f}")
            if js:
                js.write(json.dumps({
                    "bench": "cpu_device", "workload": name, "side": side,
                    "median": round(med, 3), "min": round(min(vals), 3),
                    "max": round(max(vals), 3), "runs": len(vals),
                    "vs_cpu_backend": round(med / base, 4),
                    "load": round(statistics.median(loads[(name, side)]),
                                  2)}) + "\n")


if __name__ == "__main__":
    main()
