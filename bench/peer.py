#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""pkv-gguf head to head with llama.cpp: the same GGUF, the same machine,
one window, the two sides alternating, threads equal.

    python3 bench/peer.py [--model gemma3|smollm2] [--runs N] [--threads N]
                          [--only W[,W...]] [--json FILE|-]
                          [--pkv-gguf PATH] [--pkv-bench PATH]
                          [--llama-bin DIR] [--gguf PATH]
                          [--depths D[,D...]] [--prompts N[,N...]]
                          [--memory both|default|hybrid] [--pkv-before PATH]
                          [--pkv-only]

--model: Gemma 3 270M (the default, a base model) or SmolLM2-135M-Instruct
(a chat model), the GGUFs examples/gguf/setup.sh caches. --pkv-before:
an earlier build's pkv-gguf (or pkv-gemma3), measured as a third side in
the decode, prefill, depth and prompt workloads, its ratio beside.
--pkv-only: pkv's side alone, no llama.cpp (nothing of it built), for
those four workloads. Every decode row of U8 or U4 also gives "own f16":
its median over pkv's f16 median in the same memory mode, and the median
of the rounds' own ratios (the two ran back to back in a round).

llama.cpp's tools (llama-bench, llama-server, and llama-perplexity for
docs/fidelity.md) are built once from the
pinned PyPI source package that the Gemma 3 host's ggml comes from
(llama-cpp-python 0.3.36, sha256 checked) into $PKV_CACHE/llama.cpp
(PKV_CACHE defaulting to ~/.cache/pkv): CPU only, static, no OpenSSL, no
web UI. When the host's ggml build is cached ($PKV_CACHE/ggml/install,
built by examples/gguf/ggml.sh from the same package) llama.cpp links
that very library, so both sides run the same matrix products; otherwise
it builds the vendored ggml with the same options. The build is niced.

Workloads (--only picks some; by default decode, prefill, demo and
trace), each run once a side per
round, the sides alternating (llama.cpp first in even rounds):
  decode   batch-1 decode tokens/s: llama-bench -p 0 -n 64 (tg64) against
           pkv-gguf on one short prompt, 64 new tokens, KV f16, u8, u4.
           pkv's figure is 1 / the mean time between its tokens (its
           --json itl_s): the 63 steps after the prompt's, as tg64 has no
           prompt.
  prefill  prompt tokens/s at 512 tokens: llama-bench -p 512 -n 0 against
           pkv-gguf's first token of a 512-token prompt (--prompt-ids).
           Both sides warm: llama-bench runs the prompt once unmeasured
           before it measures (its warm-up run), and pkv-gguf is given
           --warmup, which serves the request once first on other ids
           (no prefix hit) in the same process, its seconds those of
           the second run. A build without --warmup (--pkv-before from
           before it) is measured cold, its first run.
  depth    long-context decode tokens/s: llama-bench -p 0 -n 64 -d D
           (the D-token depth filled first, untimed) against pkv-gguf
           on a D-token --prompt-ids prompt, 64 new tokens, 1 / its mean
           time between tokens, at D = 2,048, 8,192 and 32,704 (Gemma 3
           270M's 32,768 less the 64 new) or with SmolLM2 2,048 and
           8,128 (its 8,192 less the 64; --depths); pkv's f16, u8 and u4
           KV against llama.cpp's f16, q8_0 and q4_0 (-fa 1 -ctk -ctv
           for the quantized ones, as they need), and pkv also with
           hybrid memory where the model has windowed layers (Gemma 3;
           SmolLM2 has none): pkv-gguf's default, the plain figure is
           --every-token's (--memory picks).
  prompt   long prompts, tokens/s: llama-bench -p N -n 0 against
           pkv-gguf's first token of an N-token --prompt-ids prompt
           (both warm, as for prefill),
           N = 2,048 and 8,192 (--prompts), f16 KV, pkv also with
           hybrid memory where the model has windowed layers.
  demo     pkv-gguf's demo (32 requests sharing a 31-token preamble, or
           with SmolLM2 a 69-token system prompt in its chat template, at
           most 48 new tokens, greedy) against llama-server -np 32 given
           the same 32 texts at once by 32 clients (streamed, greedy, at
           most 48 tokens; SmolLM2's answers end at its end of turn on
           either side).
           llama-server rather than llama-parallel: it takes the demo's own
           texts and reports each request's first token, where
           llama-parallel draws its own prompts and prints totals only.
  kvmem    not a race (not in the default list): the KV MiB llama-server
           allocates for one sequence of 2k, 8k and 32k tokens, f16 and
           q8_0 K and V (flash attention, as quantized V needs), beside
           pkv-bench memory's hybrid-memory table.
  trace    pkv-bench serve --model MODEL --quick (20 requests, Poisson
           arrivals at 2x what the engine sustains, random-token prompts)
           against llama-server -np 16 given the same prompts, output
           lengths and arrival times by a load generator on loopback.
