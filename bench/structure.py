#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Three counts of how the engine's code is coupled, read from the source:

    python3 bench/structure.py [--src DIR] [--json FILE]

- functions: the function definitions in src/ that take the whole engine
  (a parameter of type pkv_engine *, const or not), by file; the public
  API's entry points (pkv_*) among them;
- seq fields: the members of struct pkv__seq (src/seq.h), a nested struct
  counting as one;
- group branches: the places outside src/kv/ that compare a count of
  hybrid memory's groups of layers with one (num_groups == 1, != 1, > 1,
  <= 1), i.e. code that treats one group apart; and beside them the
  places outside src/kv/ that ask whether the layers are in the plain
  layout (pkv__groups_plain: one group of every layer), which the file
  formats and the store's names keep for what they persist.
"""
import argparse
import collections
import json
import os
import re


def strip(text):
    """C source without comments and string or character literals."""
    def blank(m):  # keep the line breaks: line numbers stay right
        return "\n" * m.group(0).count("\n") if m.group(0)[0] == "/" else '""'
    return re.sub(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'',
                  blank, text, flags=re.S)


def sources(src, ext=(".c", ".h")):
    top = os.path.join(src, "src")
    for d, _, files in sorted(os.walk(top)):
        for f in sorted(files):
            if f.endswith(ext):
                path = os.path.join(d, f)
                yield os.path.relpath(path, src), path


def definitions(text):
    """(name, parameters) of each function defined at file scope."""
    out, depth, i = [], 0, 0
    pattern = re.compile(r'([A-Za-z_]\w*)\s*\(([^;{}()]*(?:\([^()]*\)[^;{}()]*)*)\)\s*\{')
    while i < len(text):
        c = text[i]
        if c == "{":
            if depth == 0:
                head = text[max(0, text.rfind(";", 0, i), text.rfind("}", 0, i)):i + 1]
                m = pattern.search(head)
                if m and m.group(1) not in ("if", "for", "while", "switch"):
                    out.append((m.group(1), m.group(2)))
            depth += 1
        elif c == "}":
            depth -= 1
        i += 1
    return out


def engine_functions(src):
    by_file = collections.Counter()
    public = 0
    for rel, path in sources(src, (".c",)):
        with open(path, encoding="utf-8") as fh:
            text = strip(fh.read())
        for name, params in definitions(text):
            if re.search(r'\bpkv_engine\s*\*', params):
                by_file[rel] += 1
                public += bool(re.match(r'pkv_[a-z]', name))
    return sum(by_file.values()), public, dict(by_file.most_common())


def seq_fields(src):
    with open(os.path.join(src, "src", "seq.h"), encoding="utf-8") as fh:
        text = strip(fh.read())
    m = re.search(r'typedef struct pkv__seq\s*\{', text)
    depth, i, body = 1, m.end(), []
    while depth:
        c = text[i]
        depth += c == "{"
        depth -= c == "}"
        if depth:
            body.append(c)
        i += 1
    body = "".join(body)
    # Nested bodies count as one member: drop them.
    while re.search(r'\{[^{}]*\}', body):
        body = re.sub(r'\{[^{}]*\}', "", body)
    n = 0
    for decl in body.split(";"):
        decl = decl.strip()
        if decl:
            n += 1 + decl.count(",")
    return n


GROUP_BRANCH = (r'\b(?:num_groups|\w*groups\w*\s*\([^()]*\))\s*'
                r'(?:==|!=|>|<=)\s*1\b|\bgroups\s*(?:==|!=|>|<=)\s*1\b')


def group_branches(src, pattern=GROUP_BRANCH):
    pat = re.compile(pattern)
    hits = []
    for rel, path in sources(src):
        if rel.startswith(os.path.join("src", "kv") + os.sep):
            continue
        with open(path, encoding="utf-8") as fh:
            for no, line in enumerate(strip(fh.read()).splitlines(), 1):
                if pat.search(line):
                    hits.append("%s:%d" % (rel, no))
    return hits


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", default=os.path.dirname(
        os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--json")
    a = ap.parse_args()
    total, public, by_file = engine_functions(a.src)
    fields = seq_fields(a.src)
    branches = group_branches(a.src)
    plain = group_branches(a.src, r'\bpkv__groups_plain\s*\(')
    print("functions taking pkv_engine *: %d (%d of them pkv_* entry "
          "points) in %d files" % (total, public, len(by_file)))
    print("  " + ", ".join("%s %d" % kv for kv in by_file.items()))
    print("fields of struct pkv__seq: %d" % fields)
    print("group-count branches outside src/kv/: %d in %d files" %
          (len(branches), len({b.split(":")[0] for b in branches})))
    for b in branches:
        print("  " + b)
    print("plain-layout questions outside src/kv/ (persisted formats): %d "
          "in %d files" % (len(plain), len({b.split(":")[0] for b in plain})))
    for b in plain:
        print("  " + b)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"engine_functions": total, "public": public,
                       "by_file": by_file, "seq_fields": fields,
                       "group_branches": branches,
                       "plain_layout": plain}, fh, indent=1)


if __name__ == "__main__":
    main()
