#!/usr/bin/env bash
# layers_test: tern's directories include downwards only (docs/design.md).
#
#   runtime/   the loop and its operation kinds  may include pool/, backends/
#   pool/      runs work, knows nothing of loops  may include backends/
#   backends/  the system-call edge               includes only its own
#
# and every directory may include include/ (the public API). Each quoted
# #include in runtime/, pool/ and backends/ is resolved as the compiler
# would (the including file's directory first, then the lower layers) and
# must land in the same or a lower layer. A header name held by two
# directories fails too: it would let an include resolve differently in
# different layers. Prints the include graph (directory -> directory
# edges) and closes with "N passed, N failed" (one check per file).
# Given the build directory as $1 (unused).
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1

rank() {
    case $1 in
    include) echo 0 ;;
    backends) echo 1 ;;
    pool) echo 2 ;;
    runtime | runtime/*) echo 3 ;;
    *) echo 9 ;;
    esac
}

# The directory an include "name" from a file in dir resolves to, or "".
resolve() {
    local dir=$1 name=$2 d
    for d in "$dir" include backends pool runtime ""; do
        if [ -f "${d:+$d/}$name" ]; then
            dirname "${d:+$d/}$name"
            return
        fi
    done
}

passed=0
failed=0
edges=$(mktemp)
trap 'rm -f "$edges"' EXIT

dups=$(find include runtime pool backends -name '*.h' -printf '%f\n' | sort | uniq -d)
if [ -n "$dups" ]; then
    echo "FAIL: header names held by two directories: $dups"
    failed=$((failed + 1))
fi

while IFS= read -r f; do
    dir=$(dirname "$f")
    from=$(rank "$dir")
    bad=""
    while IFS= read -r name; do
        [ -n "$name" ] || continue
        to_dir=$(resolve "$dir" "$name")
        if [ -z "$to_dir" ]; then
            bad="$bad \"$name\" (not found)"
            continue
        fi
        echo "$dir -> $to_dir" >>"$edges"
        if [ "$(rank "$to_dir")" -gt "$from" ]; then
            bad="$bad \"$name\" ($to_dir)"
        fi
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
    if [ -n "$bad" ]; then
        echo "FAIL: $f includes a higher layer's header:$bad"
        failed=$((failed + 1))
    else
        passed=$((passed + 1))
    fi
done < <(find runtime pool backends -name '*.[ch]' | sort)

echo "include graph (directory -> directory):"
sort "$edges" | uniq -c | awk '$2 != $4 { printf "  %-14s -> %-10s (%d includes)\n", $2, $4, $1 }'
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
