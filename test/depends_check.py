#!/usr/bin/env python3
"""depends_check: no two source files depend on each other, by include or by name.

A file depends on another when it includes it or uses a name that only the
other defines. test/calls_check.py sees calls between built objects; this
sees the rest of what ties files together: a global read through an extern,
a macro, a type, an enum constant, an inline function in a private header,
a struct tag. It reads the sources of runtime/ (runtime/net/ too), pool/
and backends/ as one graph whose nodes are files (a header and its .c are
two nodes), finds the strongly connected sets (Tarjan) and prints each
circle of two or more files with the names that make each of its edges.

    depends_check.py [--root DIR] [--baseline FILE] [--verbose]

Definitions come from Universal Ctags; uses come from a tokeniser over the
raw source with comments, strings and character constants removed, with
member names (after `.` or `->`) skipped and names after struct, union or
enum looked up among tags only. The owner of a name is the file holding
its definition:

  - In a .c file: a function body or a global variable that is not static.
    Its static functions and variables, macros, types and enum constants
    are file-local: a use of them never leaves the file.
  - In a header: every function body (static inline ones included), macro,
    typedef, struct, union or enum body, enum constant and variable
    definition.
  - A prototype or an extern declaration owns nothing and uses nothing: a
    call to a function declared in foo.h and defined in foo.c depends on
    foo.c, and on foo.h only through the include; foo.h, declaring it,
    depends on neither. (A name counts as used where it is written more
    often than ctags finds it declared.)
  - A name defined in several files (the backend variants, a fallback
    beside its platform's version) links its users to every definer: each
    build keeps one of them, and a circle through any one is a circle in
    that build.
  - A file's own definitions shadow everyone else's: a name a file defines
    (static or not) is never a use of another file's name.
  - A header and the .c of its own name beside it may depend on each
    other (check.h's macros report through check.c's failure function,
    ring.h's inline fast path calls ring.c's slow one): they are one
    owner's offer and its body, so those two alone are not a circle. Both
    edges stay in the graph, so a circle through the pair and any other
    file is reported. Every other header is a file of its own, pool_p.h
    and loop_p.h included.
  - A struct, union or enum tag written only behind a pointer (`struct
    tern__pool *p`) or in a bare `struct name;` is opaque: it needs no
    body, the way a layer hands a higher one a handle. A file that reaches
    into the body has to include the header that defines it, and that
    include is its edge.
  - Names from include/ (the public API) and from the system are outside
    the graph and ignored; a public function's body in runtime/ is owned
    by its file like any other.

An edge is also each quoted #include that resolves, as the compiler would
(the including file's directory, then include/, backends/, pool/,
runtime/ and runtime's folders), to a file of the checked tree.

Names made by token pasting (an X-macro's generated enum constants) are
not seen: their uses stay unowned, and the include of the list's header
is the only edge they add.

The tree has circles that are being taken apart; the baseline (by default
test/depends_baseline.txt, one circle per line as its sorted file list)
names them. A circle that is exactly a baseline line passes, and prints as
known. The check fails on a circle outside the baseline, on one that grew
past its baseline line, and on a baseline line that no longer matches a
circle: gone (remove it from the baseline) or shrunk (write the smaller
circle instead), so the baseline shrinks with the code. Failing circles
print every edge inside them with up to two names each, and one cycle
through them; --verbose prints the same for the known ones. One line per
failure; closes with "N passed, N failed".
"""

import argparse
from collections import Counter
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from calls_check import circles, one_cycle  # noqa: E402  (one Tarjan for both checks)

TREES = ["runtime", "pool", "backends"]
# Where a quoted include is looked for after the including file's directory.
INCLUDE_PATH = ["include", "backends", "pool", "runtime"] + [
    "runtime/" + d for d in ("core", "kinds", "jobs", "fs", "net", "process", "loop", "group")]
# ctags kinds that define something; prototypes and externs only declare.
TAG_KINDS = {"struct", "union", "enum"}
HEADER_KINDS = {"function", "variable", "macro", "typedef", "enumerator"} | TAG_KINDS
SOURCE_KINDS = {"function", "variable"}
LOCAL_KINDS = {"macro", "typedef", "enumerator", "function", "variable"} | TAG_KINDS

