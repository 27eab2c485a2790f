#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""pkv-server driven by real clients: PyPI's openai package (streamed and
whole, completions and chat), curl, and raw HTTP where a client must
misbehave (a body too large, a connection dropped mid-stream).

    check_server.py PKV_SERVER PKV_GGUF --model gemma3|smollm2 [--quick]
        [--threads N]

Checked, on a server started on a free loopback port:
- greedy answers equal pkv-gguf's own for the same prompt (--backend cpu
  both: the host's rows do not depend on batching, so a request's tokens
  do not depend on the others running beside it), whole and streamed
  (the deltas joined), completions and, where the model has a chat
  template, chat; usage counts;
- several clients at once, each getting its own greedy answer, read and
  answered by a pool of four HTTP threads (--http-threads 4);
- stop strings: the answer ends before the first one, finish_reason stop;
- bad requests answered 4xx in OpenAI's error shape: invalid JSON, an
  unknown field, a wrong model, bad values, a prompt longer than the
  context, a body over the limit (413), a wrong method (405) or path
  (404), more requests than --max-requests (429);
- a client that disconnects mid-stream cancels its sequence (/metrics:
  cancelled counted, nothing left running);
- /metrics parses as Prometheus text and its counters add up;
- the prefix lookup (POST /pkv/lookup/v1/completions and .../chat/...):
  a prompt served once reports its whole blocks cached, an unknown one
  0, store_tokens absent without --store, bad bodies 4xx in OpenAI's
  error shape, lookups counted in /metrics;
- a request past --timeout gets 504; SIGTERM ends the server with 0
  (under AddressSanitizer: nothing leaked), a stream in flight ending
  with the shutdown's error event.
--quick (the second model) runs the greedy checks and a stream only.
--threads N: the model's threads, in the server and pkv-gguf (default
theirs).
"""
import argparse
import atexit
import concurrent.futures
import http.client
import json
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import openai

# Generous: a loaded 2-core machine, or a sanitizer build.
START_TIMEOUT = 600
REQUEST_TIMEOUT = 600

PROMPTS = ["Once upon a time", "The capital of France is",
           "def fibonacci(n):", "Water boils at", "My favourite colour is",
           "The quick brown fox", "In 1969, the first", "Rust and C are"]
QUESTIONS = ["What is 2 + 2?", "Name a colour.", "Say hello.",
             "What is the capital of Italy?"]


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def check(cond, message):
    if not cond:
        fail(message)


class Server:
    """pkv-server on a free port, its output read by a thread; killed at
    exit if it still runs, so that a failed check leaves no server."""

    def __init__(self, binary, model, extra):
        args = [binary, "--model", model, "--port", "0", "--backend", "cpu",
                *extra]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        atexit.register(self.reap)
        self.lines = queue.Queue()
        self.log = []
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.time() + START_TIMEOUT
        self.port = None
        while self.port is None:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.time()))
            except queue.Empty:
                self.kill()
                fail(f"{' '.join(args)}: not listening after "
                     f"{START_TIMEOUT} s: {''.join(self.log)}")
            if line is None:
                fail(f"{' '.join(args)} exited {self.proc.wait()}: "
                     f"{''.join(self.log)}")
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
        self.url = f"http://127.0.0.1:{self.port}"
        self.client = openai.OpenAI(base_url=self.url + "/v1",
                                    api_key="none", timeout=REQUEST_TIMEOUT,
                                    max_retries=0)

    def _read(self):
        for line in self.proc.stdout:
            self.log.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def stop(self):
        """SIGTERM; the exit code."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=START_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            fail("pkv-server did not end after SIGTERM")

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def reap(self):
        if self.proc.poll() is None:
            self.kill()

    def raw(self, method, path, body=None, headers=None):
        """(status, parsed JSON or text) over http.client."""
        c = http.client.HTTPConnection("127.0.0.1", self.port,
                                       timeout=REQUEST_TIMEOUT)
        data = body if isinstance(body, (bytes, type(None))) else \
            json.dumps(body).encode()
        c.request(method, path, body=data, headers=headers or {})
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
        return parse_metrics(text)


