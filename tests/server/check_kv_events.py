#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""pkv-server's KV events (--kv-events), read as a vLLM KV-events
consumer reads them: PyPI's pyzmq subscribes, msgspec decodes each
message against structures written from vLLM's documented schema
(vllm/distributed/kv_events.py: KVEventBatch, BlockStored, BlockRemoved,
AllBlocksCleared; msgpack, array-like tagged structs; frames topic,
8-byte big-endian sequence number, payload).

    check_kv_events.py PKV_SERVER --model gemma3|smollm2

A server with a small KV cache (70 blocks over every layer; eight
prompts of about 13 blocks each, twice; a 1,024-token context, past
Gemma 3's 512-token window, so that its sliding-window layers make
groups of their own) answers prompts that share a prefix and prompts that
evict each other; one thread computes (the test is about the events,
and a busy machine makes two threads' barriers spin). Checked: every message decodes, sequence
numbers run 0, 1, ... without a gap; every block is announced stored
once before it is announced removed (per group), a group-0 block's parent
was announced before it, blocks carry block_size token ids; blocks were
both stored and removed; a consumer with the older schema (BlockStored up
to medium, no group fields) decodes the same messages. Then the replay
socket (--kv-events-replay): asked from a sequence number on, it sends
those messages again, byte for byte, then the end marker (-1).
"""
import argparse
import collections
import os
import socket
import sys
import time

import msgspec
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_server import Server, check  # noqa: E402


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True,
                 gc=False):
    ts: float
    events: list
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, array_like=True, omit_defaults=True,
                   gc=False, tag=True):
    pass


class BlockStored(KVCacheEvent):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None = None
    extra_keys: list | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[int]
    medium: str | None
    group_idx: int | None = None


class AllBlocksCleared(KVCacheEvent):
    pass


class KVEventBatch(EventBatch):
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]


# The schema of vLLM's example subscriber before groups were added.
class OldStored(msgspec.Struct, array_like=True, omit_defaults=True,
                gc=False, tag="BlockStored"):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None


class OldRemoved(msgspec.Struct, array_like=True, omit_defaults=True,
                 gc=False, tag="BlockRemoved"):
    block_hashes: list[int]
    medium: str | None


class OldCleared(msgspec.Struct, array_like=True, omit_defaults=True,
                 gc=False, tag="AllBlocksCleared"):
    pass


class OldBatch(msgspec.Struct, array_like=True, omit_defaults=True,
               gc=False):
    ts: float
    events: list[OldStored | OldRemoved | OldCleared]


def prompt(topic, n):
    """About n words on topic, the same start for the same topic."""
    words = (f"{topic} is a subject worth a long and careful answer that "
             "covers history, practice and open questions").split()
    return " ".join(words[i % len(words)] for i in range(n))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_replay(s, dealer, frames, model):
    """Messages from a sequence number on, sent again by the replay
    socket (its own thread answers at once; the request sent meanwhile
    publishes batches that the answer may include or not)."""
    start = max(1, len(frames) - 1000)
    dealer.send_multipart([b"", start.to_bytes(8, "big")])
    status, body = s.raw("POST", "/v1/completions",
                         {"model": model, "prompt": prompt("Replays", 60),
                          "max_tokens": 2, "temperature": 0})
    check(status == 200, f"completion answered {status}: {body}")
    want = start
    while True:
        check(dealer.poll(60000), "no replay answer")
        f = dealer.recv_multipart()
        check(len(f) == 3 and f[0] == b"", f"replay frames {len(f)}")
        seq = int.from_bytes(f[1], "big", signed=True)
        if seq == -1:
            check(f[2] == b"", "end marker with a payload")
            break
        check(seq == want, f"replayed {seq}, {want} expected")
        if seq < len(frames):
            check(f[2] == frames[seq][2], f"replayed {seq} differs")
        want += 1
    check(want >= len(frames), f"replay ended at {want} of {len(frames)}")
    return want - start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    ctx = zmq.Context()
    # The server binds (an endpoint with '*', as vLLM's publisher does)
    # and the subscriber connects, as a router does. (A SUB that binds
    # with the PUB connecting received nothing with libzmq 4.3.4/4.3.5.)
    port = free_port()
    replay = f"tcp://127.0.0.1:{free_port()}"
    s = Server(args.server, args.model,
               ["--kv-events", f"tcp://*:{port}", "--kv-events-replay",
                replay, "--kv-tokens", "1100", "--ctx", "1024", "--threads",
                "1"])
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(f"tcp://127.0.0.1:{port}")
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(replay)
    time.sleep(1.0)  # the PUB side connects (ZeroMQ's slow joiner)
    topics = ["Astronomy", "Baking bread", "Chess openings", "Deep sea life",
              "Early printing", "Folk music", "Glaciers", "Honey bees"]
    for rounds in range(2):
        for t in topics:
            status, body = s.raw("POST", "/v1/completions",
                                 {"model": args.model,
                                  "prompt": prompt(t, 200),
                                  "max_tokens": 4, "temperature": 0})
            check(status == 200, f"completion answered {status}: {body}")
    frames = []
    while sub.poll(2000):
        frames.append(sub.recv_multipart())
    replayed = check_replay(s, dealer, frames, args.model)
    check(s.stop() == 0, "pkv-server did not end cleanly")
    check(frames, "no KV events arrived")
    batch_decoder = msgspec.msgpack.Decoder(KVEventBatch)
    old_decoder = msgspec.msgpack.Decoder(OldBatch)
    held = collections.Counter()   # (group, hash) -> blocks holding it
    ever = collections.defaultdict(set)  # group -> hashes ever stored
    stored = removed = 0
    kinds = set()
    for want_seq, f in enumerate(frames):
        check(len(f) == 3, f"message {want_seq}: {len(f)} frames, not 3")
        topic, seq, payload = f
        check(topic == b"", f"topic {topic!r}")
        check(int.from_bytes(seq, "big") == want_seq,
              f"sequence {int.from_bytes(seq, 'big')}, {want_seq} expected")
        batch = batch_decoder.decode(payload)
        old = old_decoder.decode(payload)
        check(len(old.events) == len(batch.events), "older schema differs")
        check(batch.data_parallel_rank == 0, "data_parallel_rank")
        check(batch.ts > 1e9, f"ts {batch.ts}")
        for e in batch.events:
            if isinstance(e, AllBlocksCleared):
                held.clear()
                continue
            check(len(e.block_hashes) == 1, "one block per event")
            check(e.medium == "CPU", f"medium {e.medium}")
            key = (e.group_idx, e.block_hashes[0])
            if isinstance(e, BlockRemoved):
                check(held[key] > 0, f"removed before stored: {key}")
                held[key] -= 1
                removed += 1
                continue
            check(e.block_size == 16 and len(e.token_ids) == 16,
                  f"block of {len(e.token_ids)} tokens, size {e.block_size}")
            check(e.lora_id is None and e.lora_name is None, "no LoRA")
            window = e.kv_cache_spec_sliding_window
            check((e.kv_cache_spec_kind, window is None) in
                  (("full_attention", True), ("sliding_window", False)),
                  f"kind {e.kv_cache_spec_kind}, window {window}")
            kinds.add(e.kv_cache_spec_kind)
            if e.group_idx == 0 and e.parent_block_hash is not None:
                check(e.parent_block_hash in ever[0],
                      f"parent {e.parent_block_hash} never stored")
            held[key] += 1
            ever[e.group_idx].add(e.block_hashes[0])
            stored += 1
    check(stored > 0 and removed > 0,
          f"{stored} stored, {removed} removed: both expected")
    if args.model == "gemma3":
        check(kinds == {"full_attention", "sliding_window"},
              f"kinds {kinds}: Gemma 3 has both")
    print(f"pkv-server {args.model} KV events: {len(frames)} messages, "
          f"{stored} blocks stored, {removed} removed, "
          f"{sum(held.values())} held at the end, {replayed} replayed")


if __name__ == "__main__":
    main()