KV bytes per token: llama.cpp's from the KV buffers llama-server prints at
load (every layer's K and V for one token), pkv's from the engine of
pkv-gguf itself (its --json block_bytes over block_size: every layer's K
and V, parameters included, block 16), U8 both with per-channel keys (the
default) and per-token keys (`--keys token`), whose parameters cost 4
bytes a token rather than 4 per channel a block.

Time: the default workloads about 10-15 minutes on a quiet 2-core
machine at --runs 3 (the trace most of it; an estimate from single runs);
depth and prompt are not in the default list (--only): each round fills
2k, 8k and 32k contexts on both sides several times over, about 25
minutes a round at --depths 2048,8192 and --prompts 2048,8192, several
times that with 32,704. A loaded machine takes several times that. The
load average (1 minute) is sampled beside every measurement: the machine
may be shared, so read medians and ratios.

The build measured: pkv's from --pkv-gguf (default build/, the
README's: RelWithDebInfo, which pkv's CMakeLists.txt builds at -O3); the
report names its build type and C flags from that build's CMakeCache.txt.
"""
import argparse
import hashlib
import http.client
import json
import math
import os
import re
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time

VERSION = "0.3.36"
SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
SDIST = f"llama_cpp_python-{VERSION}.tar.gz"
TOOLS = ["llama-bench", "llama-server", "llama-perplexity"]
# The options of examples/gguf/ggml.sh, so that a vendored ggml build is
# the host's; llama.cpp's own are the defaults but for what needs network
# (OpenSSL, the web UI's prebuilt assets) and what is not measured.
GGML_OPTIONS = ["-DGGML_NATIVE=ON", "-DGGML_OPENMP=OFF", "-DGGML_BLAS=OFF",
                "-DGGML_BACKEND_DL=OFF", "-DGGML_LLAMAFILE=ON"]
LLAMA_OPTIONS = ["-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF",
                 "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
                 "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_UI=OFF",
                 "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF",
                 "-DLLAMA_BUILD_APP=OFF"]
# What differs between the models: the GGUF under $PKV_CACHE, the
# vocabulary the trace and the 512-token prompt draw from, BOS first
# where the model's file asks for it, its context, the default --depths
# (the longest: the context less the 64 new tokens) and whether it has
# windowed layers (where hybrid memory changes something).
MODELS = {
    "gemma3": {"gguf": "gemma3/gemma-3-270m-q4_k_m.gguf", "vocab": 262144,
               "bos": 2, "context": 32768, "depths": "2048,8192,32704",
               "windows": True},
    "smollm2": {"gguf": "smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                "vocab": 49152, "bos": None, "context": 8192,
                "depths": "2048,8128", "windows": False},
}
DEMO_NEW = 48
DECODE_NEW = 64
PREFILL_LEN = 512
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def progress(msg):
    print("... " + msg, file=sys.stderr, flush=True)


def fail(msg):
    print("peer: " + msg, file=sys.stderr)
    sys.exit(1)


def pkv_cache():
    xdg = os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))
    return os.environ.get("PKV_CACHE", os.path.join(xdg, "pkv"))


def load():
    return os.getloadavg()[0]


def run_step(log, cmd, nice=False):
    """Run cmd with its output in log; on failure show the log's tail."""
    if nice:
        cmd = ["nice", "-n", "10"] + cmd
    with open(log, "w") as f:
        if subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode:
            with open(log) as g:
                sys.stderr.write("".join(g.readlines()[-30:]))
            fail("failed: " + " ".join(cmd))


# ------------------------------------------------------------ the build

def host_ggml(cache):
    """The host's cached ggml install when it comes from the same package."""
    prefix = os.path.join(cache, "ggml", "install")
    try:
        with open(os.path.join(prefix, "pkv-ggml.txt")) as f:
            stamp = f.read()
    except OSError:
        return None
    if f"llama-cpp-python {VERSION} sha256 {SHA256}" not in stamp:
        return None
    return os.path.join(prefix, "lib", "cmake", "ggml")