def parse_metrics(text):
    """Prometheus' text format: {name or name{labels}: value}, each sample
    under a TYPE line of its family."""
    values, typed = {}, set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            check(kind in ("gauge", "counter"), f"metric type {kind}")
            typed.add(name)
            continue
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r'([a-z_]+)(\{[a-z_]+="[a-z_]+"\})? (\S+)', line)
        check(m is not None, f"/metrics line {line!r}")
        check(m.group(1) in typed, f"/metrics: {m.group(1)} has no TYPE")
        values[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return values


def reference(gguf, model, prompt, max_new, chat, threads):
    """pkv-gguf's greedy answer: (text, tokens generated, finish)."""
    args = [gguf, "--model", model, "--prompt", prompt, "--max-new",
            str(max_new), "--temperature", "0", "--json", "--backend", "cpu",
            *threads]
    if chat:
        args.append("--chat")
    out = subprocess.run(args, capture_output=True, text=True,
                         timeout=REQUEST_TIMEOUT)
    check(out.returncode == 0, f"{' '.join(args)}: {out.stderr}")
    r = json.loads(out.stdout)["requests"][0]
    return r["text"], len(r["tokens"]), r["finish"]


def error_shape(status, body, want_status, what):
    check(status == want_status,
          f"{what}: status {status}, not {want_status}: {body}")
    check(isinstance(body, dict) and set(body) == {"error"},
          f"{what}: not OpenAI's error shape: {body}")
    e = body["error"]
    check(set(e) == {"message", "type", "param", "code"} and
          isinstance(e["message"], str) and e["message"] and
          isinstance(e["type"], str),
          f"{what}: not OpenAI's error shape: {body}")
    return e


def greedy_completion(s, prompt, max_tokens, stream, **extra):
    """(text, finish_reason, usage) through the openai client."""
    if not stream:
        r = s.client.completions.create(model=s.model, prompt=prompt,
                                        max_tokens=max_tokens,
                                        temperature=0, **extra)
        return r.choices[0].text, r.choices[0].finish_reason, r.usage
    text, finish, usage = "", None, None
    for chunk in s.client.completions.create(
            model=s.model, prompt=prompt, max_tokens=max_tokens,
            temperature=0, stream=True,
            stream_options={"include_usage": True}, **extra):
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.text
            finish = c.finish_reason or finish
    return text, finish, usage


def greedy_chat(s, question, max_tokens, stream):
    messages = [{"role": "user", "content": question}]
    if not stream:
        r = s.client.chat.completions.create(
            model=s.model, messages=messages, max_tokens=max_tokens,
            temperature=0)
        check(r.choices[0].message.role == "assistant", "chat role")
        return (r.choices[0].message.content, r.choices[0].finish_reason,
                r.usage)
    text, finish, usage, role = "", None, None, None
    for chunk in s.client.chat.completions.create(
            model=s.model, messages=messages, max_tokens=max_tokens,
            temperature=0, stream=True,
            stream_options={"include_usage": True}):
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            role = c.delta.role or role
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    check(role == "assistant", f"chat stream role {role}")
    return text, finish, usage


def check_greedy(s, gguf, model, chat, quick, threads):
    """Whole and streamed answers against pkv-gguf's, one at a time."""
    n = 12
    cases = [(p, False) for p in PROMPTS[:2 if quick else 3]]
    if chat:
        cases += [(q, True) for q in QUESTIONS[:1 if quick else 2]]
    for prompt, is_chat in cases:
        want, count, finish = reference(gguf, model, prompt, n, is_chat,
                                        threads)
        for stream in (False, True):
            got = (greedy_chat if is_chat else greedy_completion)(
                s, prompt, n, stream)
            what = f"{'chat' if is_chat else 'completion'} {prompt!r} " \
                   f"stream={stream}"
            check(got[0] == want, f"{what}: {got[0]!r}, pkv-gguf {want!r}")
            check(got[1] == finish, f"{what}: finish {got[1]}, pkv-gguf "
                                    f"{finish}")
            check(got[2] is not None and got[2].completion_tokens == count
                  and got[2].total_tokens == got[2].prompt_tokens + count,
                  f"{what}: usage {got[2]}, {count} tokens generated")
    print(f"greedy answers equal pkv-gguf's ({len(cases)} prompts, whole "
          f"and streamed)")


def check_concurrent(s, chat):
    """Eight clients at once, half streaming: each its own answer, as it
    gets alone."""
    prompts = PROMPTS[:8]
    alone = {p: greedy_completion(s, p, 10, False)[0] for p in prompts}
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        futures = {p: pool.submit(greedy_completion, s, p, 10, i % 2 == 1)
                   for i, p in enumerate(prompts)}
        for p, f in futures.items():
            got = f.result()[0]
            check(got == alone[p], f"concurrent {p!r}: {got!r}, alone "
                                   f"{alone[p]!r}")
    if chat:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            results = list(pool.map(
                lambda q: greedy_chat(s, q, 8, True)[0], QUESTIONS))
        for q, got in zip(QUESTIONS, results):
            check(got == greedy_chat(s, q, 8, False)[0],
                  f"concurrent chat {q!r}")
    print(f"{len(prompts)} concurrent clients: each its own answer")


def check_stop(s):
    prompt = PROMPTS[0]
    text = greedy_completion(s, prompt, 16, False)[0]
    words = text.split()
    check(len(words) >= 3, f"a 16-token answer of few words: {text!r}")
    stop = " " + words[2]
    want = text[:text.index(stop)]
    for stream in (False, True):
        got, finish, _ = greedy_completion(s, prompt, 16, stream,
                                           stop=[stop, "\u00e9\u00e9\u00e9"])
        check(got == want and finish == "stop",
              f"stop {stop!r} stream={stream}: {got!r} ({finish}), "
              f"want {want!r}")
    print(f"stop strings: the answer ends before {stop!r}")


def check_ignore_eos(s):
    """A chat answer that ends at its end of turn runs on to max_tokens
    with ignore_eos, the same text up to where it ended."""
    n = 48
    for q in QUESTIONS:
        text, finish, _ = greedy_chat(s, q, n, False)
        if finish == "stop":
            break
    else:
        fail(f"no question's greedy answer ends before {n} tokens")
    r = s.client.chat.completions.create(
        model=s.model, messages=[{"role": "user", "content": q}],
        max_tokens=n, temperature=0, extra_body={"ignore_eos": True})
    got = r.choices[0].message.content
    check(r.choices[0].finish_reason == "length" and
          r.usage.completion_tokens == n and got.startswith(text),
          f"ignore_eos {q!r}: {got!r} ({r.choices[0].finish_reason}, "
          f"{r.usage.completion_tokens} tokens), without it {text!r}")
    print(f"ignore_eos: {q!r} runs to {n} tokens past its end of turn")


def check_bad_requests(s):
    m = s.model
    cases = [
        ("POST", "/v1/completions", b"{\"model\": ", 400, "invalid JSON"),
        ("POST", "/v1/completions", b"[1, 2]", 400, "not an object"),
        ("POST", "/v1/completions", {"model": m, "prompt": "x", "bogus": 1},
         400, "an unknown field"),
        ("POST", "/v1/completions", {"model": "gpt-9", "prompt": "x"}, 404,
         "another model"),
        ("POST", "/v1/completions", {"model": m}, 400, "no prompt"),
        ("POST", "/v1/completions", {"model": m, "prompt": "x",
                                     "max_tokens": 0}, 400, "max_tokens 0"),
        ("POST", "/v1/completions", {"model": m, "prompt": "x",
                                     "temperature": 5}, 400,
         "temperature 5"),
        ("POST", "/v1/completions", {"model": m, "prompt": "x", "n": 2}, 400,
         "n 2"),
        ("POST", "/v1/completions", {"model": m, "prompt": [1, -4]}, 400,
         "a negative token id"),
        ("POST", "/v1/completions", {"model": m, "prompt": "x",
                                     "stop": ["a"] * 5}, 400,
         "five stop strings"),
        ("POST", "/v1/completions", {"model": m, "prompt": "x",
                                     "ignore_eos": 1}, 400,
         "ignore_eos not true or false"),
        ("POST", "/v1/completions",
         {"model": m, "prompt": "x", "prompt_extra": {"a": [1, {"b": 2}]}},
         400, "a nested unknown field"),
        ("POST", "/v1/chat/completions",
         {"model": m, "messages": [{"role": "wizard", "content": "x"}]},
         400, "a bad role"),
        ("POST", "/v1/chat/completions", {"model": m, "messages": []}, 400,
         "no messages"),
        ("POST", "/v1/completions",
         {"model": m, "prompt": "hello " * 400}, 400,
         "a prompt longer than the context"),
        ("POST", "/v1/completions",
         {"model": m, "prompt": "hi", "max_tokens": 300}, 400,
         "a prompt and max_tokens past the context"),
        ("POST", "/v1/completions",
         {"model": m, "prompt": "x" * 70000}, 413, "a body over the limit"),
        ("GET", "/v1/completions", None, 405, "GET a POST path"),
        ("POST", "/v1/nothing", {"model": m}, 404, "an unknown path"),
    ]
    for method, path, body, status, what in cases:
        got_status, got = s.raw(method, path, body)
        e = error_shape(got_status, got, status, what)
        if what == "an unknown field":
            check(e["param"] == "bogus", f"{what}: param {e['param']}")
        if "context" in what:
            check(e["code"] == "context_length_exceeded",
                  f"{what}: code {e['code']}")
    # The openai client raises the status's own exception, with the body.
    try:
        s.client.completions.create(model=s.model, prompt="x",
                                    extra_body={"frobnicate": True})
        fail("an unknown field through the openai client: no error")
    except openai.BadRequestError as exc:
        check(exc.status_code == 400 and
              exc.body.get("param") == "frobnicate",
              f"openai.BadRequestError body {exc.body}")
    print(f"bad requests: {len(cases) + 1} answered 4xx in OpenAI's error "
          f"shape")


def open_stream(s, max_tokens):
    """A streaming request on a raw socket, read up to its first event:
    the socket."""
    body = json.dumps({"model": s.model, "prompt": PROMPTS[0],
                       "max_tokens": max_tokens, "stream": True}).encode()
    sock = socket.create_connection(("127.0.0.1", s.port),
                                    timeout=REQUEST_TIMEOUT)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() +
                 b"\r\n\r\n" + body)
    seen = b""
    while b"data: {" not in seen:
        got = sock.recv(4096)
        check(got, f"the stream ended before its first event: {seen!r}")
        seen += got
    check(seen.startswith(b"HTTP/1.1 200"), f"stream answered {seen[:40]!r}")
    return sock


