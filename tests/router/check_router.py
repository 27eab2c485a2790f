#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""pkv-router against synthetic backends: each a small HTTP server that
answers OpenAI-shaped completions naming itself, and a ZeroMQ PUB socket
publishing KV events encoded by msgspec from structures written here from
vLLM's documented schema (vllm/distributed/kv_events.py): the array_like
layout and the map layout with byte-string hashes.

    check_router.py PKV_ROUTER

Checked, with token-id prompts (no model needed):
- a request goes to the backend whose events hold the longest prefix of
  its prompt, whole or streamed, through PyPI's openai client;
- BlockRemoved and AllBlocksCleared are honoured; a sliding-window
  group's blocks are not indexed;
- a gap in a backend's sequence numbers clears its blocks;
- ties go to the backend with the fewest requests in flight, and a longer
  prefix wins over load;
- --policy round-robin takes the backends in turn;
- a backend that drops its connection, or is gone, has its request
  retried on another (the client sees one answer); one that dies
  mid-stream ends the stream with an OpenAI-shaped error the client
  raises; with every backend gone, 502 in OpenAI's error shape;
- backends given without events: each prompt's prefix asked of their
  lookups (pkv-server's POST /pkv/lookup/...), routed to the largest of
  max(cached_tokens, store_tokens); a backend that answers 404, is gone,
  answers nonsense or too late counts as holding nothing and never
  delays the request past the lookup's timeout; no lookup when the
  index found the prefix;
- /health and /metrics (requests per backend, prefix-matched tokens,
  fallbacks, lookups, retries).
"""
import argparse
import atexit
import http.client
import http.server
import json
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import msgspec
import openai
import zmq

BLOCK = 4
TIMEOUT = 60


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def check(cond, message):
    if not cond:
        fail(message)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def event_structs(array_like):
    """vLLM's KV event structs, in one of msgspec's two layouts."""

    class KVCacheEvent(msgspec.Struct, array_like=array_like,
                       omit_defaults=True, gc=False, tag=True):
        pass

    class BlockStored(KVCacheEvent):
        block_hashes: list
        parent_block_hash: object
        token_ids: list
        block_size: int
        lora_id: object
        medium: object
        lora_name: object = None
        extra_keys: object = None
        group_idx: object = None
        kv_cache_spec_kind: object = None
        kv_cache_spec_sliding_window: object = None

    class BlockRemoved(KVCacheEvent):
        block_hashes: list
        medium: object
        group_idx: object = None

    class AllBlocksCleared(KVCacheEvent):
        pass

    class KVEventBatch(msgspec.Struct, array_like=True, omit_defaults=True,
                       gc=False):
        ts: float
        events: list
        data_parallel_rank: object = None

    return BlockStored, BlockRemoved, AllBlocksCleared, KVEventBatch


ENCODER = msgspec.msgpack.Encoder()


class Backend:
    """An OpenAI-shaped HTTP server answering "backend-N", and its KV
    events' PUB socket."""

    def __init__(self, n, ctx, array_like=True):
        self.n = n
        self.name = f"backend-{n}"
        self.got = []  # request bodies, in order
        # pkv-server's prefix lookup (POST /pkv/lookup/...): None answers
        # 404 (a backend without it), a dict is the answer, ("slow", s,
        # answer) answers after s seconds.
        self.lookup = None
        self.lookups = []  # (path, body) of the lookups asked, in order
        self.mode = "ok"  # ok, hold, drop, die-mid-stream
        self.release = threading.Event()
        self.seq = 0
        (self.Stored, self.Removed, self.Cleared,
         self.Batch) = event_structs(array_like)
        self.bytes_hashes = not array_like
        self.pub = ctx.socket(zmq.PUB)
        self.events_port = free_port()
        self.pub.bind(f"tcp://127.0.0.1:{self.events_port}")
        backend = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def chunk(self, data):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def answer(self, status, value):
                data = json.dumps(value).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                body = json.loads(self.rfile.read(
                    int(self.headers["Content-Length"])))
                if self.path.startswith("/pkv/lookup/"):
                    backend.lookups.append((self.path, body))
                    self.close_connection = True
                    lookup = backend.lookup
                    if isinstance(lookup, tuple):
                        time.sleep(lookup[1])
                        lookup = lookup[2]
                    try:  # a late answer's asker has left
                        if lookup is None:
                            self.answer(404, {"error": {
                                "message": "no such path", "type": "x",
                                "param": None, "code": None}})
                        else:
                            self.answer(200, lookup)
                    except OSError:
                        pass
                    return
                backend.got.append(body)
                self.close_connection = True
                mode = backend.mode
                if mode == "drop":
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if mode == "hold":
                    backend.release.wait(TIMEOUT)
                chat = self.path == "/v1/chat/completions"
                if body.get("stream"):
                    # Chunked, as pkv-server streams: a cut is seen as one.
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    for piece in (backend.name, "!"):
                        self.chunk(b"data: " + json.dumps(
                            backend.chunk(piece, chat)).encode() + b"\n\n")
                        if mode == "die-mid-stream":
                            self.connection.shutdown(socket.SHUT_RDWR)
                            return
                    self.chunk(b"data: [DONE]\n\n")
                    self.wfile.write(b"0\r\n\r\n")
                    return
                self.answer(200, backend.whole(chat))

        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.port = self.http.server_address[1]
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def spec(self):
        return f"{self.url()},tcp://127.0.0.1:{self.events_port}"

    def whole(self, chat):
        usage = {"prompt_tokens": 1, "completion_tokens": 1,
                 "total_tokens": 2}
        if chat:
            return {"id": "x", "object": "chat.completion", "created": 0,
                    "model": "m", "usage": usage,
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant",
                                             "content": self.name}}]}
        return {"id": "x", "object": "text_completion", "created": 0,
                "model": "m", "usage": usage,
                "choices": [{"index": 0, "text": self.name,
                             "finish_reason": "stop", "logprobs": None}]}

    def chunk(self, piece, chat):
        if chat:
            return {"id": "x", "object": "chat.completion.chunk",
                    "created": 0, "model": "m",
                    "choices": [{"index": 0, "finish_reason": None,
                                 "delta": {"content": piece}}]}
        return {"id": "x", "object": "text_completion", "created": 0,
                "model": "m", "choices": [{"index": 0, "text": piece,
                                           "finish_reason": None,
                                           "logprobs": None}]}

    def hash(self, k):
        return k.to_bytes(32, "big") if self.bytes_hashes else k

    def publish(self, events, skip=0):
        """One batch; skip sequence numbers first (a gap)."""
        self.seq += skip
        payload = ENCODER.encode(self.Batch(ts=time.time(), events=events))
        self.pub.send_multipart([b"", self.seq.to_bytes(8, "big"), payload])
        self.seq += 1

    def stored(self, tokens, first_hash, parent=None, **extra):
        """BlockStored of tokens' whole blocks, hashes first_hash, +1..."""
        n = len(tokens) // BLOCK
        return self.Stored(
            block_hashes=[self.hash(first_hash + i) for i in range(n)],
            parent_block_hash=None if parent is None else self.hash(parent),
            token_ids=list(tokens[:n * BLOCK]), block_size=BLOCK,
            lora_id=None, medium="GPU", **extra)

    def removed(self, hashes, **extra):
        return self.Removed(block_hashes=[self.hash(h) for h in hashes],
                            medium="GPU", **extra)

    def stop_http(self):
        self.http.shutdown()
        self.http.server_close()


