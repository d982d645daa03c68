#!/usr/bin/env bash
# layers_test: tern's directories include downwards only (docs/design.md).
#
# Inside runtime/ the subject folders are ranked like the layers below,
# bottom first: core kinds jobs fs net process loop group. A folder includes only
# its own headers and those of the folders before it, and (with $1) its
# objects use no symbol that a later folder's objects define: one more
# link-level check per folder (docs/design.md, "The source tree"). A copy
# of the tree with an upward include planted in runtime/core/ is checked
# first and must be reported.
#
#   runtime/   the loop and its operation kinds  may include pool/pool.h, backends/
#   pool/      runs work, knows nothing of loops  may include backends/
#   backends/  the system-call edge, shared rings includes only its own
#
# and every directory may include include/ (the public API). From pool/,
# runtime/ includes its one interface header, pool.h, and nothing else:
# the pool's state word and workers are reached only through it. Each quoted
# #include in runtime/, pool/ and backends/ is resolved as the compiler
# would (the including file's directory first, then the lower layers) and
# must land in the same or a lower layer. A header name held by two
# directories fails too: it would let an include resolve differently in
# different layers. Prints the include graph (directory -> directory
# edges) and closes with "N passed, N failed" (one check per file, and
# two link-level checks when $1, the build directory, holds the layers'
# objects).
#
# The OS seam (docs/design.md, "The OS seam"): questions about the
# operating system are asked in backends/ and answered there, so no file
# under runtime/ or pool/ may name a TERN_HAVE_* build check. The check is first
# seen failing on a tree with one planted, then run on this one.
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1

# runtime/'s folders, bottom first (runtime/meson.build lists them so).
folders="core kinds jobs fs net process loop group"

