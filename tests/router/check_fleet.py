#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A real fleet (examples/router/fleet.sh): Redis, two pkv-servers
publishing their KV events and sharing the store, pkv-router in front.

    check_fleet.py FLEET_SH BUILD_DIR --model gemma3|smollm2

Checked:
- a request lands by load (nothing cached); its prompt's blocks reach
  the router's index from that server's events; then requests sharing
  the prompt's start go to that server, every one, with the prefix
  matched (sequential requests with nothing in flight: by load alone
  they would take the servers in turn), and the server's own prefix
  cache hits them;
- the servers' blocks are in the Redis store they share;
- Redis killed: requests are still answered (the store is only a
  cache); Redis restarted empty on its port: answered, and the servers
  fill it again;
- a restarted router rebuilds its index from the servers' replay
  sockets before any new request, and routes by it;
- a prompt with a new system prompt, served once: the other server's
  prefix lookup reports its blocks as store_tokens (cached_tokens 0),
  the server that ran it as cached; a router given the servers without
  their events asks those lookups and routes the prompt by them (no
  fallback);
- one server killed (SIGKILL) while requests, whole and streamed, are in
  flight: each request ends with an answer or an error, none is lost or
  hangs; the requests after go to the other server and are answered;
- the fleet stops every process it started on SIGTERM.
"""
import argparse
import concurrent.futures
import json
import os
import queue
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_router import Router, check, fail  # noqa: E402

TIMEOUT = 300
SYSTEM = ("You are a careful assistant for a library of paged KV caches. "
          "Answer in one short sentence, name the data structure involved, "
          "and say what it costs in memory and in time. ") * 3


def bindable(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def fleet_port():
    """A base port P for fleet.sh (the router on P, the servers on P+1 and
    P+2, Redis on P+100), all free now and below the kernel's ephemeral
    range, so that no outgoing connection (a client of a test running
    beside, under ctest -j) takes one while the fleet starts."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    while True:
        p = random.randrange(10000, ephemeral - 100)
        if all(bindable(q) for q in (p, p + 1, p + 2, p + 100)):
            return p


