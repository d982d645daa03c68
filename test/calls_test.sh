#!/usr/bin/env bash
# calls_test: inside each layer directory a file calls only files below it
# (docs/design.md, "Layers"; the order of pool/ is written at the top of
# pool/pool_p.h). test/calls_check.py builds each layer's file -> file call
# graph from the objects of $1/libtern.a and fails naming any circle.
#
# CHECKED_LAYERS lists the layers held to this: a layer joins the list
# once its circles are gone. KNOWN may list a directory whose own circles
# are reported but not yet failed (none is: runtime/net/ reads top-down
# too); a circle that reaches a file outside it still fails.
#
# First the check itself must fail: two objects built here that call each
# other (a planted circle) must be reported as a circle, by name.
# Closes with "N passed, N failed".
CHECKED_LAYERS="backends pool runtime"
KNOWN=""

set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?the build directory}
passed=0
failed=0

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'void tern__planted_b(int n);\nvoid tern__planted_a(int n);\nvoid tern__planted_a(int n) { if (n) tern__planted_b(n - 1); }\n' >"$tmp/planted_a.c"
printf 'void tern__planted_a(int n);\nvoid tern__planted_b(int n);\nvoid tern__planted_b(int n) { if (n) tern__planted_a(n - 1); }\n' >"$tmp/planted_b.c"
printf 'void tern__planted_c(void);\nvoid tern__planted_c(void) {}\n' >"$tmp/planted_c.c"
cc=${CC:-cc}
if $cc -c -o "$tmp/planted_a.o" "$tmp/planted_a.c" && $cc -c -o "$tmp/planted_b.o" "$tmp/planted_b.c" &&
    $cc -c -o "$tmp/planted_c.o" "$tmp/planted_c.c"; then
    out=$(python3 "$here/calls_check.py" --objects "planted=$tmp/planted_a.o,$tmp/planted_b.o,$tmp/planted_c.o")
    rc=$?
    if [ $rc -ne 0 ] && grep -q 'FAIL: planted/ has a call circle of 2 files: planted_a.o, planted_b.o' <<<"$out" &&
        grep -q 'cycle: planted_a.o -(tern__planted_b)-> planted_b.o -(tern__planted_a)-> planted_a.o' <<<"$out"; then
        passed=$((passed + 1))
    else
        echo "FAIL: a planted circle (planted_a.o <-> planted_b.o) was not reported:"
        echo "$out"
        failed=$((failed + 1))
    fi
else
    echo "FAIL: could not compile the planted circle with $cc"
    failed=$((failed + 1))
fi

args=()
for layer in $CHECKED_LAYERS; do
    args+=(--layer "$layer")
done
for dir in $KNOWN; do
    args+=(--known "$dir")
done
if python3 "$here/calls_check.py" "${args[@]}" "$build/libtern.a"; then
    passed=$((passed + 1))
else
    failed=$((failed + 1))
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