def build_llama(cache):
    """llama.cpp's tools in $PKV_CACHE/llama.cpp/build/bin, built once."""
    top = os.path.join(cache, "llama.cpp")
    bins = os.path.join(top, "build", "bin")
    ggml_dir = host_ggml(cache)
    options = LLAMA_OPTIONS + (
        ["-DLLAMA_USE_SYSTEM_GGML=ON", "-Dggml_DIR=" + ggml_dir]
        if ggml_dir else GGML_OPTIONS)
    stamp = f"llama-cpp-python {VERSION} sha256 {SHA256} " + " ".join(
        options + TOOLS)
    stamp_path = os.path.join(top, "pkv-llama.txt")
    if os.path.exists(stamp_path) and open(stamp_path).read() == stamp:
        return bins
    os.makedirs(top, exist_ok=True)
    sdist = os.path.join(top, SDIST)
    if not os.path.exists(sdist):
        progress(f"llama.cpp: downloading llama-cpp-python {VERSION}'s "
                 f"source (about 77 MB, MIT) into {top}")
        # pip's download of a source package runs its build backend's
        # metadata step; nothing is installed.
        run_step(os.path.join(top, "download.log"),
                 [sys.executable, "-m", "pip", "download",
                  "--disable-pip-version-check", "--no-deps",
                  "--no-binary", ":all:", "-d", top,
                  f"llama-cpp-python=={VERSION}"])
    digest = hashlib.sha256()
    with open(sdist, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    if digest.hexdigest() != SHA256:
        fail(f"{sdist}: sha256 differs from the pinned one")
    src = os.path.join(top, "src")
    build = os.path.join(top, "build")
    if os.path.exists(stamp_path):
        os.remove(stamp_path)
    subprocess.run(["rm", "-rf", src, build], check=True)
    prefix = f"llama_cpp_python-{VERSION}/vendor/llama.cpp/"
    with tarfile.open(sdist) as tar:
        members = []
        for m in tar.getmembers():
            if m.name.startswith(prefix) and len(m.name) > len(prefix):
                m.name = m.name[len(prefix):]
                members.append(m)
        # The "data" filter (no links out of src) where this Python has
        # it: 3.11.4 and later.
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(src, members=members, **safe)
    progress("llama.cpp: building " + ", ".join(TOOLS) +
             (" on the host's ggml" if ggml_dir else " and its ggml") +
             f" (nice, -j2; about 10 minutes on 2 cores) in {build}")
    run_step(os.path.join(top, "configure.log"),
             ["cmake", "-S", src, "-B", build] + options, nice=True)
    run_step(os.path.join(top, "build.log"),
             ["cmake", "--build", build, "-j2", "--target"] + TOOLS,
             nice=True)
    with open(stamp_path, "w") as f:
        f.write(stamp)
    return bins


# ------------------------------------------------------------ statistics

def percentile(values, p):
    """As bench_serve.c's: the sorted value nearest p of the way along."""
    if not values:
        return 0.0
    s = sorted(values)
    i = int(p * (len(s) - 1) + 0.5)
    return s[min(i, len(s) - 1)]


class Figures:
    """Every run's value of each (workload, metric, side), with the load."""

    def __init__(self):
        self.values = {}
        self.loads = {}
        self.order = []

    def add(self, key, value, load_avg):
        if key not in self.values:
            self.values[key] = []
            self.loads[key] = []
            self.order.append(key)
        self.values[key].append(value)
        self.loads[key].append(load_avg)
        progress(f"{key[0]} ({key[1]}, {key[2]}): {value:.2f} "
                 f"(load {load_avg:.2f})")


# ------------------------------------------------------------ pkv's side

def pkv_build(binary):
    """pkv's build type and C flags, from the CMakeCache.txt of the build
    tree the binary is in."""
    top = os.path.dirname(os.path.dirname(os.path.abspath(binary)))
    cache = {}
    try:
        with open(os.path.join(top, "CMakeCache.txt")) as f:
            for line in f:
                m = re.match(r"(CMAKE_BUILD_TYPE|CMAKE_C_FLAGS\w*):\w+=(.*)",
                             line.strip())
                if m:
                    cache[m.group(1)] = m.group(2)
    except OSError:
        return "unknown (no CMakeCache.txt beside the binary)"
    kind = cache.get("CMAKE_BUILD_TYPE", "")
    flags = " ".join(x for x in (cache.get("CMAKE_C_FLAGS", ""),
                                 cache.get("CMAKE_C_FLAGS_" + kind.upper(),
                                           "")) if x)
    return f"{kind or 'no build type'} ({flags})"


def run_pkv_gguf(opt, args):
    out = subprocess.run([opt.pkv_gguf, "--weights", opt.gguf] + args +
                         ["--json"], capture_output=True, text=True)
    if out.returncode:
        fail(f"{opt.pkv_gguf} {' '.join(args)}: {out.stderr.strip()}")
    return json.loads(out.stdout)


def pkv_decode(opt, kv):
    """Decode tokens/s: one request's 63 steps after its first token (the
    prompt's step taken out, as tg64 has no prompt), from the mean time
    between its tokens."""
    r = run_pkv_gguf(opt,
                     ["--prompt", opt.decode_prompt, "--kv", kv,
                        "--backend", "cpu", "--threads", str(opt.threads),
                        "--temperature", "0", "--max-new", str(DECODE_NEW)])
    if r["generated"] < DECODE_NEW:
        progress(f"pkv decode: the prompt stopped at {r['generated']} "
                 "tokens (end of text)")
    return 1.0 / r["requests"][0]["itl_s"]


def memory_flags(opt, hybrid):
    """pkv-gguf's options for hybrid memory (hybrid true) or every token
    kept: hybrid memory is its default since 0.3.0 (--every-token keeps
    every token); a build from before (--pkv-before) kept every token
    unless given --hybrid-memory."""
    if pkv_takes(opt, "--every-token"):
        return () if hybrid else ("--every-token",)
    return ("--hybrid-memory",) if hybrid else ()


def pkv_takes(opt, flag):
    """Whether the pkv-gguf measured (opt.pkv_gguf: this build's, or
    --pkv-before's) takes an option, read from its --help."""
    if opt.pkv_gguf not in opt.pkv_help:
        out = subprocess.run([opt.pkv_gguf, "--help"], capture_output=True,
                             text=True)
        opt.pkv_help[opt.pkv_gguf] = out.stdout + out.stderr
    return flag in opt.pkv_help[opt.pkv_gguf]


def pkv_prefill(opt, ids_path, length=PREFILL_LEN, hybrid=None):
    """Prompt tokens/s: the length over the seconds of a warm run (after
    --warmup's unreported run of the same length, as llama-bench warms
    up before it measures; a build from before --warmup runs cold)."""
    r = run_pkv_gguf(opt,
                     ["--prompt-ids", ids_path, "--max-new", "1",
                        "--kv", "f16", "--backend", "cpu",
                        "--threads", str(opt.threads)] +
                       (["--warmup"] if pkv_takes(opt, "--warmup")
                        else []) +
                       list(() if hybrid is None else
                            memory_flags(opt, hybrid)))
    return length / r["seconds"]


def pkv_depth(opt, ids_path, kv, hybrid):
    """Decode tokens/s after a prompt of the depth's tokens: 1 / the mean
    time between its 64 new tokens (the prompt's step not in it)."""
    r = run_pkv_gguf(opt,
                     ["--prompt-ids", ids_path, "--kv", kv,
                        "--backend", "cpu", "--threads", str(opt.threads),
                        "--temperature", "0", "--max-new", str(DECODE_NEW)]
                       + list(memory_flags(opt, hybrid)))
    if r["generated"] < DECODE_NEW:
        progress(f"pkv depth decode: stopped at {r['generated']} tokens")
    return 1.0 / r["requests"][0]["itl_s"]


def pkv_demo(opt):
    """Tokens/s, tokens, and each request's time to its first token (ms,
    from the loop's start, where all 32 are added at once)."""
    r = run_pkv_gguf(opt,
                     ["--max-new", str(DEMO_NEW), "--kv", "f16",
                        "--backend", "cpu", "--threads", str(opt.threads)])
    ttft = [1e3 * q["ttft_s"] for q in r["requests"]]
    return r["generated"] / r["seconds"], r["generated"], ttft


def pkv_trace(opt):
    """pkv-bench serve's continuous run, and the rate it chose."""
    with tempfile.NamedTemporaryFile("r", suffix=".json") as js:
        out = subprocess.run([opt.pkv_bench, "serve", "--model", opt.model,
                              "--threads", str(opt.threads), "--quick",
                              "--json", js.name],
                             capture_output=True, text=True)
        if out.returncode:
            fail("pkv-bench serve: " + out.stderr.strip()[-2000:])
        lines = [json.loads(x) for x in js.read().splitlines() if x]
    rate = float(re.search(r"Poisson arrivals at ([0-9.]+)/s",
                           out.stdout).group(1))
    for r in lines:
        if r.get("bench") == "serve" and r.get("mode") == "continuous":
            return r, rate
    fail("pkv-bench serve wrote no continuous result")


def pkv_kv_bytes(opt):
    """Bytes per token over every layer, parameters included, from the
    engine pkv-gguf makes for each KV format."""
    out = {}
    for name, args in (("f16", ["--kv", "f16"]), ("u8", ["--kv", "u8"]),
                       ("u8 token keys", ["--kv", "u8", "--keys", "token"]),
                       ("u4", ["--kv", "u4"]),
                       ("u8k-u4v", ["--kv", "u8k-u4v"])):
        r = run_pkv_gguf(opt, ["--prompt", "x", "--max-new", "1",
                               "--backend", "cpu"] + args)
        out[name] = r["block_bytes"] / r["block_size"]
    return out


# ------------------------------------------------------------ the trace

def host_rand(state):
    """examples/host/sample.c's host_rand (splitmix64); state is a list."""
    m = (1 << 64) - 1
    state[0] = (state[0] + 0x9E3779B97F4A7C15) & m
    z = state[0]
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return z ^ (z >> 31)


def host_uniform(state):
    return ((host_rand(state) >> 11) + 0.5) / 9007199254740992.0


def host_normal(state):
    u1, u2 = host_uniform(state), host_uniform(state)
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586 * u2)