rank() {
    case $1 in
    include) echo 0 ;;
    backends) echo 1 ;;
    pool) echo 2 ;;
    runtime) echo 3 ;;
    runtime/*)
        local n=3 f
        for f in $folders; do
            n=$((n + 1))
            [ "$1" = "runtime/$f" ] && echo $n && return
        done
        echo 99
        ;;
    *) echo 99 ;;
    esac
}

# The directory an include "name" from a file in dir resolves to, or "".
resolve() {
    local dir=$1 name=$2 d
    for d in "$dir" include backends pool runtime $(printf 'runtime/%s ' $folders) ""; do
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

# check_includes: the include rules over the tree in the current
# directory; counts into passed and failed, edges into $edges.
check_includes() {
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
            elif [ "$to_dir" = pool ] && [ "$dir" != pool ] && [ "$name" != pool.h ]; then
                bad="$bad \"$name\" (pool/ beyond its interface, pool.h)"
            fi
        done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
        if [ -n "$bad" ]; then
            echo "FAIL: $f includes a higher layer's or a private header:$bad"
            failed=$((failed + 1))
        else
            passed=$((passed + 1))
        fi
    done < <(find runtime pool backends -name '*.[ch]' | sort)
}

# The check seen failing: core/ includes a header of fs/, a later folder.
tmp=$(mktemp -d)
trap 'rm -rf "$edges" "$tmp"' EXIT
cp -r include runtime pool backends "$tmp/"
echo "#include \"fs_p.h\"" >>"$tmp/runtime/core/op.c"
planted=$(cd "$tmp" && passed=0 failed=0 edges=/dev/null check_includes)
want="FAIL: runtime/core/op.c includes a higher layer's or a private header:"
want="$want \"fs_p.h\" (runtime/fs)"
if grep -qF "$want" <<<"$planted"; then
    passed=$((passed + 1))
else
    echo "FAIL: an upward include planted in a copy (core/op.c -> fs/fs_p.h) was not reported:"
    echo "$planted"
    failed=$((failed + 1))
fi

check_includes

# The same at link level, when the build directory has the layers' objects:
# no pool/ object may use a symbol a runtime/ object defines, and no
# backends/ object one that pool/ or runtime/ defines (a call through a
# prototype written by hand would pass the include check).
build=${1:-}
if [ -n "$build" ] && [ -f "$build/libtern-pool.a" ] && [ -f "$build/libtern-backends.a" ] &&
    command -v nm >/dev/null; then
    defined() { nm --defined-only "$@" 2>/dev/null | awk '$2 ~ /^[TDBR]$/ { print $3 }' | sort -u; }
    used() { nm -u "$1" 2>/dev/null | awk '{ print $2 }' | sort -u; }
    rt=$(mktemp)
    pl=$(mktemp)
    trap 'rm -rf "$edges" "$tmp" "$rt" "$pl"' EXIT
    defined "$build"/libtern.so*.p/runtime_*.o >"$rt"
    defined "$build/libtern-pool.a" >"$pl"
    up=$(comm -12 <(used "$build/libtern-pool.a") "$rt" | tr '\n' ' ')
    if [ -n "$up" ]; then
        echo "FAIL: pool/ objects use runtime/ symbols: $up"
        failed=$((failed + 1))
    else
        passed=$((passed + 1))
    fi
    up=$(comm -12 <(used "$build/libtern-backends.a") <(sort -u "$rt" "$pl") | tr '\n' ' ')
    if [ -n "$up" ]; then
        echo "FAIL: backends/ objects use pool/ or runtime/ symbols: $up"
        failed=$((failed + 1))
    else
        passed=$((passed + 1))
    fi
    # Each runtime folder's objects use no symbol a later folder's define.
    later=""
    for f in $folders; do
        later="$later $f"
    done
    for f in $folders; do
        later=${later# $f}
        objs=("$build"/libtern.so*.p/runtime_"$f"_*.o)
        [ -f "${objs[0]}" ] || continue
        above=()
        for g in $later; do
            above+=("$build"/libtern.so*.p/runtime_"$g"_*.o)
        done
        up=""
        if [ ${#above[@]} -gt 0 ]; then
            up=$(comm -12 <(nm -u "${objs[@]}" 2>/dev/null | awk 'NF == 2 { print $2 }' | sort -u) \
                <(defined "${above[@]}") | tr '\n' ' ')
        fi
        if [ -n "$up" ]; then
            echo "FAIL: runtime/$f/ objects use symbols of a later folder: $up"
            failed=$((failed + 1))
        else
            passed=$((passed + 1))
        fi
    done
fi

# Files under runtime/ allowed to name TERN_HAVE_*, each with its reason
# (none today; a new one needs one here).
os_exceptions=""

# os_questions DIR: print each file under DIR/runtime and DIR/pool that
# names a TERN_HAVE_* check and is not an exception; false when there is one.
os_questions() {
    local found
    found=$(cd "$1" && grep -rlE 'TERN_HAVE_[A-Z0-9_]*' runtime pool --include='*.[ch]' 2>/dev/null |
        sort |
        while IFS= read -r f; do
            case " $os_exceptions " in *" $f "*) ;; *) echo "$f" ;; esac
        done)
    [ -z "$found" ] || { echo "$found"; return 1; }
}

plant=$(mktemp -d)
trap 'rm -f "$edges" "${rt:-}" "${pl:-}"; rm -rf "$plant" "${tmp:-}"' EXIT
mkdir -p "$plant/runtime/net"
printf '#ifdef TERN_HAVE_EPOLL\n#endif\n' >"$plant/runtime/planted.c"
printf '#if defined(TERN_HAVE_MMSG)\n#endif\n' >"$plant/runtime/net/planted_net.c"
printf '/* a comment */\n' >"$plant/runtime/net/udp.c"
if out=$(os_questions "$plant"); then
    echo "FAIL: the OS-seam check missed a TERN_HAVE_ check planted in runtime/planted.c"
    failed=$((failed + 1))
elif [ "$out" != "runtime/net/planted_net.c
runtime/planted.c" ]; then
    echo "FAIL: the OS-seam check on a planted tree named: $out (want the two planted files)"
    failed=$((failed + 1))
else
    passed=$((passed + 1))
fi
if out=$(os_questions "$root"); then
    passed=$((passed + 1))
else
    echo "FAIL: asks which OS it runs on (TERN_HAVE_*; ask backends/ instead):" $out
    failed=$((failed + 1))
fi

echo "include graph (directory -> directory):"
sort "$edges" | uniq -c | awk '$2 != $4 { printf "  %-14s -> %-10s (%d includes)\n", $2, $4, $1 }'
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
