#!/usr/bin/env bash
# abi_test: the shared library keeps its ABI (docs/api.md, "How the ABI
# grows"), and the installed libraries carry only the public API.
#
#   1. libtern.so's SONAME is libtern.so.<soversion>, the one the baseline
#      abi/libtern.abi records: the two move together.
#   2. Every symbol libtern.so defines is a public tern_* name under a
#      TERN_* version node, and every TERN_EXTERN function of the headers
#      is among them.
#   3. abidiff finds no change against the baseline beyond added functions
#      and statistics structs grown at their end (abi/suppressions).
#   4. Neither libtern.so nor libtern.a defines a test seam (tern__test_*,
#      tern__set_*, tern__loop_step...): they live in libtern-seams.a.
#
# Given the build directory as $1. Exits 77 (skipped, with the reason) when
# abigail-tools or binutils are missing or the library has no debug
# information. Closes with "N passed, N failed".
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: abi_test.sh BUILD_DIR}
lib=$build/libtern.so
baseline=$root/abi/libtern.abi

for tool in abidiff readelf nm; do
    if ! command -v "$tool" >/dev/null; then
        echo "skipped: $tool not found (Debian: abigail-tools, binutils)"
        exit 77
    fi
done
if ! readelf -S "$lib" 2>/dev/null | grep -q '\.debug_info'; then
    echo "skipped: $lib has no debug information (abidiff needs it: use a debugoptimized build)"
    exit 77
fi

passed=0
failed=0
ok() { passed=$((passed + 1)); }
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }

# 1. The SONAME, against meson.build's soversion and the baseline's.
soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
soversion=$(sed -n "s/^tern_soversion = '\([0-9]*\)'/\1/p" "$root/meson.build")
recorded=$(grep -o "soname='[^']*'" "$baseline" | head -1 | cut -d"'" -f2)
if [ "$soname" = "libtern.so.$soversion" ]; then ok; else fail "SONAME is '$soname', meson.build's soversion says libtern.so.$soversion"; fi
if [ "$soname" = "$recorded" ]; then
    ok
else
    fail "SONAME $soname but the baseline records $recorded: an ABI break moves both; regenerate with abi/update and commit it with the SONAME"
fi

# 2. Exactly the public names, each under a version node.
exported=$(readelf --dyn-syms -W "$lib" | awk '$7 != "UND" && $7 != "ABS" && ($4 == "FUNC" || $4 == "OBJECT") { print $8 }')
stray=$(printf '%s\n' "$exported" | grep -v '^tern_[a-z0-9][a-z0-9_]*@@\?TERN_[0-9.]*$' | tr '\n' ' ')
if [ -z "${stray// /}" ]; then ok; else fail "exported outside a tern_* name under a TERN_ node: $stray"; fi
declared=$(awk '/^[[:space:]]*#/ { next } /TERN_EXTERN/ { print }' "$root/include/tern.h" "$root/include/tern/"*.h |
    grep -oE 'tern_[a-z0-9_]+ *\(' | tr -d ' (' | sort -u)
names=$(printf '%s\n' "$exported" | sed 's/@.*//' | sort -u)
missing=$(comm -23 <(printf '%s\n' "$declared") <(printf '%s\n' "$names") | tr '\n' ' ')
if [ "$(printf '%s\n' "$declared" | grep -c .)" -lt 40 ]; then
    fail "found only $(printf '%s\n' "$declared" | grep -c .) TERN_EXTERN functions in the headers: the extraction is broken"
elif [ -z "${missing// /}" ]; then ok; else fail "declared TERN_EXTERN but not exported: $missing"; fi

# 3. abidiff against the baseline. Its exit status is a bit set: 1 error,
# 2 usage, 4 a change, 8 an incompatible change; after the suppressions
# and without added functions, any bit is a failure.
report=$(abidiff --suppressions "$root/abi/suppressions" --no-added-syms \
    --headers-dir2 "$root/include" --drop-private-types "$baseline" "$lib" 2>&1)
rc=$?
if [ "$rc" -eq 0 ]; then
    ok
else
    printf '%s\n' "$report"
    fail "abidiff exit $rc against abi/libtern.abi: an incompatible change (see docs/api.md, 'How the ABI grows': move the SONAME and regenerate the baseline with abi/update, or keep the old ABI)"
fi

# 4. No test seam in what is installed.
seams='^tern__(test_|set_|loop_last_wait$|loop_step$|loop_backend_name$)'
for f in "$lib" "$build/libtern.a"; do
    found=$(nm --defined-only "$f" 2>/dev/null | awk '{ print $3 }' | grep -E "$seams" | sort -u | tr '\n' ' ')
    if [ -z "${found// /}" ]; then ok; else fail "$(basename "$f") defines test seams: $found"; fi
done
if nm --defined-only "$build/libtern-seams.a" 2>/dev/null | grep -q ' T tern__test_claim$'; then
    ok
else
    fail "libtern-seams.a does not define tern__test_claim (the seams moved? update this check)"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
