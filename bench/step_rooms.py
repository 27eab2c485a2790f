#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A step followed as data: which files ("rooms") pkv_engine_step_begin
and pkv_engine_step_end pass through, how often a step moves from one to
another, climbs back to a higher floor, or comes back to a room it left.

    python3 bench/step_rooms.py [--src DIR] [--build DIR] [--json FILE]

It builds the library from DIR (default: this tree) with GCC's
-finstrument-functions into a scratch build directory (the CPU backend
only), runs bench/step_rooms.c, which records every function the
library enters and leaves during one step of a fixed workload (hybrid
memory's groups, 23 sequences decoding, one admitted with a prefix hit),
and maps each function to its file with addr2line.

A room is a module: a source file and its header (src/seq.c and
src/seq.h are the room "seq"). A room's floor is its height in the
include graph of src/: 0 for a module that includes no other, else one
above the highest it includes. The dynamic calls seen become a call graph,
which is walked depth first from the traced entry point, each function
once, callees in the order they were first called: a move is a step of
that walk from one room to another (down into a callee, or back up to
its caller), an upward move one to a higher floor, a return one into a
room the walk left before. The workload's loops (many sequences) do not
inflate the figures: each function counts once.
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit("step_rooms: %s failed:\n%s%s" % (" ".join(cmd), r.stdout,
                                                   r.stderr))
    return r.stdout


def build(src, out):
    run(["cmake", "-S", src, "-B", out, "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
         "-DPKV_WITH_OPENCL=OFF", "-DPKV_WITH_REDIS=OFF",
         "-DPKV_BUILD_TESTS=OFF", "-DPKV_BUILD_BENCH=OFF",
         "-DPKV_BUILD_EXAMPLES=OFF",
         "-DCMAKE_C_FLAGS=-finstrument-functions"])
    run(["cmake", "--build", out, "-j2", "--target", "pkv_static"])
    exe = os.path.join(out, "step_rooms")
    run(["cc", "-std=c11", "-O1", "-g", "-no-pie",
         "-I", os.path.join(src, "include"),
         os.path.join(HERE, "step_rooms.c"),
         os.path.join(out, "libpkv.a"), "-lcrypto", "-lxxhash", "-lm",
         "-lpthread", "-o", exe])
    return exe


def room_of(path, src):
    """src/kv/pool.c -> kv/pool; None outside src/."""
    srcdir = os.path.join(os.path.realpath(src), "src") + os.sep
    path = os.path.realpath(path)
    if not path.startswith(srcdir):
        return None
    return os.path.splitext(path[len(srcdir):])[0]


def floors(src):
    """Each room's floor in the include graph of src/."""
    top = os.path.join(src, "src")
    deps = collections.defaultdict(set)
    rooms = set()
    for d, _, files in os.walk(top):
        for f in files:
            if not f.endswith((".c", ".h")):
                continue
            path = os.path.join(d, f)
            room = room_of(path, src)
            rooms.add(room)
            with open(path, encoding="utf-8") as fh:
                for m in re.finditer(r'^#include "([^"]+)"', fh.read(), re.M):
                    inc = m.group(1)
                    for base in (d, top):
                        cand = os.path.join(base, inc)
                        if os.path.exists(cand):
                            dep = room_of(cand, src)
                            if dep != room:
                                deps[room].add(dep)
                            break
    memo = {}

    def floor(r, seen=()):
        if r in memo:
            return memo[r]
        if r in seen:  # a circle: tests/check_layout.py forbids them
            return 0
        f = 1 + max((floor(x, seen + (r,)) for x in deps[r]), default=-1)
        memo[r] = f
        return f

    return {r: floor(r) for r in rooms}


def parse(trace):
    """{entry name: [(kind, address)]} from the driver's trace."""
    calls, cur = {}, None
    with open(trace) as fh:
        for line in fh:
            kind, arg = line.split()
            if kind == "=":
                cur = calls.setdefault(arg, [])
            else:
                cur.append((kind, int(arg, 16)))
    return calls


def symbolize(exe, addresses, src):
    addrs = sorted(addresses)
    out = run(["addr2line", "-f", "-e", exe] + ["%#x" % a for a in addrs])
    lines = out.splitlines()
    names = {}
    for i, a in enumerate(addrs):
        fn, loc = lines[2 * i], lines[2 * i + 1]
        names[a] = (fn, room_of(loc.split(":")[0], src))
    return names


def walk(events, names, floor):
    """The depth-first walk of the call graph the events show."""
    children = collections.defaultdict(list)
    stack = []
    root = None
    for kind, a in events:
        if kind == ">":
            if stack:
                if a not in children[stack[-1]]:
                    children[stack[-1]].append(a)
            elif root is None:
                root = a
            stack.append(a)
        elif stack:
            stack.pop()
    seq = []
    seen = set()

    def visit(fn):
        seen.add(fn)
        seq.append(names[fn][1])
        for c in children[fn]:
            if c not in seen:
                visit(c)
                seq.append(names[fn][1])

    visit(root)
    rooms = [r for r in seq if r is not None]
    path = [r for i, r in enumerate(rooms) if i == 0 or r != rooms[i - 1]]
    moves = len(path) - 1
    up = sum(1 for i in range(1, len(path))
             if floor.get(path[i], 0) > floor.get(path[i - 1], 0))
    back = sum(1 for i in range(1, len(path)) if path[i] in path[:i - 1])
    visits = collections.Counter(path)
    return {"functions": len(seen), "rooms": len(set(path)), "moves": moves,
            "upward": up, "returns": back,
            "visits": dict(visits.most_common()),
            "floors": {r: floor.get(r, 0) for r in sorted(set(path))}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", default=os.path.dirname(HERE))
    ap.add_argument("--build", help="build directory (default: a scratch one)")
    ap.add_argument("--json", help="write the figures here as JSON")
    a = ap.parse_args()
    src = os.path.abspath(a.src)
    with tempfile.TemporaryDirectory() as tmp:
        out = a.build or os.path.join(tmp, "build")
        exe = build(src, out)
        trace = os.path.join(tmp, "trace")
        r = subprocess.run([exe, trace], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("step_rooms: the driver failed:\n" + r.stderr)
        sys.stderr.write(r.stderr)
        calls = parse(trace)
        names = symbolize(exe, {x for ev in calls.values() for _, x in ev},
                          src)
    floor = floors(src)
    result = {name: walk(ev, names, floor) for name, ev in calls.items()}
    for name, f in result.items():
        print("%s: %d functions in %d rooms, %d moves, %d of them upward, "
              "%d back into a room left before" %
              (name, f["functions"], f["rooms"], f["moves"], f["upward"],
               f["returns"]))
        print("  visits: " + ", ".join("%s %d" % kv
                                       for kv in f["visits"].items()))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