class Router:
    """pkv-router on a free port, its output read by a thread (args: a
    whole command line instead, as check_fleet.py restarts a fleet's;
    timeout: its requests' and waits', in seconds); killed at exit if it
    still runs, so that a failed check leaves no router."""

    def __init__(self, binary, backends, extra=(), args=None,
                 timeout=TIMEOUT):
        if args is None:
            args = [binary, "--port", "0", *extra]
            for b in backends:
                args += ["--backend", b.spec()]
        self.args = args
        self.timeout = timeout
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        atexit.register(self.reap)
        self.lines = queue.Queue()
        self.log = []
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.time() + self.timeout
        self.port = None
        while self.port is None:
            try:
                line = self.lines.get(timeout=max(0.1,
                                                  deadline - time.time()))
            except queue.Empty:
                self.proc.kill()
                fail(f"{' '.join(args)}: not listening: {''.join(self.log)}")
            if line is None:
                fail(f"{' '.join(args)} exited {self.proc.wait()}: "
                     f"{''.join(self.log)}")
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
        self.client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{self.port}/v1", api_key="none",
            timeout=timeout, max_retries=0)
        self.backends = backends

    def _read(self):
        for line in self.proc.stdout:
            self.log.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def raw(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port,
                                       timeout=self.timeout)
        c.request(method, path, body=None if body is None else
                  json.dumps(body).encode(),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        text = r.read().decode()
        c.close()
        try:
            return r.status, json.loads(text)
        except ValueError:
            return r.status, text

    def metrics(self):
        status, text = self.raw("GET", "/metrics")
        check(status == 200, f"/metrics answered {status}")
        values = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, value = line.rsplit(" ", 1)
                values[key] = float(value)
        return values

    def per_backend(self, name, b):
        return self.metrics()[f'pkv_router_{name}{{backend='
                              f'"http://127.0.0.1:{b.port}"}}']

    def wait_for(self, what, cond):
        """Poll until cond() (the events travel asynchronously)."""
        deadline = time.time() + self.timeout
        while not cond():
            if time.time() > deadline:
                fail(f"timed out waiting for {what}: {self.metrics()}")
            time.sleep(0.02)

    def wait_blocks(self, b, n):
        self.wait_for(f"{b.name} to hold {n} blocks",
                      lambda: self.per_backend("index_blocks", b) == n)

    def sync(self, b):
        """Until an empty batch of b's is read: what b sent before is."""
        n = self.per_backend("event_batches_total", b)
        b.publish([])
        self.wait_for(f"{b.name}'s batch", lambda: self.per_backend(
            "event_batches_total", b) > n)

    def connect_events(self):
        """ZeroMQ's late joiner: publish empty batches until each
        backend's first one is read."""
        for b in self.backends:
            def read():
                b.publish([])
                return self.per_backend("event_batches_total", b) > 0
            self.wait_for(f"{b.name}'s events", read)

    def complete(self, prompt, stream=False):
        """The name of the backend that answered."""
        if stream:
            parts = self.client.completions.create(
                model="m", prompt=prompt, max_tokens=4, stream=True)
            return "".join(c.choices[0].text for c in parts
                           if c.choices).rstrip("!")
        return self.client.completions.create(
            model="m", prompt=prompt, max_tokens=4).choices[0].text

    def reap(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            fail("pkv-router did not end after SIGTERM")
        check(rc == 0, f"pkv-router exited {rc}: {''.join(self.log)}")


def tokens(start, n):
    return list(range(start, start + n))


def routing(router, b0, b1, b2):
    """Longest prefix, removals, all cleared, groups, gaps."""
    p = tokens(100, 12)  # 3 blocks
    b1.publish([b1.stored(p[:8], 10)])
    router.wait_blocks(b1, 2)
    asked = router.metrics()["pkv_router_lookups_total"]
    check(router.complete(p) == b1.name, "the 2-block prefix's holder")
    check(router.metrics()["pkv_router_lookups_total"] == asked,
          "the index found the prefix: no backend asked")
    check(router.complete(p, stream=True) == b1.name, "streamed, the same")
    # b2's events in the map layout with byte-string hashes, in two
    # events chained through parent_block_hash.
    b2.publish([b2.stored(p[:4], 20), b2.stored(p[4:12], 21, parent=20)])
    router.wait_blocks(b2, 3)
    check(router.complete(p) == b2.name, "the longer prefix wins")
    # A prompt that differs in its second block matches one block only.
    q = p[:4] + tokens(500, 8)
    b0.publish([b0.stored(q[:8], 30)])
    router.wait_blocks(b0, 2)
    check(router.complete(q) == b0.name, "the walk follows the tokens")
    # A sliding-window group's blocks are not indexed; an event without
    # group_idx was group 0's.
    b0.publish([b0.stored(p, 40, group_idx=1,
                          kv_cache_spec_kind="sliding_window",
                          kv_cache_spec_sliding_window=512)])
    b0.publish([b0.stored(tokens(900, 4), 50, group_idx=0,
                          kv_cache_spec_kind="full_attention")])
    router.wait_blocks(b0, 3)
    check(router.complete(p) == b2.name, "a window's blocks are skipped")
    # Removing b2's second block cuts its chain to one block: b1 holds 2.
    b2.publish([b2.removed([21])])
    router.wait_blocks(b2, 2)
    check(router.complete(p) == b1.name, "a removed block ends the walk")
    # A removal naming another group is not this group's.
    b0.publish([b0.removed([31], group_idx=1), b0.removed([30], group_idx=0)])
    router.wait_blocks(b0, 2)
    router.sync(b0)
    check(router.per_backend("index_blocks", b0) == 2,
          "a removal of another group skipped")
    # All cleared on b1: b2's one block is the longest.
    b1.publish([b1.Cleared()])
    router.wait_blocks(b1, 0)
    check(router.complete(p) == b2.name, "all cleared honoured")
    # A gap in b2's sequence clears it; what follows the gap is kept.
    gaps = router.per_backend("event_gaps_total", b2)
    b2.publish([b2.stored(tokens(700, 4), 60)], skip=1)
    router.wait_for("the gap", lambda: router.per_backend(
        "event_gaps_total", b2) == gaps + 1)
    router.wait_blocks(b2, 1)
    before = router.metrics()["pkv_router_fallbacks_total"]
    check(router.complete(p) != "", "routed")
    check(router.metrics()["pkv_router_fallbacks_total"] == before + 1,
          "no holder left after the gap: a fallback")
    for b in (b0, b1, b2):
        b.publish([b.Cleared()])
        router.wait_blocks(b, 0)


def load(router, b0, b1, b2):
    """Ties to the fewest in flight; a longer prefix beats load where it
    saves more than the load costs, a short one does not."""
    backends = (b0, b1, b2)
    results, threads = {}, []

    def hold():
        """The backends hold every request until release()."""
        results.clear()
        threads.clear()
        for b in backends:
            b.mode = "hold"
            b.release.clear()

    def release():
        for b in backends:
            b.release.set()
        for t in threads:
            t.join(TIMEOUT)
        for b in backends:
            b.mode = "ok"

    def clear_all():
        for b in backends:
            b.publish([b.Cleared()])
            router.wait_blocks(b, 0)

    def send(key, prompt, what, cond):
        t = threading.Thread(target=lambda: results.__setitem__(
            key, router.complete(prompt)))
        t.start()
        threads.append(t)
        router.wait_for(what, cond)

    def in_flight(b):
        return router.per_backend("in_flight", b)

    pa, pb = tokens(1000, 8), tokens(2000, 8)
    b0.publish([b0.stored(pa, 100)])
    b2.publish([b2.stored(pa, 200)])
    b1.publish([b1.stored(pb, 300)])
    for b in backends:
        router.wait_blocks(b, 2)
    hold()
    # pa: b0 and b2 hold it equally. The first takes one, the second the
    # other, the idle one.
    send("a", pa, "the first request in flight",
         lambda: in_flight(b0) + in_flight(b2) == 1)
    idle = b2 if in_flight(b0) == 1 else b0
    send("b", pa, "the tie to go to the idle holder",
         lambda: in_flight(idle) == 1)
    # pb: only b1 holds it; a second pb goes there too, busy as it is,
    # although b0 and b2 have no more in flight.
    send("c", pb, "pb on b1", lambda: in_flight(b1) == 1)
    send("d", pb, "the prefix to win over load", lambda: in_flight(b1) == 2)
    release()
    check(sorted([results.get("a"), results.get("b")]) ==
          [b0.name, b2.name], f"the tie went to the idle holder: {results}")
    check(results.get("c") == results.get("d") == b1.name,
          f"the prefix wins over load: {results}")
    # A short prefix on a busy backend, as a shared system prompt is on
    # its first holder: s (one block) on b0 only. A first prompt behind
    # it goes to b0 (cost 12 tokens against 16); a second, while the
    # first is in flight there, costs b0 12 + 16 tokens and an idle
    # backend 16: it goes to an idle one, not onto b0.
    clear_all()
    s = tokens(3000, 4)
    b0.publish([b0.stored(s, 400)])
    router.wait_blocks(b0, 1)
    hold()
    send("e", s + tokens(4000, 12), "the first behind s on b0",
         lambda: in_flight(b0) == 1)
    send("f", s + tokens(5000, 12), "the second on an idle backend",
         lambda: in_flight(b1) + in_flight(b2) == 1)
    release()
    check(results.get("e") == b0.name and
          results.get("f") in (b1.name, b2.name),
          f"a short prefix on a busy backend loses to an idle one: "
          f"{results}")
    clear_all()


def failures(router, b0, b1, b2):
    """A backend that drops, dies mid-stream, or is gone."""
    p = tokens(3000, 8)
    b0.publish([b0.stored(p, 400)])
    router.wait_blocks(b0, 2)
    b0.mode = "drop"
    retries = router.metrics()["pkv_router_retries_total"]
    answer = router.complete(p)
    check(answer in (b1.name, b2.name), f"retried elsewhere: {answer}")
    check(router.metrics()["pkv_router_retries_total"] == retries + 1,
          "one retry counted")
    check(router.per_backend("index_blocks", b0) == 0,
          "a failed backend's blocks are forgotten")
    b0.mode = "ok"
    # Mid-stream: the client raises the stream's error event.
    b1.publish([b1.stored(p, 500)])
    router.wait_blocks(b1, 2)
    b1.mode = "die-mid-stream"
    try:
        text = router.complete(p, stream=True)
        fail(f"a stream cut mid-way passed as {text!r}")
    except openai.APIError as e:
        check("mid-answer" in str(e), f"the stream's error: {e}")
    b1.mode = "ok"
    # Streamed and dropped before any byte: retried.
    b2.publish([b2.stored(p, 600)])
    router.wait_blocks(b2, 2)
    b2.mode = "drop"
    answer = router.complete(p, stream=True)
    check(answer in (b0.name, b1.name), f"a stream retried: {answer}")
    b2.mode = "ok"
    # Gone: refused connections are retried, then 502.
    for b in (b0, b1):
        b.stop_http()
    check(router.complete(tokens(1, 8)) == b2.name, "the last one up")
    b2.stop_http()
    status, body = router.raw("POST", "/v1/completions",
                              {"model": "m", "prompt": [1, 2, 3]})
    check(status == 502 and body["error"]["type"] == "server_error" and
          body["error"]["code"] == "backend_unavailable",
          f"every backend gone: {status} {body}")
    status, _ = router.raw("GET", "/health")
    check(status == 503, f"/health with no backend up: {status}")


def lookups(binary, b0, b1, b2, ctx):
    """Backends given without events: the router asks their prefix
    lookups and routes by max(cached, store); a backend that answers 404,
    nonsense, late, or is gone counts as holding nothing."""
    gone = Backend(3, ctx)
    gone.stop_http()
    # The lookups' time generous (a loaded machine, a sanitizer build),
    # the late one far later.
    args = [binary, "--port", "0", "--lookup-timeout", "3000"]
    for b in (b0, b1, b2, gone):
        args += ["--backend", b.url()]
    router = Router(binary, (b0, b1, b2, gone), args=args)
    p = tokens(5000, 12)
    keys = ("pkv_router_lookups_total", "pkv_router_lookup_unanswered_total",
            "pkv_router_lookup_matched_tokens_total",
            "pkv_router_fallbacks_total")

    def routed(answers, want, what, matched, unanswered):
        for b, a in zip((b0, b1, b2), answers):
            b.lookup = a
            b.lookups.clear()
        before = router.metrics()
        name = router.complete(p)
        after = router.metrics()
        check(name == want.name, f"{what}: went to {name}, not {want.name}")
        for b in (b0, b1, b2):
            check(b.lookups == [("/pkv/lookup/v1/completions", want.got[-1])],
                  f"{what}: {b.name} asked {b.lookups}")
        delta = [after[k] - before[k] for k in keys]
        # The gone backend is asked each time: one more unanswered.
        check(delta == [1, unanswered + 1, matched, int(matched == 0)],
              f"{what}: {keys} moved by {delta}")

    def ans(cached, store=None):
        return {"prompt_tokens": 12, "cached_tokens": cached,
                "store_tokens": store}

    # Each case's winner sets where the next tie starts (in turn).
    routed([ans(4), ans(8, 0), None], b1, "the longest cached prefix", 8, 1)
    routed([ans(0, 8), ans(4), None], b0,
           "the store's blocks count for a backend sharing it", 8, 1)
    routed([{"cached_tokens": -3}, "not an object", {"store_tokens": 8}],
           b1, "answers that are not a lookup's: by load, in turn", 0, 3)
    routed([ans(4, 4), ans(0, 8), ans(8, 4)], b2,
           "a tie at 8 (store, cache): in turn from the last", 8, 0)
    routed([None, ans(4), ans(10 ** 12)], b2,
           "a claim past the prompt: taken as the whole prompt", 12, 1)
    # A backend answering after the lookup's time counts as holding
    # nothing, and the request does not wait for it (were it waited for,
    # it would win, 20 s later).
    start = time.time()
    routed([None, ("slow", 20, ans(12)), ans(4)], b2,
           "a late answer not waited for", 4, 2)
    check(time.time() - start < 20, "the request waited for the late lookup")
    router.stop()
    for b in (b0, b1, b2):
        b.lookup = None


def round_robin(binary, b0, b1, b2):
    router = Router(binary, [b0, b1, b2], ["--policy", "round-robin"])
    router.connect_events()
    p = tokens(4000, 8)
    b1.publish([b1.stored(p, 700)])
    router.wait_blocks(b1, 2)
    names = [router.complete(p) for _ in range(3)]
    check(sorted(names) == [b0.name, b1.name, b2.name],
          f"round-robin takes each in turn: {names}")
    b1.publish([b1.Cleared()])
    router.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("router")
    args = ap.parse_args()
    ctx = zmq.Context()
    b0, b1 = Backend(0, ctx), Backend(1, ctx)
    b2 = Backend(2, ctx, array_like=False)
    round_robin(args.router, b0, b1, b2)
    print("round-robin: ok")
    router = Router(args.router, [b0, b1, b2])
    router.connect_events()
    status, body = router.raw("GET", "/health")
    check(status == 200 and body["status"] == "ok", f"/health: {body}")
    routing(router, b0, b1, b2)
    print("routing by the events: ok")
    load(router, b0, b1, b2)
    print("ties by load: ok")
    status, body = router.raw("GET", "/nowhere")
    check(status == 404 and "error" in body, f"404: {status} {body}")
    m = router.metrics()
    check(m["pkv_router_prefix_matched_tokens_total"
            f'{{backend="http://127.0.0.1:{b1.port}"}}'] > 0,
          "prefix-matched tokens counted")
    lookups(args.router, b0, b1, b2, ctx)
    print("backends without events: routed by their lookups: ok")
    failures(router, b0, b1, b2)
    print("failed backends: ok")
    router.stop()
    print("pkv-router: all checks passed")


if __name__ == "__main__":
    main()