def wait_metrics(s, cond, what, seconds=REQUEST_TIMEOUT):
    deadline = time.time() + seconds
    while time.time() < deadline:
        m = s.metrics()
        if cond(m):
            return m
        time.sleep(0.2)
    fail(f"{what}: /metrics never showed it: {s.metrics()}")


def check_disconnect_and_limit(s, max_requests):
    """max_requests streams in flight: one more is refused with 429; then
    each client leaves mid-stream and its sequence is aborted."""
    key = 'pkv_requests_finished_total{reason="cancelled"}'
    before = s.metrics()[key]
    socks = [open_stream(s, 200) for _ in range(max_requests)]
    status, body = s.raw("POST", "/v1/completions",
                         {"model": s.model, "prompt": "x", "max_tokens": 1})
    error_shape(status, body, 429, "a request past --max-requests")
    for sock in socks:
        sock.close()
    wait_metrics(s, lambda m: m[key] == before + max_requests and
                 m["pkv_requests_running"] == 0 and
                 m["pkv_requests_in_flight"] == 0,
                 f"{max_requests} clients gone mid-stream")
    print(f"{max_requests} streams in flight, the next answered 429; "
          f"clients leaving mid-stream cancel their sequences")


def check_metrics(s):
    m = s.metrics()
    for name in ("pkv_requests_running", "pkv_requests_waiting",
                 "pkv_kv_usage_ratio", "pkv_prefix_hit_tokens_total",
                 "pkv_prefix_query_tokens_total",
                 "pkv_generation_tokens_total",
                 "pkv_generation_tokens_per_second",
                 "pkv_requests_rejected_total"):
        check(name in m, f"/metrics lacks {name}")
    check(0 <= m["pkv_kv_usage_ratio"] <= 1, "KV use in [0, 1]")
    check(m["pkv_prefix_hit_tokens_total"] <=
          m["pkv_prefix_query_tokens_total"], "prefix hits <= queries")
    # The same prompt twice: its blocks are found the second time.
    prompt = "Tell me a story. " * 8
    greedy_completion(s, prompt, 2, False)
    hits = s.metrics()["pkv_prefix_hit_tokens_total"]
    greedy_completion(s, prompt, 2, False)
    check(s.metrics()["pkv_prefix_hit_tokens_total"] >= hits + 16,
          "a prompt sent again hits the prefix cache")
    print("/metrics: Prometheus text, counters consistent, prefix hits "
          "counted")