def lognormal_len(state, median, sigma, lo, hi):
    x = median * math.exp(sigma * host_normal(state))
    return lo if x < lo else hi if x > hi else int(x)


def serve_trace(n, vocab, rate):
    """bench_serve.c's make_trace(n, vocab, 2024) and set_arrivals(rate,
    1): prompts, output lengths and arrival times."""
    rng = [2024]
    reqs = []
    for _ in range(n):
        prompt_len = lognormal_len(rng, 48, 0.6, 4, 512)
        output_len = lognormal_len(rng, 32, 1.0, 2, 128)
        prompt = [host_rand(rng) % vocab for _ in range(prompt_len)]
        reqs.append({"prompt": prompt, "n_predict": output_len})
    rng = [1 ^ 0xA5A5A5A5]
    at = 0.0
    for r in reqs:
        r["arrival"] = at
        at += -math.log(host_uniform(rng)) / rate
    return reqs


# ------------------------------------------------------------ llama.cpp's side

# pkv's KV types and llama.cpp's of the same width, side by side.
LLAMA_KV = {"f16": "f16", "u8": "q8_0", "u4": "q4_0"}


def llama_bench(opt, p, n, depth=0, kv="f16"):
    """llama-bench's tokens/s; quantized KV with flash attention, which
    llama.cpp needs for a quantized V cache."""
    extra = ["-d", str(depth)] if depth else []
    if kv != "f16":
        extra += ["-fa", "1", "-ctk", kv, "-ctv", kv]
    out = subprocess.run([os.path.join(opt.bins, "llama-bench"), "-m",
                          opt.gguf, "-t", str(opt.threads), "-p", str(p),
                          "-n", str(n), "-r", "1", "-o", "jsonl"] + extra,
                         capture_output=True, text=True)
    if out.returncode:
        fail("llama-bench: " + out.stderr.strip()[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])["avg_ts"]