# A comment, a string or a character constant: text, not names.
TEXT = re.compile(r"""//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'""", re.S)
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
DIRECTIVE = re.compile(r"^\s*#\s*(\w+)(.*)$")
DEFINE = re.compile(r"^\s*([A-Za-z_]\w*)(?:\(([^)]*)\))?")
# Directives whose words are text, not names.
TEXT_DIRECTIVES = {"error", "warning", "pragma", "include", "line"}
KEYWORDS_TAG = {"struct", "union", "enum"}
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|->|[^\sA-Za-z0-9_]")


def sources(root):
    found = []
    for tree in TREES:
        for d, subdirs, files in os.walk(os.path.join(root, tree)):
            subdirs.sort()
            for f in sorted(files):
                if f.endswith((".c", ".h")):
                    found.append(os.path.relpath(os.path.join(d, f), root))
    return found


def ctags_definitions(root, files):
    """{file: [(name, kind, file_scoped)]} from one Universal Ctags run, with
    the declarations (prototypes, externs) as well as the definitions."""
    out = subprocess.run(
        ["ctags", "--languages=C", "--language-force=C", "--output-format=json",
         "--kinds-C=+p+x", "--fields=+f+r", "--extras=-F", "-f", "-"] + files,
        cwd=root, check=True, capture_output=True, text=True,
    )
    table = {f: [] for f in files}
    for line in out.stdout.splitlines():
        tag = json.loads(line)
        if tag.get("_type") != "tag" or tag.get("path") not in table:
            continue
        if "def" not in tag.get("roles", "def").split(","):
            continue
        if tag["name"].startswith("__anon"):
            continue
        table[tag["path"]].append((tag["name"], tag["kind"], bool(tag.get("file"))))
    return table


def logical_lines(text):
    return text.replace("\\\n", " ").split("\n")


def scan(text):
    """(ordinary names, tag names, quoted includes) of one file: each name
    with the number of times it is written. A bare `struct name;` is a
    declaration and `struct name *` an opaque pointer: neither is counted."""
    includes = INCLUDE.findall(text)
    plain, tags = Counter(), Counter()
    # Keep a comment's newlines so the directives stay on lines of their own.
    clean = TEXT.sub(lambda m: " " + "\n" * m.group(0).count("\n"), text)
    code = []
    for line in logical_lines(clean):
        m = DIRECTIVE.match(line)
        if not m:
            code.append(line)
            continue
        word, rest = m.group(1), m.group(2)
        if word in TEXT_DIRECTIVES:
            continue
        if word == "define":
            d = DEFINE.match(rest)
            if d:
                params = set(re.findall(r"\w+", d.group(2) or ""))
                body = rest[d.end():]
                code.append(" ".join(t for t in WORD.findall(body) if t not in params))
            continue
        code.append(rest)
    words = WORD.findall("\n".join(code))
    for i, tok in enumerate(words):
        if not (tok[0].isalpha() or tok[0] == "_"):
            continue
        prev = words[i - 1] if i else None
        if prev in (".", "->"):
            continue  # a member name
        if prev in KEYWORDS_TAG:
            if i + 1 < len(words) and words[i + 1] == ";" and (
                    i < 2 or words[i - 2] in (";", "{", "}")):
                continue  # a forward declaration
            if i + 1 < len(words) and words[i + 1] == "*":
                continue  # an opaque pointer: the body is not needed here
            tags[tok] += 1
        else:
            plain[tok] += 1
    return plain, tags, includes


def resolve(root, including, name):
    for d in [os.path.dirname(including)] + INCLUDE_PATH:
        path = os.path.normpath(os.path.join(d, name))
        if os.path.isfile(os.path.join(root, path)):
            return path
    return None


def partner(path):
    """The body of a header's offer (foo.h -> foo.c beside it); None for a .c."""
    return path[:-2] + ".c" if path.endswith(".h") else None


