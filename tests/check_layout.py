#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The source layout's rules (docs/design.md, "Source tree"):
- no call circle among the files of any library the project builds (libpkv's
  objects, libpkv_redis, the example and bench libraries): from each
  library's object files' defined and undefined symbols (nm), a file-level
  graph with no cycle;
- no include circle among src/ files;
- only src/opencl/ includes an OpenCL header;
- every src/ file opens with its licence line, then a comment on its job;
- the engine layer: only the engine's call files (ENGINE_LAYER) include
  engine.h, no header does (a module takes the part of the engine it works
  on), and no other file calls a function they define (no arrow climbs
  back up to the engine).
Usage: check_layout.py PROJECT_DIR LIBRARIES_FILE
LIBRARIES_FILE (cmake/layout.cmake writes it) has a line per library:
"name|source directory|object;object;..."."""
import collections
import os
import re
import subprocess
import sys

root, libraries_file = sys.argv[1], sys.argv[2]
src = os.path.join(root, 'src')
failures = []

# The files that hold the engine's insides: pkv_engine_* / pkv_seq_*
# entry points, the scheduler and its plan, the sequence lifecycle, the
# invariants, state transfer and the store's engine side.
ENGINE_LAYER = {
    'check.c', 'engine.c', 'engine_attend.c', 'engine_error.c',
    'engine_opencl.c', 'engine_seq.c', 'engine_step.c', 'seqs.c',
    'step_actions.c',
    'plan_apply.c', 'prefix_file.c', 'planner.c', 'seq_export.c',
    'store/engine_store.c',
}


def cycles(graph):
    """Every strongly connected component of more than one node."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def source_of(obj, source_dir):
    """The source file an object was compiled from, relative to the project
    (CMake writes <source>.o under <target>.dir/, "../" spelt "__/")."""
    rel = re.sub(r'^.*/CMakeFiles/[^/]+\.dir/', '', obj)
    rel = re.sub(r'\.o(bj)?$', '', rel).replace('__/', '../')
    path = os.path.normpath(os.path.join(source_dir, rel))
    return os.path.relpath(path, root)


def call_graph(objects, source_dir):
    """File -> the files of the same library whose functions or data it
    uses."""
    defined, used = {}, collections.defaultdict(set)
    for o in objects:
        name = source_of(o, source_dir)
        for line in subprocess.run(['nm', o], capture_output=True,
                                   text=True, check=True).stdout.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in 'TDBRC':
                defined[parts[2]] = name
            elif len(parts) == 2 and parts[0] == 'U':
                used[name].add(parts[1])
    graph = collections.defaultdict(set)
    for o in objects:
        f = source_of(o, source_dir)
        graph[f] |= {defined[s] for s in used[f] if defined.get(s, f) != f}
    return graph


calls = collections.defaultdict(set)
libraries = []
for line in open(libraries_file).read().splitlines():
    name, source_dir, objs = line.split('|', 2)
    objects = [o for o in objs.split(';') if o]
    if not objects:
        continue  # built from another library's objects
    missing = [o for o in objects if not os.path.exists(o)]
    if missing:
        sys.exit('check_layout: %s: %s not built' % (name, missing[0]))
    graph = call_graph(objects, source_dir)
    for c in cycles(graph):
        failures.append('%s: call circle: %s' % (name, ' '.join(c)))
    for f, g in graph.items():
        calls[f] |= g
    libraries.append('%s (%d files)' % (name, len(objects)))
if not any(lib.startswith('pkv_objects ') for lib in libraries):
    sys.exit('check_layout: no pkv_objects in ' + libraries_file)


def in_src(f):
    """A source file relative to src/, or None outside src/."""
    return f[len('src/'):] if f.startswith('src/') else None


for f in sorted(calls):
    if in_src(f) in ENGINE_LAYER:
        continue
    for g in sorted(calls[f]):
        if in_src(g) in ENGINE_LAYER:
            failures.append('%s calls up into the engine layer (%s)' %
                            (f, g))

includes = collections.defaultdict(set)
files = [os.path.join(d, f) for d, _, fs in os.walk(src) for f in fs
         if f.endswith(('.c', '.h'))]
for f in files:
    text = open(f).read()
    rel = os.path.relpath(f, src)
    lines = text.split('\n')
    if not (lines[0].startswith('/* SPDX-License-Identifier') and
            lines[1].startswith('/*')):
        failures.append(rel + ': does not open with its licence line and '
                        'a comment on its job')
    if re.search(r'^#include <CL/', text, re.M) and \
            not rel.startswith('opencl' + os.sep):
        failures.append(rel + ': includes an OpenCL header outside '
                        'src/opencl/')
    for m in re.finditer(r'^#include "([^"]+)"', text, re.M):
        for base in (os.path.dirname(f), src):
            target = os.path.normpath(os.path.join(base, m.group(1)))
            if os.path.exists(target):
                includes[rel].add(os.path.relpath(target, src))
                break
for c in cycles(includes):
    failures.append('include circle: ' + ' '.join(c))
for f in sorted(includes):
    if 'engine.h' in includes[f] and (f.endswith('.h') or
                                      f not in ENGINE_LAYER):
        failures.append(f + ': includes engine.h outside the engine layer')

for f in failures:
    print('FAIL:', f)
print('layout: call graphs of %s; %d source files under src/; %d failures'
      % (', '.join(libraries), len(files), len(failures)))
sys.exit(1 if failures else 0)
