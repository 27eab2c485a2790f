#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""pkv-server against llama-server: the same GGUF, the same Poisson trace
of completion requests replayed against each by the same load generator
with the same client (PyPI openai, streaming), threads equal, the sides
taking turns round by round.

    python3 bench/serve_peer.py [--build build] [--model gemma3|smollm2]
        [--rounds 3] [--threads 2] [--requests 64] [--rate 4.0]
        [--slots 16] [--llama-bin DIR] [--gguf PATH] [--json FILE]

The trace is bench/peer.py's (pkv-bench serve's generator: prompts of
random token ids, lognormal prompt and output lengths, Poisson arrivals
at --rate requests/s, seeded), each request a streamed /v1/completions
with its token ids as the prompt, greedy (temperature 0), max_tokens its
output length, ignore_eos (both servers then never draw the end-of-text
token: every answer runs to max_tokens, whatever the two sides' last
bits of arithmetic make of a near tie), usage asked for. The report
checks that each request generated the same number of tokens on both
sides (the usage the servers return) and prints any that differ.

llama-server: `-np --slots` (16), a context of 1,024 tokens a slot (the
trace's longest prompt, 512, and answer, 128, fit), no host prompt cache
(bench/peer.py's Server). pkv-server: its defaults (4,096 tokens a
sequence, a KV cache of 16,384 tokens, up to 64 requests) but for
--backend cpu, so that its attention runs on its --threads as
llama-server's does (the default backend on a machine with an OpenCL
runtime would add the runtime's own threads). Both get --threads.

Each side's server is started fresh each round and given one warm-up
request (a 1-token answer to a prompt not in the trace) before the trace.
Figures per side, as peer.py's trace takes them: generated tokens over
the time from the first arrival to the last token, TTFT (a request's
arrival to its first streamed text) and the gaps between streamed texts
(ITL), p50 and p99; medians over the rounds, ratios pkv / llama.cpp, the
1-minute load average at each measurement. Needs the openai package of
the server venv (tests/deps.sh): run it with that venv's python. Take the
bench lock: flock /tmp/pkv-bench.lock nice -n -10 python ...
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import peer  # noqa: E402

METRICS = ("tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms",
           "itl_p99_ms")


class PkvServer(peer.Server):
    """pkv-server on a free loopback port (--port 0), its log in a file;
    stopped as peer.py's llama-server is."""

    def __init__(self, opt):
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log")
        self.proc = subprocess.Popen(
            [os.path.join(opt.build, "examples", "pkv-server"),
             "--weights", opt.gguf, "--name", opt.model, "--port", "0",
             "--backend", "cpu", "--threads", str(opt.threads)],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            self.log.seek(0)
            m = re.search(r"listening on http://[0-9.]+:([0-9]+)",
                          self.log.read())
            if m:
                self.port = int(m.group(1))
                return
            if self.proc.poll() is not None:
                self.log.seek(0)
                peer.fail("pkv-server exited:\n" + self.log.read()[-2000:])
            time.sleep(0.2)
        self.stop()
        peer.fail("pkv-server did not come up in 120 s")


def openai_client(model):
    """peer.drive's send: one streamed /v1/completions through the openai
    package, the time of each streamed text and the usage's token
    count."""
    import openai

    def send(port, req, t0, deadline, out):
        wait = t0 + req["arrival"] - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1",
                          api_key="none", max_retries=0,
                          timeout=max(1.0, deadline - time.monotonic()))
        times, tokens = [], None
        for chunk in c.completions.create(
                model=model, prompt=req["prompt"],
                max_tokens=req["n_predict"], temperature=0, stream=True,
                stream_options={"include_usage": True},
                extra_body={"ignore_eos": True}):
            if chunk.choices and chunk.choices[0].text:
                times.append(time.monotonic())
            if chunk.usage:
                tokens = chunk.usage.completion_tokens
        out.append({"arrival": t0 + req["arrival"], "times": times,
                    "tokens": len(times) if tokens is None else tokens})
    return send


def warm_up(port, model):
    import openai
    openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none",
                  max_retries=0).completions.create(
        model=model, prompt=[1000 + i for i in range(16)], max_tokens=1,
        temperature=0)