def check_lookup(s, chat):
    """POST /pkv/lookup/v1/...: the tokens of a prompt the KV cache holds,
    read as the request would be, nothing run; no store_tokens without
    --store; bad bodies answered as the request's are."""
    def lookup(body, path="/pkv/lookup/v1/completions"):
        status, got = s.raw("POST", path, body)
        check(status == 200, f"lookup of {body}: {status} {got}")
        check(set(got) == {"prompt_tokens", "cached_tokens"},
              f"lookup answer's fields (no --store): {got}")
        return got

    before = s.metrics()
    prompt = "A lookup of a prompt served once: " + "page table " * 30
    body = {"model": s.model, "prompt": prompt, "max_tokens": 1}
    fresh = lookup(body)
    n = fresh["prompt_tokens"]
    check(n > 48 and fresh["cached_tokens"] == 0,
          f"a prompt never served: {fresh}")
    greedy_completion(s, prompt, 1, False)
    # Every whole block but the one holding the last token, which a
    # request always computes. The answer may leave before the step that
    # caches the blocks has ended: asked until then.
    want = {"prompt_tokens": n, "cached_tokens": (n - 1) // 16 * 16}
    looked = 1
    deadline = time.time() + REQUEST_TIMEOUT
    while True:
        got = lookup(body)
        looked += 1
        if got == want or time.time() > deadline:
            break
        time.sleep(0.1)
    check(got == want, f"the prompt served once: {got}, not {want}")
    # Fields of a request the lookup does not use are read all the same.
    ids = {"model": s.model, "prompt": [1] * 40, "stream": True}
    check(lookup(ids)["cached_tokens"] == 0, "unknown token ids")
    looked += 1
    if chat:
        c = lookup({"model": s.model,
                    "messages": [{"role": "user", "content": prompt}]},
                   "/pkv/lookup/v1/chat/completions")
        check(c["prompt_tokens"] > n and c["cached_tokens"] % 16 == 0,
              f"a chat lookup: {c}")
        looked += 1
    m = s.model
    cases = [
        ("POST", b"{\"model\": ", 400, "invalid JSON"),
        ("POST", {"model": m, "prompt": "x", "bogus": 1}, 400,
         "an unknown field"),
        ("POST", {"model": "gpt-9", "prompt": "x"}, 404, "another model"),
        ("POST", {"model": m}, 400, "no prompt"),
        ("POST", {"model": m, "prompt": [1, -4]}, 400, "a negative id"),
        ("POST", {"model": m, "prompt": "hello " * 400}, 400,
         "a prompt longer than the context"),
        ("POST", {"model": m, "prompt": "x" * 70000}, 413,
         "a body over the limit"),
        ("GET", None, 405, "GET"),
    ]
    for method, bad, status, what in cases:
        code, err = s.raw(method, "/pkv/lookup/v1/completions", bad)
        error_shape(code, err, status, f"lookup: {what}")
    code, err = s.raw("POST", "/pkv/lookup/v1/nothing", body)
    error_shape(code, err, 404, "lookup: an unknown path")
    after = s.metrics()
    check(after["pkv_lookups_total"] == before["pkv_lookups_total"] + looked
          and after["pkv_lookup_store_failures_total"] == 0,
          f"lookups counted: {before} {after}")
    print(f"prefix lookup: {got['cached_tokens']} of {n} tokens cached "
          f"after one request, 0 of unknown prompts, {len(cases) + 1} bad "
          f"bodies 4xx")


def check_curl(s):
    body = json.dumps({"model": s.model, "prompt": PROMPTS[1],
                       "max_tokens": 6, "temperature": 0})
    out = subprocess.run(["curl", "-sS", "--fail-with-body",
                          s.url + "/v1/completions", "-H",
                          "Content-Type: application/json", "-d", body],
                         capture_output=True, text=True,
                         timeout=REQUEST_TIMEOUT)
    check(out.returncode == 0, f"curl: {out.stderr} {out.stdout}")
    whole = json.loads(out.stdout)["choices"][0]["text"]
    stream = json.dumps({**json.loads(body), "stream": True})
    out = subprocess.run(["curl", "-sSN", s.url + "/v1/completions", "-d",
                          stream], capture_output=True, text=True,
                         timeout=REQUEST_TIMEOUT)
    events = [line[6:] for line in out.stdout.splitlines()
              if line.startswith("data: ")]
    check(events and events[-1] == "[DONE]", f"curl stream: {out.stdout}")
    joined = "".join(json.loads(e)["choices"][0]["text"]
                     for e in events[:-1])
    check(joined == whole, f"curl: streamed {joined!r}, whole {whole!r}")
    print("curl: whole and streamed answers agree")


def check_timeout_and_shutdown(binary, model, threads):
    """A second server with --timeout 1: a long request gets 504; SIGTERM
    answers the one in flight and exits 0. The request's prompt is about
    7,000 tokens, seconds of prefill on any machine, so that it cannot
    end (an end-of-turn token, as a short prompt may meet) before the
    second is up."""
    s = Server(binary, model, ["--timeout", "1", "--ctx", "8192", *threads])
    s.model = model
    status, body = s.raw("POST", "/v1/completions",
                         {"model": model, "prompt": "the " * 7000,
                          "max_tokens": 1000})
    e = error_shape(status, body, 504, "a request past --timeout")
    check(e["code"] == "request_timeout", f"timeout code {e['code']}")
    rc = s.stop()
    check(rc == 0, f"pkv-server exited {rc} after SIGTERM: "
                   f"{''.join(s.log)}")
    print("--timeout: 504; SIGTERM: exit 0")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("gguf")
    ap.add_argument("--model", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--threads", type=int)
    a = ap.parse_args()
    threads = [] if a.threads is None else ["--threads", str(a.threads)]
    max_requests = 8
    s = Server(a.server, a.model,
               ["--max-requests", str(max_requests), "--max-body", "65536",
                "--ctx", "256", "--http-threads", "4", *threads])
    s.model = a.model
    models = s.client.models.list().data
    check([x.id for x in models] == [a.model], f"/v1/models {models}")
    status, body = s.raw("GET", "/health")
    check(status == 200 and body == {"status": "ok"}, f"/health {body}")
    chat = "chat template none" not in s.log[-1]
    check_greedy(s, a.gguf, a.model, chat, a.quick, threads)
    if not a.quick:
        check_concurrent(s, chat)
        check_stop(s)
        if chat:
            check_ignore_eos(s)
        check_bad_requests(s)
        check_disconnect_and_limit(s, max_requests)
        check_metrics(s)
        check_lookup(s, chat)
        check_curl(s)
    # A stream in flight at SIGTERM ends with the shutdown's error.
    sock = open_stream(s, 200)
    rc = s.stop()
    check(rc == 0, f"pkv-server exited {rc}: {''.join(s.log)}")
    rest = b""
    while got := sock.recv(4096):
        rest += got
    check(b'"shutting_down"' in rest and b"data: [DONE]" in rest,
          f"a stream at SIGTERM: {rest[-300:]!r}")
    if not a.quick:
        check_timeout_and_shutdown(a.server, a.model, threads)
    print(f"pkv-server {a.model}: ok")


if __name__ == "__main__":
    main()