def build_graph(root):
    """(files, {file: {other: the names that make the edge, '#include' first
    when it includes the other}})."""
    files = sources(root)
    defs = ctags_definitions(root, files)
    owners_plain, owners_tag = {}, {}
    declared = {f: Counter() for f in files}
    local_plain = {f: set() for f in files}
    local_tag = {f: set() for f in files}
    for f in files:
        header = f.endswith(".h")
        for name, kind, file_scoped in defs[f]:
            if kind in ("prototype", "externvar"):
                declared[f][name] += 1
            if kind not in LOCAL_KINDS:
                continue
            is_tag = kind in TAG_KINDS
            (local_tag if is_tag else local_plain)[f].add(name)
            owned = kind in HEADER_KINDS if header else (kind in SOURCE_KINDS and not file_scoped)
            if owned:
                (owners_tag if is_tag else owners_plain).setdefault(name, set()).add(f)
    edges = {f: {} for f in files}
    for f in files:
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        plain, tags, includes = scan(text)
        # A name written only where it is declared is not used here.
        plain = {n for n, k in plain.items() if k > declared[f][n]}
        tags = set(tags)
        for inc in includes:
            target = resolve(root, f, inc)
            if target in edges and target != f:
                edges[f].setdefault(target, []).append("#include")
        for used, owners, local in ((plain, owners_plain, local_plain[f]),
                                    (tags, owners_tag, local_tag[f])):
            for name in sorted(used - local):
                for target in sorted(owners.get(name, ())):
                    if target != f:
                        label = "struct " + name if owners is owners_tag else name
                        edges[f].setdefault(target, []).append(label)
    return files, edges


def reasons(names, most=2):
    """The names that make an edge: names first, the include only if alone."""
    named = [n for n in names if n != "#include"]
    shown = named[:most]
    more = len(named) - len(shown)
    text = ", ".join(shown) + (f" and {more} more" if more > 0 else "")
    if "#include" in names:
        text = f"#include{'; ' + text if text else ''}"
    return text


def describe(edges, scc):
    lines = []
    members = set(scc)
    for a in scc:
        for b in sorted(edges[a]):
            if b in members:
                lines.append(f"  {a} -> {b}: {reasons(edges[a][b])}")
    cycle = one_cycle(edges, scc)
    lines.append("  cycle: " + " -> ".join(cycle))
    return lines


def read_baseline(path):
    entries = []
    if path and os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                line = line.split("#", 1)[0].split()
                if line:
                    entries.append(tuple(sorted(line)))
    return entries


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.dirname(here),
                    help="the tree to read (holds runtime/, pool/, backends/, include/)")
    ap.add_argument("--baseline", default=os.path.join(here, "depends_baseline.txt"),
                    help="the known circles, one per line ('' for none)")
    ap.add_argument("--verbose", action="store_true",
                    help="print the edges of known circles too")
    args = ap.parse_args()

    if shutil.which("ctags") is None or b"Universal Ctags" not in subprocess.run(
            ["ctags", "--version"], capture_output=True).stdout:
        print("FAIL: depends_check needs Universal Ctags as `ctags` "
              "(Debian: apt-get install universal-ctags)")
        print("0 passed, 1 failed")
        return 1

    files, edges = build_graph(args.root)
    by_name = sum(1 for a in edges for b in edges[a] if edges[a][b] != ["#include"])
    print(f"depends: {len(files)} files, {sum(len(e) for e in edges.values())} edges "
          f"({by_name} by a name)")

    baseline = read_baseline(args.baseline)
    found = [tuple(scc) for scc in circles(edges)
             if not (len(scc) == 2 and partner(scc[1]) == scc[0])]
    passed = failed = 0
    for scc in found:
        if scc in baseline:
            passed += 1
            print(f"known: a circle of {len(scc)} files (in the baseline): {' '.join(scc)}")
            if args.verbose:
                print("\n".join(describe(edges, list(scc))))
            continue
        failed += 1
        grown = [b for b in baseline if set(b) < set(scc)]
        if grown:
            extra = sorted(set(scc) - set().union(*map(set, grown)))
            print(f"FAIL: a circle of {len(scc)} files grew past its baseline line "
                  f"(now also {' '.join(extra)}): {' '.join(scc)}")
        else:
            print(f"FAIL: a circle of {len(scc)} files not in the baseline: {' '.join(scc)}")
        print("\n".join(describe(edges, list(scc))))
    for entry in baseline:
        if entry in found or any(set(scc) > set(entry) for scc in found):
            continue  # known, or reported above as grown
        failed += 1
        smaller = [scc for scc in found if set(scc) < set(entry)]
        if smaller:
            now = " / ".join(" ".join(scc) for scc in smaller)
            print(f"FAIL: a baseline circle shrank: write {now}"
                  f" in the baseline instead of: {' '.join(entry)}")
        else:
            print(f"FAIL: a baseline circle no longer exists: remove it from the baseline: "
                  f"{' '.join(entry)}")
    if not found:
        passed += 1
        print("no circle: every file reads top-down")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
