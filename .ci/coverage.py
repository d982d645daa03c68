#!/usr/bin/env python3
"""Coverage of runtime/, pool/ and backends/ after a -Db_coverage=true run.

Usage: coverage.py BUILD_DIR LOG.json

Runs gcovr over the build's .gcda files (the suites must have run), prints
lines, functions and branches and the ten files weakest by branches, and
compares the figures with the floor in .ci/coverage-floor. Writes LOG.json
as a one-test meson log ("coverage-floor", OK or FAIL), so .ci/count.py
counts the check with the suites. Exit status 0 or 1.

Branches are printed twice. The first figure counts every branch gcov
sees. The second ("testable") sets aside the branches of internal
invariant checks (TERN_INSIST, TERN_ENSURE, TERN_DECREMENT,
TERN_ATOMIC_DECREMENT, TERN_UNREACHABLE, the books audit): their failing
side is a tern bug, which no test can take without breaking the code
first. Contract checks (TERN_REQUIRE, TERN_FATAL) stay in both figures:
the abort tests take their failing sides. Both figures have a floor.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
build, log = os.path.abspath(sys.argv[1]), sys.argv[2]
floor = {}
for line in open(os.path.join(root, ".ci", "coverage-floor")):
    line = line.split("#", 1)[0].split()
    if len(line) == 2:
        floor[line[0]] = float(line[1])

# gcovr writes (and first unlinks) its -o path: a scratch file, never /dev/null.
with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "coverage.json")
    # A process forked while another thread is inside a block inherits
    # counters caught mid-update; its dump then makes gcov derive a branch
    # count of -1, which gcovr 5.2 refuses. Such a line is left out, not
    # the whole report.
    #
    # gcovr 5.2 also stops (an assertion) when two objects report one
    # function at different lines, which gcov's text output gives it for
    # inline functions of a header in such a dump. Counts and lines are
    # not in doubt, only where the function starts, so gcovr runs with
    # the merge option its own parser uses for that case (the larger
    # line wins; gcovr 6 offers it as --merge-mode-functions). gcovr is
    # run by the interpreter its script names, as a module.
    #
    # The search path is the build alone: by default gcovr walks the whole
    # root, and the Windows stage's wine prefix lies under it with a drive
    # (z:) that is the machine's root, through which gcovr would reach
    # every process's working directory (/proc/<pid>/cwd) and count the
    # coverage data of any other build it finds there.
    args = ["-r", root, "--object-directory", build, "-f", "runtime/", "-f", "pool/",
            "-f", "backends/", "--gcov-ignore-parse-errors", "--json", "-o", out, build]
    script = shutil.which("gcovr")
    python = open(script).readline()[2:].strip().split()[-1] if script else sys.executable
    run = ("import sys, gcovr.merging as m\n"
           "m.DEFAULT_MERGE_OPTIONS.ignore_function_lineno = True\n"
           "from gcovr.__main__ import main\n"
           "sys.argv[0] = 'gcovr'\n"
           "main()\n")
    subprocess.run([python, "-c", run] + args, check=True, stdout=subprocess.DEVNULL)
    report = json.load(open(out))

# A line is an invariant check's when it names one of the invariant macros,
# or it is an `if` whose body (the next line) is the failure call itself.
INVARIANT = re.compile(r"\b(TERN_INSIST|TERN_ENSURE|TERN_DECREMENT|TERN_ATOMIC_DECREMENT|"
                       r"TERN_UNREACHABLE|BOOKS)\s*\(")
FAILURE_CALL = re.compile(r"^\s*(tern__check_failed\s*\(|TERN_UNREACHABLE\s*\()")


def invariant_lines(path):
    text = open(os.path.join(root, path), encoding="utf-8").read().split("\n")
    found = set()
    for i, src in enumerate(text):
        if INVARIANT.search(src):
            found.add(i + 1)
        if re.match(r"^\s*(\}\s*else\s+)?if\s*\(", src) and i + 1 < len(text) and \
                FAILURE_CALL.match(text[i + 1]):
            found.add(i + 1)
    return found


def pct(covered, total):
    return 100.0 * covered / total if total else 100.0


totals = {k: [0, 0] for k in ("lines", "functions", "branches", "testable")}
files = []
for f in report["files"]:
    inv = invariant_lines(f["file"])
    br = [0, 0]
    for ln in f["lines"]:
        if ln.get("gcovr/noncode"):
            continue
        totals["lines"][1] += 1
        totals["lines"][0] += ln["count"] > 0
        taken = sum(1 for b in ln["branches"] if b["count"] > 0)
        br[0] += taken
        br[1] += len(ln["branches"])
        if ln["line_number"] not in inv:
            totals["testable"][0] += taken
            totals["testable"][1] += len(ln["branches"])
    for fn in f.get("functions", []):
        totals["functions"][1] += 1
        totals["functions"][0] += fn["execution_count"] > 0
    totals["branches"][0] += br[0]
    totals["branches"][1] += br[1]
    if br[1]:
        files.append((f["file"], br[0], br[1]))

figures = {k: pct(*v) for k, v in totals.items()}
print("coverage of runtime/ pool/ backends/ (gcovr " + " ".join(args[:-3]) + "):")
names = {"lines": "lines", "functions": "functions", "branches": "branches",
         "testable": "branches, invariant checks set aside"}
for k, v in totals.items():
    print(f"  {names[k]:38} {figures[k]:5.1f} % ({v[0]}/{v[1]}), floor {floor.get(k, 0):.1f} %")
files.sort(key=lambda f: (pct(f[1], f[2]), -f[2]))
print("  weakest by branches:")
for name, covered, total in files[:10]:
    print(f"    {name:34} {covered:4}/{total:<4} {pct(covered, total):5.1f} %")
low = [k for k in figures if figures[k] + 1e-9 < floor.get(k, 0)]
for k in low:
    print(f"coverage: {names[k]} {figures[k]:.1f} % is below the floor {floor[k]:.1f} % "
          "(.ci/coverage-floor)")
with open(log, "w") as f:
    f.write(json.dumps({"name": "coverage-floor", "result": "FAIL" if low else "OK",
                        "stdout": "", "stderr": ""}) + "\n")
sys.exit(1 if low else 0)
