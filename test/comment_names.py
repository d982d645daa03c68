#!/usr/bin/env python3
"""Every tern_/tern__ identifier and source path named in a comment must exist.

Reads the C sources and headers under include/, runtime/, pool/,
backends/ (and docs/examples/, bench/, test/ for their own names), splits
each file into comment text and code text, and reports every identifier
spelled tern_... or tern__... in a comment that no code (outside comments)
in the whole tree defines or uses, and every path such as backends/ring.h that
names no file. A stale comment that names a function or a file that is
gone fails here.

Usage: comment_names.py ROOT. Prints one line per stale name and closes
with "N passed, N failed" (one check per file).
"""
import os
import re
import sys

NAME = re.compile(r"\btern__?[a-z0-9_]*[a-z0-9]\b")
PATH = re.compile(r"\b(?:runtime|pool|backends|include|test|bench|docs)/[\w./-]*\w\.[ch]\b")
TOKEN = re.compile(r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.S)


def split(text):
    """(code, comments): the code with comments blanked, and the comments."""
    code, comments, last = [], [], 0
    for m in TOKEN.finditer(text):
        code.append(text[last:m.start()])
        tok = m.group(0)
        if tok.startswith("/*") or tok.startswith("//"):
            comments.append(tok)
            code.append(" ")
        else:
            code.append(tok)
        last = m.end()
    code.append(text[last:])
    return "".join(code), "\n".join(comments)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    dirs = ["include", "runtime", "pool", "backends", "docs/examples", "bench", "test"]
    files = []
    for d in dirs:
        for base, _, names in os.walk(os.path.join(root, d)):
            files += [os.path.join(base, n) for n in names if n.endswith((".c", ".h"))]
    known, notes, paths = set(), {}, {}
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as fh:
            code, comments = split(fh.read())
        known |= set(NAME.findall(code))
        notes[f] = set(NAME.findall(comments))
        paths[f] = set(PATH.findall(comments))
    passed = failed = 0
    for f in sorted(notes):
        stale = sorted(n for n in notes[f] if n not in known)
        stale += sorted(p for p in paths[f] if not os.path.exists(os.path.join(root, p)))
        if stale:
            failed += 1
            print(f"FAIL: {os.path.relpath(f, root)}: comments name {', '.join(stale)}, "
                  "which the tree does not have")
        else:
            passed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
