#!/usr/bin/env python3
"""calls_check: each layer's files call one way (docs/design.md, "Layers").

Inside a layer directory a file calls only files below it, so the layer
reads top-down and no two files are tied into a circle. This builds, per
layer, the file -> file call graph from the objects of the static library:
a symbol undefined (U) in a.o and defined as a function (T, W) in b.o of
the same layer is an edge a -> b. A strongly connected set of more than one
file is a call circle: it is printed with one cycle through it, and the
check fails.

    calls_check.py [--layer NAME]... [--known DIR]... ARCHIVE
    calls_check.py --objects NAME=FILE.o,FILE.o,...

ARCHIVE is the build's libtern.a; its members are named after their
sources (pool_bounded.c.o is pool/bounded.c). --layer picks the layers to
check (backends, pool, runtime; runtime's folders count as part of runtime);
without it every layer is checked. --objects checks a list of object files
as one layer (the planted-cycle self test). --known DIR lists a circle
whose files all sit under DIR (runtime/net/) as known instead of failing,
so a layer can be held to the rule while one of its subdirectories is
not yet; a circle that reaches one file outside DIR still fails. Prints
each layer's graph and closes with "N passed, N failed" (one check per
layer).
"""

import argparse
import subprocess
import sys

# Member-name prefix -> (layer, source directory); longest prefix first.
PREFIXES = [
    ("runtime_" + d + "_", "runtime", "runtime/" + d + "/")
    for d in ("core", "kinds", "jobs", "fs", "net", "process", "loop", "group")
] + [
    ("runtime_", "runtime", "runtime/"),
    ("pool_", "pool", "pool/"),
    ("backends_", "backends", "backends/"),
]
LAYERS = ["backends", "pool", "runtime"]
FUNCTION_TYPES = set("TWi")


def nm_lines(paths):
    out = subprocess.run(["nm", "-A", "-P"] + paths, check=True, capture_output=True, text=True)
    return out.stdout.splitlines()


def symbols(paths):
    """{member: (defined functions, undefined names)} from nm -A -P."""
    table = {}
    for line in nm_lines(paths):
        # "libtern.a[pool_pool.c.o]: name T value size" or "a.o: name U"
        where, _, rest = line.partition(": ")
        fields = rest.split()
        if len(fields) < 2:
            continue
        member = where[where.find("[") + 1 : -1] if where.endswith("]") else where
        defined, used = table.setdefault(member, (set(), set()))
        name, kind = fields[0], fields[1]
        if kind == "U":
            used.add(name)
        elif kind in FUNCTION_TYPES:
            defined.add(name)
    return table


def source_of(member):
    """(layer, source path) of an archive member, or (None, None)."""
    base = member.rsplit("/", 1)[-1]
    if base.endswith(".o"):
        base = base[:-2]
    for prefix, layer, directory in PREFIXES:
        if base.startswith(prefix):
            return layer, directory + base[len(prefix) :]
    return None, None


def graph_of(files):
    """files: {name: (defined, used)} -> {name: {callee: [symbols]}}."""
    owner = {}
    for name, (defined, _) in files.items():
        for sym in defined:
            owner.setdefault(sym, name)
    edges = {name: {} for name in files}
    for name, (_, used) in files.items():
        for sym in sorted(used):
            callee = owner.get(sym)
            if callee is not None and callee != name:
                edges[name].setdefault(callee, []).append(sym)
    return edges


def circles(edges):
    """Strongly connected sets of more than one node (Tarjan)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                found.append(sorted(scc))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def one_cycle(edges, scc):
    """A path start -> ... -> start inside scc (breadth-first, shortest)."""
    members = set(scc)
    start = scc[0]
    parent = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(edges[v]):
            if w not in members:
                continue
            if w == start:
                path = [v]
                while parent[path[-1]] is not None:
                    path.append(parent[path[-1]])
                return list(reversed(path)) + [start]
            if w not in parent:
                parent[w] = v
                queue.append(w)
    return scc + [start]


def order(edges):
    """Files top-down (callers before callees), for a circle-free graph."""
    done, out = set(), []

    def visit(v):
        if v in done:
            return
        done.add(v)
        for w in sorted(edges[v]):
            visit(w)
        out.append(v)

    for v in sorted(edges):
        visit(v)
    return list(reversed(out))


def check(layer, files, known=()):
    edges = graph_of(files)
    found, listed = [], []
    for scc in circles(edges):
        if known and all(any(f.startswith(k) for k in known) for f in scc):
            listed.append(scc)
        else:
            found.append(scc)
    print(f"{layer}/: {len(files)} files, {sum(len(e) for e in edges.values())} call edges")
    for scc in listed:
        print(f"known: {layer}/ has a call circle of {len(scc)} files: {', '.join(scc)}")
    for v in sorted(edges):
        for w in sorted(edges[v]):
            print(f"  {v} -> {w} ({', '.join(edges[v][w][:3])}"
                  f"{', ...' if len(edges[v][w]) > 3 else ''})")
    if not found:
        if len(circles(edges)) == 0:
            print(f"  top-down: {' > '.join(order(edges))}")
        return True
    for scc in found:
        cycle = one_cycle(edges, scc)
        steps = []
        for a, b in zip(cycle, cycle[1:]):
            steps.append(f"{a} -({edges[a][b][0]})-> ")
        print(f"FAIL: {layer}/ has a call circle of {len(scc)} files: {', '.join(scc)}")
        print(f"  cycle: {''.join(steps)}{cycle[-1]}")
    return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layer", action="append", choices=LAYERS)
    ap.add_argument("--objects", help="NAME=a.o,b.o,... checked as one layer")
    ap.add_argument("--known", action="append", default=[],
                    help="a directory whose own circles are listed, not failed")
    ap.add_argument("archive", nargs="?")
    args = ap.parse_args()

    groups = {}
    if args.objects:
        name, _, paths = args.objects.partition("=")
        table = symbols(paths.split(","))
        groups[name] = {member.rsplit("/", 1)[-1]: syms for member, syms in table.items()}
    elif args.archive:
        wanted = args.layer or LAYERS
        for member, syms in symbols([args.archive]).items():
            layer, source = source_of(member)
            if layer in wanted:
                groups.setdefault(layer, {})[source] = syms
        for layer in wanted:
            if layer not in groups:
                print(f"FAIL: no {layer}/ objects in {args.archive}")
                groups[layer] = None
    else:
        ap.error("an archive or --objects is needed")

    passed = failed = 0
    for layer in sorted(groups):
        if groups[layer] is not None and check(layer, groups[layer], args.known):
            passed += 1
        else:
            failed += 1
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