def measure(opt, side, reqs):
    server = (peer.Server(opt, opt.slots, opt.slots * 1024)
              if side == "llama.cpp" else PkvServer(opt))
    try:
        warm_up(server.port, opt.model)
        return peer.drive(server.port, reqs, 600, openai_client(opt.model))
    finally:
        server.stop()


def report(opt, runs, loads):
    med = {s: {k: statistics.median(r[k] for r in runs[s]) for k in METRICS}
           for s in runs}
    print(f"\npkv-server against llama-server -np {opt.slots}, "
          f"{opt.requests} requests at {opt.rate}/s, {opt.threads} threads "
          f"each, {opt.rounds} rounds alternating; median [min-max]")
    print(f"{'figure':<16} {'llama-server':>24} {'pkv-server':>24} "
          f"{'pkv/llama':>9}")
    for k in METRICS:
        cells = []
        for s in ("llama.cpp", "pkv"):
            v = [r[k] for r in runs[s]]
            cells.append(f"{med[s][k]:.1f} [{min(v):.1f}-{max(v):.1f}]")
        ratio = med["pkv"][k] / max(1e-9, med["llama.cpp"][k])
        print(f"{k:<16} {cells[0]:>24} {cells[1]:>24} {ratio:>8.2f}x")
    counts = {s: [r["counts"] for r in runs[s]] for s in runs}
    first = counts["llama.cpp"][0]
    asked = sum(r["n_predict"] for r in opt.reqs)
    differ = [(i, [c[i] for c in counts["llama.cpp"]],
               [c[i] for c in counts["pkv"]])
              for i in range(len(first))
              if len({c[i] for s in counts for c in counts[s]}) > 1]
    print(f"generated tokens a round: llama-server "
          f"{[sum(c) for c in counts['llama.cpp']]}, pkv-server "
          f"{[sum(c) for c in counts['pkv']]} (max_tokens sum {asked}); "
          f"requests whose counts differ: {len(differ)}")
    for i, a, b in differ:
        print(f"  request {i}: llama-server {a}, pkv-server {b}")
    print(f"load average (1 min) at each measurement: {loads}")
    return {"bench": "serve_peer",
            "workload": {"model": opt.model, "requests": opt.requests,
                         "rate": opt.rate, "threads": opt.threads,
                         "slots": opt.slots, "rounds": opt.rounds,
                         "max_tokens_sum": asked},
            "median": med,
            "ratios": {k: med["pkv"][k] / max(1e-9, med["llama.cpp"][k])
                       for k in METRICS},
            "counts_differ": differ, "runs": runs, "loads": loads}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--model", default="gemma3", choices=sorted(peer.MODELS))
    ap.add_argument("--gguf", help="default: the cached GGUF of --model")
    ap.add_argument("--llama-bin",
                    help="llama.cpp's tools already built there: no build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--rate", type=float, default=4.0,
                    help="arrivals per second (default 4.0)")
    ap.add_argument("--slots", type=int, default=16,
                    help="llama-server's -np (default 16)")
    ap.add_argument("--json", help="the result as JSON to FILE")
    opt = ap.parse_args()
    if min(opt.rounds, opt.threads, opt.requests, opt.slots) < 1 or \
            opt.rate <= 0:
        peer.fail("--rounds, --threads, --requests, --slots, --rate: > 0")
    opt.gguf = opt.gguf or os.path.join(peer.pkv_cache(),
                                        peer.MODELS[opt.model]["gguf"])
    opt.bins = opt.llama_bin or peer.build_llama(peer.pkv_cache())
    opt.reqs = peer.serve_trace(opt.requests, peer.MODELS[opt.model]["vocab"],
                                opt.rate)
    runs = {"llama.cpp": [], "pkv": []}
    loads = {"llama.cpp": [], "pkv": []}
    for r in range(opt.rounds):
        for side in ["llama.cpp", "pkv"][:: 1 if r % 2 == 0 else -1]:
            loads[side].append(round(peer.load(), 2))
            runs[side].append(measure(opt, side, opt.reqs))
            peer.progress(f"round {r + 1} {side}: " + ", ".join(
                f"{k} {runs[side][-1][k]:.1f}" for k in METRICS) +
                f", generated {runs[side][-1]['generated']} (load "
                f"{loads[side][-1]})")
    result = report(opt, runs, loads)
    if opt.json:
        with open(opt.json, "w") as f:
            f.write(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
