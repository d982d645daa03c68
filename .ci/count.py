#!/usr/bin/env python3
"""Total a run from meson's test logs: one line, "N passed, N failed".

A criterion executable counts as the tests it ran (its "Synthesis" line);
any other test (stress programs, examples, scripts) counts as one. A test
skipped by exit status 77 counts as skipped. A failed test's own lines that
say why (FAIL, failed, error, timed out; at most 20) are printed on stderr
under its name, so a run's log says which check broke without its build
tree. A log that is missing (the run wrote none: .ci/test removes the old
one first, so none is ever reused), empty or unreadable counts as one
failure, named on stderr.
Usage: count.py LOG.json...
"""
import json
import re
import sys

SYNTH = re.compile(r"Synthesis: Tested: (\d+) \| Passing: (\d+) \| Failing: (\d+) \| Crashing: (\d+)")
WHY = re.compile(r"FAIL|failed|error|timed out|Assertion|Sanitizer", re.IGNORECASE)
PASSLINE = re.compile(r"^\d+ passed, 0 failed")


def say_why(out):
    why = [line for line in out.splitlines() if WHY.search(line) and not PASSLINE.search(line)]
    for line in why[:20]:
        print(f"count:   {line}", file=sys.stderr)


passed = failed = skipped = 0
for path in sys.argv[1:]:
    try:
        lines = [line for line in open(path).read().splitlines() if line.strip()]
        tests = [json.loads(line) for line in lines]
    except (OSError, ValueError) as e:
        print(f"count: no readable log {path} ({e}): counted as one failure", file=sys.stderr)
        failed += 1
        continue
    if not tests:
        print(f"count: {path} names no test: counted as one failure", file=sys.stderr)
        failed += 1
        continue
    for t in tests:
        result = t.get("result")
        out = (t.get("stdout") or "") + (t.get("stderr") or "")
        m = SYNTH.findall(out)
        if result == "SKIP":
            skipped += 1
        elif m:
            _, p, f, c = map(int, m[-1])
            passed += p
            failed += f + c
            if result != "OK" and f + c == 0:
                failed += 1  # the runner failed outside any test
            if result != "OK" or f + c:
                print(f"count: failed: {t.get('name')} ({result}) in {path}", file=sys.stderr)
                say_why(out)
        elif result in ("OK", "EXPECTEDFAIL"):
            passed += 1
        else:
            failed += 1
            print(f"count: failed: {t.get('name')} ({result}) in {path}", file=sys.stderr)
            say_why(out)
print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
sys.exit(1 if failed else 0)