class Server:
    """llama-server on a free loopback port, its log in a file."""

    def __init__(self, opt, slots, ctx, verbose=False, extra=()):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log")
        # --cache-ram 0: no prompt cache in host memory, so that a round
        # cannot reuse the last round's prompts; a server per round anyway.
        self.proc = subprocess.Popen(
            [os.path.join(opt.bins, "llama-server"), "-m", opt.gguf,
             "--host", "127.0.0.1", "--port", str(self.port),
             "-t", str(opt.threads), "-tb", str(opt.threads),
             "-np", str(slots), "-c", str(ctx), "--cache-ram", "0",
             "--no-webui"] + (["-v"] if verbose else []) + list(extra),
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                fail("llama-server exited:\n" + self.log.read()[-2000:])
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port,
                                               timeout=5)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        fail("llama-server did not come up in 120 s")

    def kv_bytes_per_token(self):
        """Bytes of K and V per token over all layers, from the load log
        (a verbose server's): each KV cache (the full layers' and the
        window's) prints its size over its cells, per sequence stream.
        The server creates its context more than once while it loads:
        one figure per cache, keyed by its layer count."""
        self.log.seek(0)
        caches = {}
        for m in re.finditer(r"llama_kv_cache: size = +([0-9.]+) MiB "
                             r"\( *([0-9]+) cells, +([0-9]+) layers, "
                             r"+[0-9]+/([0-9]+) seqs", self.log.read()):
            caches[m.group(3)] = (float(m.group(1)) * 1048576 /
                                  (int(m.group(2)) * int(m.group(4))))
        return sum(caches.values())

    def kv_mib(self):
        """MiB of every KV cache the last context made (the full layers'
        and the window's), from a verbose server's load log."""
        self.log.seek(0)
        caches = {}
        for m in re.finditer(r"llama_kv_cache: size = +([0-9.]+) MiB "
                             r"\( *[0-9]+ cells, +([0-9]+) layers",
                             self.log.read()):
            caches[m.group(2)] = float(m.group(1))
        return sum(caches.values())

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def client(port, req, t0, deadline, out):
    """One streamed /completion: the time of every token chunk."""
    wait = t0 + req.get("arrival", 0) - time.monotonic()
    if wait > 0:
        time.sleep(wait)
    body = {k: req[k] for k in ("prompt", "n_predict")}
    body.update(stream=True, temperature=req.get("temperature", 0.0),
                top_k=0, top_p=1.0, min_p=0.0,
                ignore_eos=req.get("ignore_eos", False), cache_prompt=True)
    sent = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port,
                                   timeout=max(1, deadline - sent))
    c.request("POST", "/completion", json.dumps(body),
              {"Content-Type": "application/json"})
    resp = c.getresponse()
    times = []
    for line in resp:
        if not line.startswith(b"data: "):
            continue
        chunk = json.loads(line[6:])
        now = time.monotonic()
        if chunk.get("stop"):
            break
        times += [now] * max(1, len(chunk.get("tokens") or []))
    c.close()
    out.append({"arrival": t0 + req.get("arrival", 0), "times": times})