class Fleet:
    """fleet.sh's processes, from the lines it prints. Started again on
    other ports when one was taken meanwhile (another test's listener:
    the Redis tests take ports in the same range)."""

    def __init__(self, script, build, model):
        for _ in range(5):
            if self._start(script, build, model):
                return
        fail(f"fleet.sh: a port taken five times: {''.join(self.log)}")

    def _start(self, script, build, model):
        """True once the fleet is ready; False when fleet.sh ended because
        a port was in use."""
        self.port = fleet_port()
        self.proc = subprocess.Popen(
            ["sh", script, "--build", build, "--model", model, "--port",
             str(self.port), "--", "--backend", "cpu", "--threads", "1"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines = queue.Queue()
        self.log = []
        threading.Thread(target=self._read, daemon=True).start()
        self.servers = []
        deadline = time.time() + TIMEOUT
        while True:
            try:
                line = self.lines.get(timeout=max(0.1,
                                                  deadline - time.time()))
            except queue.Empty:
                self.proc.kill()
                fail(f"fleet not ready: {''.join(self.log)}")
            if line is None:
                rc = self.proc.wait()
                log = "".join(self.log)
                if re.search(r"in use|cannot listen", log):
                    print(f"fleet.sh: a port was taken ({self.port}): "
                          f"again on others")
                    return False
                fail(f"fleet.sh exited {rc}: {log}")
            m = re.match(r"fleet: server \d+ pid (\d+) (\S+)", line)
            if m:
                self.servers.append((int(m.group(1)), m.group(2)))
            m = re.match(r"fleet: router pid (\d+)", line)
            if m:
                self.router_pid = int(m.group(1))
            m = re.match(r"fleet: router command (.*)", line)
            if m:
                self.router_command = m.group(1).split()
            m = re.match(r"fleet: redis pid (\d+) (\S+)", line)
            if m:
                self.redis_pid = int(m.group(1))
                self.redis = m.group(2)
            if line.startswith("fleet: ready"):
                return True

    def _read(self):
        for line in self.proc.stdout:
            self.log.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            fail("fleet.sh did not end after SIGTERM")
        check(rc == 0, f"fleet.sh exited {rc}")
        for pid, _ in self.servers:
            check(not alive(pid), f"pkv-server {pid} outlived the fleet")


class Attached(Router):
    """The fleet's router, already running: Router's helpers on it."""

    def __init__(self, url, backends):
        self.port = int(url.rsplit(":", 1)[1])
        self.timeout = TIMEOUT
        self.client = openai.OpenAI(base_url=f"{url}/v1", api_key="none",
                                    timeout=TIMEOUT, max_retries=0)
        self.backends = backends


class Backend:
    """What Router.per_backend needs of a backend: its port."""

    def __init__(self, url):
        self.url = url
        self.port = int(url.rsplit(":", 1)[1])
        self.name = url


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def server_metric(url, name):
    with urllib.request.urlopen(f"{url}/metrics", timeout=TIMEOUT) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    fail(f"{url}/metrics has no {name}")


def requests_to(router, backends):
    return [router.per_backend("requests_total", b) for b in backends]


def ask(router, model, question, stream=False, max_tokens=4,
        system=SYSTEM):
    messages = [{"role": "system", "content": system},
                {"role": "user", "content": question}]
    if stream:
        parts = router.client.chat.completions.create(
            model=model, messages=messages, max_tokens=max_tokens,
            temperature=0, stream=True)
        return "".join(c.choices[0].delta.content or "" for c in parts
                       if c.choices)
    return router.client.chat.completions.create(
        model=model, messages=messages, max_tokens=max_tokens,
        temperature=0).choices[0].message.content


def routed_by_prefix(router, model, backends, urls):
    """The first request lands by load; the rest follow its blocks."""
    before = requests_to(router, backends)
    ask(router, model, "What is a block table?")
    after = requests_to(router, backends)
    first = [a - b for a, b in zip(after, before)].index(1)
    holder = backends[first]
    router.wait_for("the first answer's blocks in the index",
                    lambda: router.per_backend("index_blocks", holder) > 0)
    hits = server_metric(urls[first], "pkv_prefix_hit_tokens_total")
    matched = router.per_backend("prefix_matched_tokens_total", holder)
    for q in ("What is a prefix cache?", "What is eviction?",
              "What is a sliding window?", "What is a KV event?"):
        before = requests_to(router, backends)
        ask(router, model, q)
        after = requests_to(router, backends)
        check(after[first] == before[first] + 1,
              f"{q!r} went elsewhere than {holder.url}: {before} {after}")
    check(router.per_backend("prefix_matched_tokens_total", holder) >
          matched + 4 * 32, "the router matched the shared prefix")
    check(server_metric(urls[first], "pkv_prefix_hit_tokens_total") >
          hits + 4 * 32, f"{urls[first]}'s prefix cache was not hit")
    return first


def store_keys(redis):
    """The keys Redis holds; -1 when it does not answer."""
    host, port = redis.rsplit(":", 1)
    out = subprocess.run(["redis-cli", "-h", host, "-p", port, "dbsize"],
                         capture_output=True, text=True, timeout=60)
    try:
        return int(out.stdout.split()[-1])
    except (IndexError, ValueError):
        return -1


def lookup(url, body):
    """A server's prefix lookup of a chat body: its answer."""
    req = urllib.request.Request(
        f"{url}/pkv/lookup/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
        return json.loads(r.read())


def lookups(fleet, router, model, backends, urls):
    """The servers' lookups see the store they share; a router given the
    servers without their events routes by those lookups. On a system
    prompt of its own: a server saves only the blocks it computed, so
    after Redis restarted the store lacks SYSTEM's first blocks, which
    the first server found in its cache."""
    system = "You explain operating systems to students, in one line. " * 4
    before = requests_to(router, backends)
    check(ask(router, model, "What is a page fault?", system=system),
          "no answer")
    after = requests_to(router, backends)
    first = [a - b for a, b in zip(after, before)].index(1)
    body = {"model": model, "max_tokens": 4,
            "messages": [{"role": "system", "content": system},
                         {"role": "user", "content": "What is a lookup?"}]}
    held = lookup(urls[first], body)
    check(held["cached_tokens"] >= 32,
          f"the server that ran the prompt: {held}")
    # The other server ran nothing of it: what it could load is the
    # store's (saves may still be on their way).
    deadline = time.time() + TIMEOUT
    while True:
        other = lookup(urls[1 - first], body)
        check(other["cached_tokens"] == 0,
              f"the server that ran nothing: {other}")
        if other["store_tokens"] is not None and \
                other["store_tokens"] >= 32:
            break
        check(time.time() < deadline,
              f"the store never held the prompt's blocks: {other}")
        time.sleep(0.2)
    args = [fleet.router_command[0], "--model", model, "--port", "0"]
    for u in urls:
        args += ["--backend", u]
    bare = Router(None, backends, args=args, timeout=TIMEOUT)
    try:
        before = bare.metrics()
        check(ask(bare, model, "What is a lookup?", system=system),
              "no answer")
        after = bare.metrics()
        got = {k: after[k] - before[k] for k in (
            "pkv_router_lookups_total",
            "pkv_router_lookup_matched_tokens_total",
            "pkv_router_fallbacks_total")}
        check(got["pkv_router_lookups_total"] == 1 and
              got["pkv_router_lookup_matched_tokens_total"] >= 32 and
              got["pkv_router_fallbacks_total"] == 0,
              f"a router without events: {got}")
    finally:
        bare.stop()
    return other["store_tokens"]


def redis_restart(fleet, router, model):
    """Requests answered with Redis gone, then with a new, empty one."""
    os.kill(fleet.redis_pid, signal.SIGKILL)
    for q in ("What is a store?", "What is a miss?"):
        check(ask(router, model, q), f"{q!r} unanswered without Redis")
    host, port = fleet.redis.rsplit(":", 1)
    redis = subprocess.Popen(
        ["redis-server", "--port", port, "--bind", host, "--save", "",
         "--appendonly", "no"], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    deadline = time.time() + TIMEOUT
    while store_keys(fleet.redis) != 0 and time.time() < deadline:
        time.sleep(0.2)
    n = 0
    while n == 0 and time.time() < deadline:
        check(ask(router, model, f"What is a reconnection? ({time.time()})"),
              "unanswered after Redis restarted")
        n = store_keys(fleet.redis)
    check(n > 0, "the servers did not fill the restarted Redis")
    return redis


def restart_router(fleet, model, backends, first):
    os.kill(fleet.router_pid, signal.SIGTERM)
    for _ in range(600):
        if not alive(fleet.router_pid):
            break
        time.sleep(0.1)
    check(not alive(fleet.router_pid), "the router did not end")
    # Real servers, the model computing: the fleet's timeout, not the
    # synthetic backends' (a sanitizer build on a busy machine).
    router = Router(None, backends, args=fleet.router_command,
                    timeout=TIMEOUT)
    holder = backends[first]
    # Both: the router applies the replay's messages to the index as they
    # come and publishes its counts once the replay has ended.
    router.wait_for("the index rebuilt from the replay",
                    lambda: router.per_backend("index_blocks", holder) > 0
                    and router.per_backend("event_replayed_total",
                                           holder) > 0)
    before = requests_to(router, backends)
    ask(router, model, "What is a replay?")
    after = requests_to(router, backends)
    check(after[first] == before[first] + 1,
          f"after the restart the prompt went elsewhere: {before} {after}")
    return router


def kill_one(fleet, router, model, backends, first):
    """SIGKILL the server holding the prefix with requests in flight."""
    def one(i):
        try:
            text = ask(router, model, f"Question {i}: what is paging?",
                       stream=i % 2 == 1, max_tokens=48)
            return ("answer", text)
        except (openai.APIError, openai.APIConnectionError) as e:
            return ("error", type(e).__name__)

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(one, i) for i in range(6)]
        time.sleep(1.0)
        os.kill(fleet.servers[first][0], signal.SIGKILL)
        results = [f.result(timeout=TIMEOUT) for f in futures]
    for kind, detail in results:
        check(kind == "error" or detail,
              f"an empty answer with no error: {results}")
    other = 1 - first
    before = requests_to(router, backends)
    for q in ("What is a page?", "What is a pool?"):
        check(ask(router, model, q) is not None, f"{q!r}: no answer")
    after = requests_to(router, backends)
    check(after[other] == before[other] + 2,
          f"the requests after the kill: {before} {after}")
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fleet")
    ap.add_argument("build")
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    fleet = Fleet(args.fleet, args.build, args.model)
    router = redis = None
    try:
        urls = [url for _, url in fleet.servers]
        backends = [Backend(u) for u in urls]
        check(len(backends) == 2, f"{len(backends)} servers, 2 expected")
        router = Attached(f"http://127.0.0.1:{fleet.port}", backends)
        first = routed_by_prefix(router, args.model, backends, urls)
        print(f"fleet {args.model}: routed by the events to "
              f"{urls[first]}: ok")
        check(store_keys(fleet.redis) > 0, "the Redis store holds nothing")
        print(f"fleet {args.model}: blocks in the shared store: ok")
        redis = redis_restart(fleet, router, args.model)
        print(f"fleet {args.model}: Redis killed and restarted, every "
              f"request answered, the store filled again: ok")
        router = restart_router(fleet, args.model, backends, first)
        print(f"fleet {args.model}: restarted router rebuilt from the "
              f"replay: ok")
        # After the checks of where the fleet's router sends the prompt:
        # this router's request may make the other server hold it too.
        stored = lookups(fleet, router, args.model, backends, urls)
        print(f"fleet {args.model}: the other server's lookup finds "
              f"{stored} tokens in the store; a router without events "
              f"routes by the lookups: ok")
        results = kill_one(fleet, router, args.model, backends, first)
        print(f"fleet {args.model}: server killed mid-flight: "
              f"{sum(k == 'answer' for k, _ in results)} answers, "
              f"{sum(k == 'error' for k, _ in results)} errors, none "
              f"lost: ok")
    finally:
        if isinstance(router, Router) and not isinstance(router, Attached):
            router.stop()
        if redis is not None:
            redis.terminate()
            redis.wait(timeout=60)
        fleet.stop()
    print(f"fleet {args.model}: all checks passed")


if __name__ == "__main__":
    main()
