#!/usr/bin/env bash
# depends_test: no two files of runtime/, pool/ and backends/ depend on each
# other, by include or by a name one uses and the other defines (a global,
# a macro, a type, an inline function, an enum constant, a struct tag).
# test/depends_check.py builds that file graph from the sources with
# Universal Ctags and a tokeniser; its docstring gives the rules. The
# circles the tree has today are listed in test/depends_baseline.txt: any
# other, a larger one, or a listed one that is gone or smaller fails.
#
# Before the tree, the check is seen failing: a copy of the tree with a
# circle planted by shared names alone (ring.c reads clock.c's clock,
# clock.c reads a global ring.c defines, neither includes the other) must
# be reported by file and by name, with ring.h, which is tied to ring.c
# both ways (its inline fast path calls ring.c), while names written only
# in a comment or a string must add no edge; and baselines that miss a
# circle's file, list one too many, or list a circle that does not exist
# must fail with the matching message. Closes with "N passed, N failed".
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
passed=0
failed=0

if ! command -v ctags >/dev/null || ! ctags --version 2>/dev/null | grep -q 'Universal Ctags'; then
    echo "FAIL: depends_test needs Universal Ctags as \`ctags\`" \
        "(Debian: apt-get install universal-ctags)"
    echo "0 passed, 1 failed"
    exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect NAME STATUS PATTERN... -- ARGS: run the check with ARGS; it must
# exit with STATUS (0 or nonzero) and print every PATTERN (fixed strings).
expect() {
    local name=$1 want=$2 out rc p ok=1
    shift 2
    local patterns=()
    while [ "$1" != "--" ]; do
        patterns+=("$1")
        shift
    done
    shift
    out=$(python3 "$here/depends_check.py" "$@")
    rc=$?
    if [ "$want" = 0 ] && [ $rc -ne 0 ]; then ok=0; fi
    if [ "$want" != 0 ] && [ $rc -eq 0 ]; then ok=0; fi
    for p in "${patterns[@]}"; do
        grep -qF -- "$p" <<<"$out" || ok=0
    done
    if [ $ok -eq 1 ]; then
        passed=$((passed + 1))
    else
        echo "FAIL: $name (exit $rc; wanted ${want/1/nonzero}, and: ${patterns[*]})"
        echo "$out"
        failed=$((failed + 1))
    fi
}

# The planted circle, in a copy of the tree.
cp -r "$root/include" "$root/runtime" "$root/pool" "$root/backends" "$tmp/"
cat >>"$tmp/backends/ring.c" <<'EOF'
unsigned tern__planted_ring_spins;
uint64_t tern__planted_ring_stamp(void) { return tern__clock_now(); }
EOF
cat >>"$tmp/backends/clock.c" <<'EOF'
static unsigned planted_spins(void) { return tern__planted_ring_spins; }
EOF
cat >>"$tmp/backends/platform.c" <<'EOF'
/* tern__clock_now, in a comment */
static const char planted_text[] = "tern__clock_now";
EOF
expect "a circle planted by shared names in a copy of the tree" 1 \
    "FAIL: a circle of 3 files not in the baseline: backends/clock.c backends/ring.c" \
    "  backends/clock.c -> backends/ring.c: tern__planted_ring_spins" \
    "  backends/ring.c -> backends/clock.c: tern__clock_now" \
    "1 failed" -- --root "$tmp"
if python3 "$here/depends_check.py" --root "$tmp" | grep -q '^FAIL.*backends/platform\.c'; then
    echo "FAIL: a name in a comment or a string made an edge (backends/platform.c)"
    failed=$((failed + 1))
else
    passed=$((passed + 1))
fi

# Baselines that do not match the tree, against the planted circle (in
# the copy) so the cases hold whichever real circles remain.
base="$here/depends_baseline.txt"
planted="backends/clock.c backends/ring.c backends/ring.h"
cp "$base" "$tmp/grown.txt"
echo "backends/clock.c backends/ring.c" >>"$tmp/grown.txt"
expect "a circle larger than its baseline line" 1 \
    "grew past its baseline line (now also backends/ring.h)" \
    -- --root "$tmp" --baseline "$tmp/grown.txt"
cp "$base" "$tmp/shrunk.txt"
echo "$planted backends/platform.c" >>"$tmp/shrunk.txt"
expect "a baseline line larger than its circle" 1 \
    "FAIL: a baseline circle shrank: write $planted in the baseline instead of" \
    -- --root "$tmp" --baseline "$tmp/shrunk.txt"
cp "$base" "$tmp/stale.txt"
pair="backends/clock.c backends/ring.c"
echo "$pair" >>"$tmp/stale.txt"
expect "a baseline line with no circle" 1 \
    "FAIL: a baseline circle no longer exists: remove it from the baseline: $pair" \
    -- --baseline "$tmp/stale.txt"

# The tree itself.
if python3 "$here/depends_check.py"; then
    passed=$((passed + 1))
else
    failed=$((failed + 1))
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