def drive(port, reqs, budget, send=client):
    """Every request on its own thread at its arrival time, sent by send
    (client's signature; each appends {"arrival", "times"} and, where the
    server says how many tokens it generated, "tokens"); the figures
    bench_serve.c takes: tokens/s, TTFT and inter-token gaps (ms), and
    each request's generated tokens in arrival order."""
    out = []
    t0 = time.monotonic()
    threads = [threading.Thread(target=send,
                                args=(port, r, t0, t0 + budget, out))
               for r in reqs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if len(out) != len(reqs):
        fail(f"the server answered {len(out)} of {len(reqs)} requests")
    out.sort(key=lambda r: r["arrival"])
    counts = [r.get("tokens", len(r["times"])) for r in out]
    end = max(r["times"][-1] for r in out if r["times"])
    generated = sum(counts)
    ttft = [1e3 * (r["times"][0] - r["arrival"]) for r in out if r["times"]]
    gaps = [1e3 * (b - a) for r in out
            for a, b in zip(r["times"], r["times"][1:])]
    return {"tokens_per_s": generated / (end - t0), "generated": generated,
            "ttft_p50_ms": percentile(ttft, 0.5),
            "ttft_p99_ms": percentile(ttft, 0.99),
            "itl_p50_ms": percentile(gaps, 0.5),
            "itl_p99_ms": percentile(gaps, 0.99),
            "counts": counts}


def demo_texts(model):
    """The demo's 32 prompts, read from examples/gguf/prompts.c so that
    there is one copy of them: Gemma 3's preamble and topic, or SmolLM2's
    system prompt and question in its chat template (ChatML, as
    examples/gguf/chat.c writes it; llama-server reads the markers of a
    /completion prompt as their tokens)."""
    with open(os.path.join(ROOT, "examples", "gguf", "prompts.c")) as f:
        c = f.read()

    def literals(s):
        return [bytes(x, "ascii").decode("unicode_escape")
                for x in re.findall(r'"((?:[^"\\]|\\.)*)"', s)]
    topics = literals(re.search(r"gg_demo_topics\[\] = \{(.*?)\};", c,
                                re.S).group(1))
    if model == "gemma3":
        preamble = "".join(literals(
            re.search(r"gg_demo_preamble\[\] =(.*?);", c, re.S).group(1)))
        return [f"{preamble}Topic: {t}\nEntry:" for t in topics]
    system = "".join(literals(
        re.search(r"gg_demo_system\[\] =(.*?);", c, re.S).group(1)))
    question = re.search(r'chat \? snprintf\(buf, size, "([^"]*)"',
                         c).group(1)
    return [f"<|im_start|>system\n{system}<|im_end|>\n"
            f"<|im_start|>user\n{question % t}<|im_end|>\n"
            f"<|im_start|>assistant\n" for t in topics]


# ------------------------------------------------------------ the rounds

def sides(opt, llama, pkv, llama_first):
    """The sides of a round in the order they run: llama.cpp, pkv, and
    with --pkv-before the earlier build ("pkv before", the same pkv
    measurement run on that binary), reversed in odd rounds."""
    order = [("pkv", pkv)] if opt.pkv_only else \
        [("llama.cpp", llama), ("pkv", pkv)]
    if opt.pkv_before:
        def before():
            now = opt.pkv_gguf
            opt.pkv_gguf = opt.pkv_before
            try:
                return pkv()
            finally:
                opt.pkv_gguf = now
        order.append(("pkv before", before))
    return order if llama_first else order[::-1]


def decode_round(opt, fig, llama_first):
    for side, measure in sides(
            opt, lambda: {"f16": llama_bench(opt, 0, DECODE_NEW)},
            lambda: {kv: pkv_decode(opt, kv) for kv in ("f16", "u8", "u4")},
            llama_first):
        la = load()
        for kv, v in measure().items():
            fig.add(("decode tokens/s", kv, side), v, la)


def prefill_round(opt, fig, llama_first, ids_path):
    for side, measure in sides(opt, lambda: llama_bench(opt, PREFILL_LEN, 0),
                               lambda: pkv_prefill(opt, ids_path),
                               llama_first):
        la = load()
        fig.add((f"prefill {PREFILL_LEN} tokens/s", "f16", side), measure(),
                la)


def pkv_memory(opt):
    """pkv's memory modes that --memory asks for: every token in every
    layer (--every-token, the plain figures), and where the model has
    windowed layers hybrid memory (pkv-gguf's default: they keep only
    their window's KV). The labels are those of the figures before hybrid
    memory became the default."""
    modes = {"": False, " hybrid": True}
    if not MODELS[opt.model]["windows"]:
        modes.pop(" hybrid")
    return {k: v for k, v in modes.items() if opt.memory == "both" or
            (k == " hybrid") == (opt.memory == "hybrid")}


def depth_round(opt, fig, llama_first, ids):
    for depth in opt.depths:
        metric = f"decode tokens/s at depth {depth}"

        def llama():
            # Under llama.cpp's names (q8_0, q4_0): the report sets each of
            # pkv's formats beside llama.cpp's of its width by them.
            return {LLAMA_KV[kv]: llama_bench(opt, 0, DECODE_NEW, depth,
                                              LLAMA_KV[kv])
                    for kv in LLAMA_KV}

        def pkv():
            return {kv + mem: pkv_depth(opt, ids[depth], kv, hybrid)
                    for mem, hybrid in pkv_memory(opt).items()
                    for kv in LLAMA_KV}

        for side, measure in sides(opt, llama, pkv, llama_first):
            la = load()
            for kv, v in measure().items():
                fig.add((metric, kv, side), v, la)


def prompt_round(opt, fig, llama_first, ids):
    for length in opt.prompts:
        metric = f"prompt {length} tokens/s"

        def llama():
            return {"f16": llama_bench(opt, length, 0)}

        def pkv():
            return {"f16" + mem: pkv_prefill(opt, ids[length], length,
                                             hybrid)
                    for mem, hybrid in pkv_memory(opt).items()}

        for side, measure in sides(opt, llama, pkv, llama_first):
            la = load()
            for kv, v in measure().items():
                fig.add((metric, kv, side), v, la)


def demo_round(opt, fig, llama_first):
    def llama():
        server = Server(opt, 32, 32 * 128)
        try:
            reqs = [{"prompt": t, "n_predict": DEMO_NEW}
                    for t in demo_texts(opt.model)]
            r = drive(server.port, reqs, 600)
        finally:
            server.stop()
        fig.add(("demo TTFT p50 ms", "f16", "llama.cpp"), r["ttft_p50_ms"],
                la)
        fig.add(("demo TTFT p99 ms", "f16", "llama.cpp"), r["ttft_p99_ms"],
                la)
        fig.add(("demo generated", "f16", "llama.cpp"), r["generated"], la)
        return r["tokens_per_s"]

    def pkv():
        rate, generated, ttft = pkv_demo(opt)
        fig.add(("demo TTFT p50 ms", "f16", "pkv"), percentile(ttft, 0.5), la)
        fig.add(("demo TTFT p99 ms", "f16", "pkv"), percentile(ttft, 0.99),
                la)
        fig.add(("demo generated", "f16", "pkv"), generated, la)
        return rate

    for side, measure in [("llama.cpp", llama), ("pkv", pkv)][
            :: 1 if llama_first else -1]:
        la = load()
        fig.add(("demo tokens/s", "f16", side), measure(), la)


def trace_round(opt, fig, llama_first):
    """llama.cpp replays the trace pkv-bench serve chose last (its rate comes
    from pkv's calibration), so the first round starts with pkv."""
    def pkv():
        r, opt.trace_rate = pkv_trace(opt)
        return r

    def llama():
        reqs = serve_trace(20, opt.vocab, opt.trace_rate)
        for r in reqs:
            r.update(temperature=1.0, ignore_eos=True)
        server = Server(opt, 16, 16 * 1024)
        try:
            return drive(server.port, reqs, 600)
        finally:
            server.stop()

    order = [("pkv", pkv), ("llama.cpp", llama)]
    if llama_first and opt.trace_rate is not None:
        order.reverse()
    for side, measure in order:
        la = load()
        r = measure()
        for key in ("tokens_per_s", "ttft_p50_ms", "ttft_p99_ms",
                    "itl_p50_ms", "itl_p99_ms"):
            fig.add((f"trace {key}", "f16", side), r[key], la)


# ------------------------------------------------------------ the report

def own_f16(fig, metric, kv):
    """A quantized cache's decode figure over pkv's f16 in the same memory
    mode and the same rounds: the ratio of the medians, and the median of
    each round's ratio (the two ran back to back in it). None for f16, and
    where f16 did not run."""
    name = kv.split(" ")
    if name[0] in ("f16", "f32") or "decode" not in metric:
        return None
    base = fig.values.get((metric, " ".join(["f16"] + name[1:]), "pkv"))
    mine = fig.values.get((metric, kv, "pkv"))
    if not base or not mine or len(base) != len(mine):
        return None
    return (statistics.median(mine) / statistics.median(base),
            statistics.median(m / b for m, b in zip(mine, base)))


def report(opt, fig, kv_bytes):
    def emit(record):
        if opt.json:
            opt.json.write(json.dumps(record) + "\n")

    sides_run = (f"pkv alone (--pkv-only), {opt.threads} threads, "
                 f"{opt.runs} rounds" if opt.pkv_only else
                 f"pkv beside llama.cpp (llama-cpp-python {VERSION}'s "
                 f"tree), {opt.threads} threads each, {opt.runs} rounds "
                 "alternating")
    print(f"\n{sides_run}; median [min-max]; load: median 1-minute load "
          "average")
    print(f"pkv's build: {opt.build}")
    emit({"bench": "peer", "workload": "pkv build", "build": opt.build})
    if opt.pkv_before:
        before_build = pkv_build(opt.pkv_before)
        print(f"pkv before: {opt.pkv_before}, {before_build}")
        emit({"bench": "peer", "workload": "pkv before build",
              "build": before_build})
    print(f"{'workload':<34} {'KV pkv / llama':<17} {'llama.cpp':>22} "
          f"{'pkv':>22} {'pkv/llama':>9} {'load':>6}"
          + (f" {'pkv before':>22} {'pkv/before':>10}"
             if opt.pkv_before else ""))
    rows = []
    for metric, kv, _ in fig.order:
        if (metric, kv) not in rows:
            rows.append((metric, kv))
    emitted = set()
    for metric, kv in rows:
        if (metric, kv, "pkv") not in fig.values:
            continue
        # Beside pkv's KV, llama.cpp's of the same width where it ran
        # (depth: q8_0 for u8, q4_0 for u4), else its f16.
        lkv = LLAMA_KV.get(kv.split(" ")[0], "f16")
        if (metric, lkv, "llama.cpp") not in fig.values:
            lkv = "f16"
        llama = fig.values.get((metric, lkv, "llama.cpp"))
        pkv = fig.values.get((metric, kv, "pkv"))
        before = fig.values.get((metric, kv, "pkv before"))
        cells, loads = [], []
        for key, vals in (((metric, lkv, "llama.cpp"), llama),
                          ((metric, kv, "pkv"), pkv),
                          ((metric, kv, "pkv before"), before)):
            if not vals:
                cells.append("-")
                continue
            loads += fig.loads[key]
            cells.append(f"{statistics.median(vals):.1f} "
                         f"[{min(vals):.1f}-{max(vals):.1f}]")
            if key not in emitted:
                emitted.add(key)
                emit({"bench": "peer", "workload": metric, "kv": key[1],
                      "side": key[2],
                      "median": round(statistics.median(vals), 3),
                      "min": round(min(vals), 3), "max": round(max(vals), 3),
                      "runs": len(vals),
                      "load": round(statistics.median(fig.loads[key]), 2)})
        ratio = (statistics.median(pkv) / statistics.median(llama)
                 if pkv and llama else None)
        own = own_f16(fig, metric, kv)
        pair = f"{kv} / {lkv}"
        gain = (statistics.median(pkv) / statistics.median(before)
                if pkv and before else None)
        print(f"{metric:<34} {pair:<17} {cells[0]:>22} {cells[1]:>22} "
              f"{(f'{ratio:.2f}x' if ratio else '-'):>9} "
              f"{statistics.median(loads):>6.2f}"
              + (f" {cells[2]:>22} {(f'{gain:.2f}x' if gain else '-'):>10}"
                 if opt.pkv_before else "")
              + (f"   own f16 {own[0]:.2f}x (rounds' median {own[1]:.2f}x)"
                 if own else ""))
        if own:
            emit({"bench": "peer", "workload": metric, "kv": kv,
                  "pkv_over_own_f16": round(own[0], 4),
                  "pkv_over_own_f16_rounds": round(own[1], 4)})
        if ratio:
            emit({"bench": "peer", "workload": metric, "kv": kv,
                  "llama_kv": lkv, "pkv_over_llama": round(ratio, 4)})
        if gain:
            emit({"bench": "peer", "workload": metric, "kv": kv,
                  "pkv_over_before": round(gain, 4)})
    if kv_bytes:
        base = kv_bytes.get("llama.cpp f16")
        print("\nKV bytes per token, every layer's K and V (pkv: block 16, "
              "parameters included)")
        for name, b in kv_bytes.items():
            ratio = b / base if base else None
            print(f"{name:<16} {b:>10.1f} "
                  f"{(f'{ratio:.3f}x' if ratio else '-'):>9}")
            emit({"bench": "peer", "workload": "kv bytes per token",
                  "kv": name, "bytes": round(b, 1),
                  "vs_llama_f16": round(ratio, 4) if ratio else None})
    if opt.json:
        opt.json.flush()


def kv_memory(opt):
    """The KV bytes llama.cpp allocates for one sequence of 2k, 8k and
    32k tokens (-np 1, flash attention, f16 and q8_0 K and V): beside
    pkv-bench memory's hybrid-memory table."""
    print(f"\nllama.cpp KV for one sequence (llama-cpp-python {VERSION}'s "
          "tree): MiB of every KV cache at load")
    print(f"{'ctx':>6} {'f16':>9} {'q8_0':>9}")
    for ctx in (2048, 8192, 32768):
        mib = {}
        for kv in ("f16", "q8_0"):
            server = Server(opt, 1, ctx, verbose=True,
                            extra=["-fa", "on", "-ctk", kv, "-ctv", kv])
            mib[kv] = server.kv_mib()
            server.stop()
            if opt.json:
                opt.json.write(json.dumps({
                    "bench": "peer", "workload": "kv memory", "ctx": ctx,
                    "kv": kv, "mib": round(mib[kv], 2)}) + "\n")
        print(f"{ctx:>6} {mib['f16']:>9.2f} {mib['q8_0']:>9.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3,
                    help="rounds, each side once a round (default 3)")
    ap.add_argument("--threads", type=int, default=2,
                    help="threads of each side (default 2)")
    ap.add_argument("--only", default="decode,prefill,demo,trace",
                    help="workloads, comma-separated")
    ap.add_argument("--json", help="JSON lines to FILE ('-': stdout)")
    ap.add_argument("--model", default="gemma3", choices=sorted(MODELS),
                    help="the model (default gemma3)")
    ap.add_argument("--pkv-gguf",
                    default=os.path.join(ROOT, "build", "examples",
                                         "pkv-gguf"))
    ap.add_argument("--pkv-bench",
                    default=os.path.join(ROOT, "build", "bench", "pkv-bench"))
    ap.add_argument("--memory", default="both",
                    choices=("both", "default", "hybrid"),
                    help="depth and prompt: pkv's default memory, hybrid "
                    "memory, or both (the default)")
    ap.add_argument("--pkv-before",
                    help="a pkv-gguf (or pkv-gemma3) of an earlier build: "
                    "decode, prefill, depth and prompt measure it too, a "
                    "third side alternating with the others")
    ap.add_argument("--pkv-only", action="store_true",
                    help="measure pkv's side alone (no llama.cpp): its own "
                    "figures and each format's over its f16")
    ap.add_argument("--llama-bin",
                    help="llama.cpp's tools already built there: no build")
    ap.add_argument("--gguf", help="the model's GGUF (default: the cached "
                    "one of --model)")
    ap.add_argument("--depths",
                    help="depth: contexts to decode at, comma-separated "
                    "(default 2048,8192,32704; SmolLM2: 2048,8128)")
    ap.add_argument("--prompts", default="2048,8192",
                    help="prompt: prompt lengths, comma-separated")
    opt = ap.parse_args()
    model = MODELS[opt.model]
    opt.gguf = opt.gguf or os.path.join(pkv_cache(), model["gguf"])
    try:
        opt.depths = [int(x) for x in
                      (opt.depths or model["depths"]).split(",")]
        opt.prompts = [int(x) for x in opt.prompts.split(",")]
    except ValueError:
        fail("--depths and --prompts take comma-separated token counts")
    if min(opt.depths + opt.prompts) < 2 or max(opt.depths) > \
            model["context"] - DECODE_NEW or \
            max(opt.prompts) > model["context"]:
        fail(f"--depths and --prompts: 2 to {model['context'] - DECODE_NEW} "
             f"and {model['context']} tokens (the model's context)")
    if opt.runs < 1 or opt.threads < 1:
        fail("--runs and --threads take a number >= 1")
    work = opt.only.split(",")
    for w in work:
        if w not in ("decode", "prefill", "depth", "prompt", "demo", "trace",
                     "kvmem"):
            fail(f"--only: unknown workload {w}")
    for path in (opt.gguf, opt.pkv_gguf, opt.pkv_bench) + \
            ((opt.pkv_before,) if opt.pkv_before else ()):
        if not os.path.exists(path):
            fail(f"{path} is missing (sh examples/gguf/setup.sh and a "
                 "build of pkv make it)")
    opt.json = (sys.stdout if opt.json == "-" else
                open(opt.json, "w") if opt.json else None)
    if opt.pkv_only and ({"demo", "trace", "kvmem"} & set(work)):
        fail("--pkv-only: decode, prefill, depth and prompt only")
    opt.bins = None if opt.pkv_only else \
        opt.llama_bin or build_llama(pkv_cache())
    opt.pkv_help = {}
    opt.build = pkv_build(opt.pkv_gguf)
    opt.vocab = model["vocab"]  # which the trace draws from
    opt.decode_prompt = ("Here is a long story about a lighthouse keeper "
                         "and the ships she saved:")
    opt.trace_rate = None
    fig = Figures()
    kv_bytes = {}
    with tempfile.TemporaryDirectory() as tmp:
        # BOS where the model takes one, then ids spread over the
        # vocabulary: prompts of exactly the lengths asked, as
        # llama-bench's are (its tokens are random too).
        spread = opt.vocab - 2000
        paths = {}
        for n in set([PREFILL_LEN] + opt.depths + opt.prompts):
            paths[n] = os.path.join(tmp, f"{n}.ids")
            with open(paths[n], "w") as f:
                f.write(" ".join(str(model["bos"] if i == 0 and model["bos"]
                                     else 1000 + i * 7919 % spread)
                                 for i in range(n)) + "\n")
        for r in range(opt.runs):
            llama_first = r % 2 == 0
            for w in (w for w in work if w != "kvmem"):
                progress(f"round {r + 1}/{opt.runs}: {w} (load "
                         f"{load():.2f})")
                if w == "decode":
                    decode_round(opt, fig, llama_first)
                elif w == "prefill":
                    prefill_round(opt, fig, llama_first, paths[PREFILL_LEN])
                elif w == "depth":
                    depth_round(opt, fig, llama_first, paths)
                elif w == "prompt":
                    prompt_round(opt, fig, llama_first, paths)
                elif w == "demo":
                    demo_round(opt, fig, llama_first)
                else:
                    trace_round(opt, fig, llama_first)
    if "demo" in work or "trace" in work:
        # A verbose server logs every step too: this one only loads.
        server = Server(opt, 32, 32 * 128, verbose=True)
        kv_bytes["llama.cpp f16"] = server.kv_bytes_per_token()
        server.stop()
    if "kvmem" in work:
        kv_memory(opt)
    if work == ["kvmem"]:
        return
    for name, b in pkv_kv_bytes(opt).items():
        kv_bytes["pkv " + name] = b
    report(opt, fig, kv_bytes)


if __name__ == "__main__":
    main()
