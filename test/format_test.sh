#!/usr/bin/env bash
# format_test: the product's C follows .clang-format (clang-format 14, as
# Debian 12 ships it) and no line of it, nor of the tests, examples or
# benchmarks, runs past 100 columns. The formatter's output is the rule,
# so a reader never meets two styles and a change never mixes reformatting
# with its real edit.
#
# First the check itself must fail: a copy of a product file with one
# line broken out of the style, and one with a 101-column line.
# Closes with "N passed, N failed".
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok: $1"; }
fail() { failed=$((failed + 1)); echo "FAIL: $1"; }

if ! command -v clang-format >/dev/null; then
    echo "FAIL: clang-format is not installed (Debian package clang-format)"
    echo "0 passed, 1 failed"
    exit 1
fi

cd "$root" || exit 1
product=$(git ls-files 'runtime/*.[ch]' 'pool/*.[ch]' 'backends/*.[ch]' 'include/*.h' 2>/dev/null ||
          find runtime pool backends include -name '*.[ch]')
all=$(git ls-files '*.[ch]' 2>/dev/null || find . -name '*.[ch]' -not -path './build*')

# long_lines FILE...: prints FILE:LINE for every line over 100 columns.
long_lines() { awk 'length($0) > 100 { print FILENAME ":" FNR }' "$@"; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp .clang-format "$tmp/"
cp runtime/core/error.c "$tmp/planted.c"
printf 'int  tern__planted( int a ){return a;}\n' >>"$tmp/planted.c"
if clang-format --dry-run --Werror "$tmp/planted.c" >/dev/null 2>&1; then
    fail "a line out of the style passes the formatter check"
else
    ok "the formatter check fails on a line out of the style"
fi
printf '/* %s */\n' "$(printf 'x%.0s' $(seq 1 95))" >"$tmp/long.c"
if [ -n "$(long_lines "$tmp/long.c")" ]; then
    ok "the length check fails on a 101-column line"
else
    fail "a 101-column line passes the length check"
fi

# shellcheck disable=SC2086
bad=$(clang-format --dry-run $product 2>&1 | grep -E '^[^ ].*: (warning|error):' |
      sed -E 's/:([0-9]+):[0-9]+: .*/:\1/' | sort -u)
if [ -z "$bad" ]; then
    ok "runtime/ pool/ backends/ include/ follow .clang-format"
else
    fail "not as clang-format lays it out (run: clang-format -i FILE):"
    echo "$bad" | head -40
fi

# shellcheck disable=SC2086
long=$(long_lines $all)
if [ -z "$long" ]; then
    ok "no line of C over 100 columns"
else
    fail "lines over 100 columns:"
    echo "$long" | head -40
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
