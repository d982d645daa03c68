#!/usr/bin/env python3
"""example_output: run an example and hold its standard output to a pattern
file, so the Linux build and the Windows build (under wine) are checked
against the same expected lines.

    example_output.py PATTERNS -- COMMAND [ARG...]

PATTERNS has one Python regular expression per line (blank lines and lines
starting with '#' skipped); the example's output must have exactly as many
lines, each matching its pattern in full. The parts that differ from run to
run (turn numbers, milliseconds, counts of wake-ups) are the patterns'
groups; everything else must be the same text. Named groups `tick` and
`defer` on one line also say the defer ran in the turn after its tick. The
example must exit 0. Prints the output, then what differed; exit 1 on any
difference. In a cross build meson sets MESON_EXE_WRAPPER (wine64 for
.ci/mingw64.ini), and the command runs under it.
"""
import os
import re
import shlex
import subprocess
import sys


def main(argv):
    if len(argv) < 4 or argv[2] != "--":
        print(__doc__)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        patterns = [l.rstrip("\n") for l in f if l.strip() and not l.startswith("#")]
    wrapper = shlex.split(os.environ.get("MESON_EXE_WRAPPER", ""))
    run = subprocess.run(wrapper + argv[3:], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         timeout=300, check=False)
    out = run.stdout.decode("utf-8", "replace").replace("\r\n", "\n").splitlines()
    sys.stdout.write("\n".join(out) + "\n")
    sys.stderr.write(run.stderr.decode("utf-8", "replace"))
    bad = []
    if run.returncode != 0:
        bad.append(f"exit status {run.returncode}, wanted 0")
    if len(out) != len(patterns):
        bad.append(f"{len(out)} lines of output, wanted {len(patterns)}")
    for i, (line, pat) in enumerate(zip(out, patterns), 1):
        m = re.fullmatch(pat, line)
        if m is None:
            bad.append(f"line {i}: {line!r} does not match {pat!r}")
            continue
        g = m.groupdict()
        if "tick" in g and "defer" in g and int(g["defer"]) != int(g["tick"]) + 1:
            bad.append(f"line {i}: the defer ran in turn {g['defer']}, not the next one")
    for b in bad:
        print("FAIL: " + b)
    print("ok: output as expected" if not bad else f"{len(bad)} differences")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
