#!/usr/bin/env python3
"""citations_check: the product gives reasons, not citations.

Run by test/comments_test.sh with the project root as argv[1]. Fails for
every line of code, comment, test list, script or doc that cites an issue
number, a commit, the people who did the work, a work session or the
machine something was tuned on, instead of saying the reason itself
(docs/testing.md, "Reasons, not citations").

docs/performance.md is a record of measurements: a table there may name
the commit it was measured at and the machine it ran on (data about the
figures), so only the issue, people and session patterns apply to it.

Prints one line per failure and closes with "N passed, N failed".
"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCOPE = ["runtime", "pool", "backends", "include", "test", "docs", "bench", ".ci",
         "meson.build", "meson_options.txt", "README.md"]
EXTS = (".c", ".h", ".md", ".txt", ".sh", ".py", ".build", ".bt", ".stp")
SELF = os.path.join("test", "citations_check.py")

# Each: (what it cites, pattern). Written so this file does not match itself.
ALWAYS = [
    ("an issue number", re.compile(r"\bissues?\s+(?:#\s*)?[0-9]+", re.I)),
    ("an issue's item", re.compile(r"\bitems?\s+[0-9]+\s+(?:of|and)\b|\(item\s+[0-9]+\)", re.I)),
    ("the people who did the work", re.compile(r"\bthe\s+lead\b|\blead's\b|\bhelpers?\s+\"", re.I)),
    ("a work session", re.compile(r"\b(?:this|that|another|other|several|five|[0-9]+)\s+sessions?\b"
                                  r"(?!\s+of\s+its\s+own)", re.I)),
]
MEASUREMENT = [
    ("a commit", re.compile(r"\bcommits?\s+[0-9a-f]{7,40}\b|\bat\s+[0-9a-f]{7,12}\b")),
    ("the machine it was tuned on", re.compile(r"\b[0-9]+-(?:v?CPU|core)\s+VM\b|\b(?:the|this|a small)\s+VM\b",
                                               re.I)),
]

passed = 0
failed = 0
files = []
for entry in SCOPE:
    path = os.path.join(root, entry)
    if os.path.isfile(path):
        files.append(path)
        continue
    for dirpath, dirnames, names in os.walk(path):
        dirnames[:] = [d for d in dirnames if d not in ("corpus", "build")]
        for name in names:
            if name.endswith(EXTS) or name in ("test", "run", "count.py"):
                files.append(os.path.join(dirpath, name))

for path in sorted(set(files)):
    rel = os.path.relpath(path, root)
    if rel == SELF:
        continue
    patterns = ALWAYS if rel == os.path.join("docs", "performance.md") else ALWAYS + MEASUREMENT
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except (UnicodeDecodeError, OSError):
        continue
    bad = False
    for n, line in enumerate(lines, 1):
        for what, pat in patterns:
            m = pat.search(line)
            if m:
                print(f"FAIL: {rel}:{n}: cites {what} (\"{m.group(0)}\") as a reason; say the reason itself")
                failed += 1
                bad = True
    if not bad:
        passed += 1

if passed < 100:
    print(f"FAIL: only {passed} files checked: the walk is broken")
    failed += 1
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
