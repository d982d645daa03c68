#!/usr/bin/env python3
"""Coverage of runtime/, pool/ and backends/ after a -Db_coverage=true run.

Usage: coverage.py BUILD_DIR LOG.json

Runs gcovr over the build's .gcda files (the suites must have run), prints
lines, functions and branches and the ten files weakest by branches, and
compares the three figures with the floor in .ci/coverage-floor. Writes
LOG.json as a one-test meson log ("coverage-floor", OK or FAIL), so
.ci/count.py counts the check with the suites. Exit status 0 or 1.
"""
import json
import os
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
    out = os.path.join(tmp, "summary.json")
    cmd = ["gcovr", "-r", root, "--object-directory", build, "-f", "runtime/", "-f", "pool/",
           "-f", "backends/", "--json-summary", "-o", out]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    summary = json.load(open(out))

def pct(covered, total):
    return 100.0 * covered / total if total else 100.0

figures = {
    "lines": pct(summary["line_covered"], summary["line_total"]),
    "functions": pct(summary["function_covered"], summary["function_total"]),
    "branches": pct(summary["branch_covered"], summary["branch_total"]),
}
print("coverage of runtime/ pool/ backends/ (" + " ".join(cmd[:-2]) + "):")
keys = {"lines": "line", "functions": "function", "branches": "branch"}
for k, key in keys.items():
    covered, total = summary[key + "_covered"], summary[key + "_total"]
    print(f"  {k:9} {figures[k]:5.1f} % ({covered}/{total}), floor {floor.get(k, 0):.1f} %")
files = [f for f in summary["files"] if f["branch_total"] > 0]
files.sort(key=lambda f: (pct(f["branch_covered"], f["branch_total"]), -f["branch_total"]))
print("  weakest by branches:")
for f in files[:10]:
    print(f"    {f['filename']:34} {f['branch_covered']:4}/{f['branch_total']:<4} "
          f"{pct(f['branch_covered'], f['branch_total']):5.1f} %")
low = [k for k in figures if figures[k] + 1e-9 < floor.get(k, 0)]
for k in low:
    print(f"coverage: {k} {figures[k]:.1f} % is below the floor {floor[k]:.1f} % (.ci/coverage-floor)")
with open(log, "w") as f:
    f.write(json.dumps({"name": "coverage-floor", "result": "FAIL" if low else "OK",
                        "stdout": "", "stderr": ""}) + "\n")
sys.exit(1 if low else 0)
