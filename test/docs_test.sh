#!/usr/bin/env bash
# docs_test: the API reference (docs/api.md) cannot fall behind the header.
#
# Checks, against include/tern.h and every include/tern/*.h:
#   1. every public function has its own heading in docs/api.md;
#   2. every prototype, as the header declares it (whitespace aside),
#      appears in one of api.md's code blocks, so a changed signature
#      fails here until the reference is updated;
#   3. every public type (tern_* typedef) and constant (TERN_* enum
#      member or #define, include guards aside) is named in api.md;
#   4. no heading in api.md names a tern_* function the headers no longer
#      declare (a removed function must leave the reference too);
#   5. every docs/examples/*.c file named in docs/guide.md exists;
#   6. test/docs_check.py: every TERN_* name docs/*.md uses exists, the
#      return values a header comment promises and api.md's section for
#      the function agree, and every ```c block in docs/ compiles against
#      the headers (a deliberate excerpt is marked
#      "<!-- docs_test: fragment of docs/examples/<file>.c -->"; a block
#      marked "<!-- docs_test: all of docs/examples/<file>.c -->" must be
#      that file exactly), and docs/from-libuv.md's map holds: every
#      tern_* name it uses is declared, no row marked absent names a
#      libuv call whose tern counterpart the headers declare, and the
#      platform table's rows have its four cells;
#   7. that last check can fail: a copy of the map with rows planted that
#      call shipped calls absent, name an undeclared one, or leave a
#      platform row a cell short, is refused, and rows that are truly
#      absent are not.
#
# Given the build directory as $1 (unused: the check reads sources only).
# Prints one line per failure and closes with "N passed, N failed".
set -u

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
headers=("$root/include/tern.h" "$root/include/tern/"*.h)
api="$root/docs/api.md"
guide="$root/docs/guide.md"

passed=0
failed=0
ok() { passed=$((passed + 1)); }
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }

if [ ! -f "$api" ]; then
    fail "docs/api.md is missing"
    echo "$passed passed, $failed failed"
    exit 1
fi

# One line per declaration: from TERN_EXTERN to the closing semicolon (or
# from TERN_INLINE to the opening brace of its body, which becomes a
# semicolon), joined, with the macro dropped and whitespace normalised.
normalise() {
    sed -E -e 's/[[:space:]]+/ /g' -e 's/\( /(/g' -e 's/ \)/)/g' -e 's/^ //' -e 's/ $//'
}
declarations() {
    awk '
        /^[[:space:]]*#/ { next }
        /TERN_EXTERN|TERN_INLINE/ { collecting = 1; decl = "" }
        collecting {
            line = $0
            if (line ~ /^[[:space:]]*\{/) { print decl ";"; collecting = 0; next }
            decl = decl " " line
            if (line ~ /;/) { print decl; collecting = 0 }
        }
    ' "${headers[@]}" | sed -E 's/TERN_(EXTERN|INLINE)//' | normalise
}

# Every code block of api.md flattened into one normalised line, so a
# prototype may be wrapped differently than in the header.
api_code=$(awk '/^```/ { inside = !inside; next } inside' "$api" | tr '\n' ' ' | normalise)
headings=$(grep -E '^#+ ' "$api")

mapfile -t decls < <(declarations)
if [ "${#decls[@]}" -lt 40 ]; then
    fail "found only ${#decls[@]} declarations in the headers: the extraction is broken"
fi

declare -A declared=()
for d in "${decls[@]}"; do
    name=$(printf '%s\n' "$d" | grep -oE 'tern_[a-z0-9_]+ *\(' | head -1 | tr -d ' (')
    if [ -z "$name" ]; then
        fail "cannot find the function name in: $d"
        continue
    fi
    declared[$name]=1
    if printf '%s\n' "$headings" | grep -qE "(^|[^a-z0-9_])${name}([^a-z0-9_]|$)"; then
        ok
    else
        fail "$name has no heading in docs/api.md"
    fi
    if printf '%s\n' "$api_code" | grep -qF -- "$d"; then
        ok
    else
        fail "the prototype of $name in docs/api.md differs from the header: $d"
    fi
done

# Types: single-line typedefs, function-pointer typedefs, and the names
# closing a multi-line typedef struct.
types=$(cat "${headers[@]}" | grep -oE '^typedef [^;]*[ *](tern_[a-z0-9_]+);|\(\*tern_[a-z0-9_]+\)|^\} tern_[a-z0-9_]+;' |
    grep -oE 'tern_[a-z0-9_]+' | sort -u)
# Constants: #defines and enum members spelled TERN_*, but not the guards,
# nor a helper macro the header #undefs again (an X-macro's expander).
undefined=$(cat "${headers[@]}" | grep -oE '^#undef TERN_[A-Z0-9_]+' | grep -oE 'TERN_[A-Z0-9_]+' |
    sort -u)
constants=$(cat "${headers[@]}" |
    grep -oE '^#define TERN_[A-Z0-9_]+|^[[:space:]]*(enum \{ )?TERN_[A-Z0-9_]+ *=|[{,] *TERN_[A-Z0-9_]+ *=' |
    grep -oE 'TERN_[A-Z0-9_]+' | grep -vxE 'TERN_[A-Z0-9]*_?H' | sort -u |
    comm -23 - <(printf '%s\n' "$undefined"))
if [ "$(printf '%s\n' "$types" | grep -c .)" -lt 15 ] ||
   [ "$(printf '%s\n' "$constants" | grep -c .)" -lt 15 ]; then
    fail "too few types or constants found in the headers: the extraction is broken"
fi
for word in $types $constants; do
    if grep -qE "(^|[^A-Za-z0-9_])${word}([^A-Za-z0-9_]|$)" "$api"; then
        ok
    else
        fail "$word is not named in docs/api.md"
    fi
done

# Headings that name functions the headers do not declare.
for name in $(printf '%s\n' "$headings" | grep -oE 'tern_[a-z0-9_]+' | sort -u); do
    if [ -n "${declared[$name]:-}" ] || printf '%s\n' "$types" | grep -qx "$name"; then
        ok
    else
        fail "docs/api.md has a heading for $name, which the headers do not declare"
    fi
done

# The guide's examples exist.
if [ -f "$guide" ]; then
    for f in $(grep -oE 'docs/examples/[a-z_]+\.c' "$guide" | sort -u); do
        if [ -f "$root/$f" ]; then ok; else fail "docs/guide.md names $f, which does not exist"; fi
    done
fi

# Names, return values and snippets (test/docs_check.py prints its own
# failures and a closing count, which is added to ours).
check_out=$(python3 "$here/docs_check.py" "$root")
printf '%s\n' "$check_out" | grep -v -E '^[0-9]+ passed, [0-9]+ failed$'
counts=$(printf '%s\n' "$check_out" | tail -1)
if [[ "$counts" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
    passed=$((passed + BASH_REMATCH[1]))
    failed=$((failed + BASH_REMATCH[2]))
else
    fail "test/docs_check.py did not finish: $counts"
fi

# The map's check, shown failing: a copy of the page with planted rows.
# Each planted claim must be reported, and the true absences (a libuv call
# tern has no counterpart for) must not be.
plant=$(mktemp -d)
trap 'rm -rf "$plant"' EXIT
mkdir -p "$plant/docs"
cp -r "$root/include" "$plant/"
cp "$root/docs/from-libuv.md" "$plant/docs/"
cat >>"$plant/docs/from-libuv.md" <<'EOF'

## Planted by docs_test.sh

| libuv | tern | notes |
|---|---|---|
| `uv_walk` | absent | planted |
| `uv_udp_t`, `uv_udp_send` | absent | planted |
| `uv_spawn` | absent | planted |
| `uv_fs_event_t`, `uv_fs_event_start` | absent | planted |
| `uv_try_write` | absent | planted |
| `uv_tcp_nodelay`, `uv_tcp_keepalive` | absent | planted |
| `uv_mutex_lock`, `uv_once`, `uv_thread_*` | absent | truly absent |
| `uv_loop_alive` | `tern_loop_alive` | planted: no such call |

| libuv area | Linux | BSD, macOS | Windows |
|---|---|---|---|
| planted | a cell short | of four |
EOF
if planted=$(python3 "$here/docs_check.py" "$plant" libuv); then
    fail "the libuv map check passed a page with planted wrong rows"
fi
for claim in uv_walk uv_udp_t uv_udp_send uv_spawn uv_fs_event_t uv_fs_event_start uv_try_write \
    uv_tcp_nodelay uv_tcp_keepalive tern_loop_alive; do
    if printf '%s\n' "$planted" | grep -q "^FAIL: .*[: ]$claim is "; then
        ok
    else
        fail "the libuv map check missed the planted row for $claim"
    fi
done
if printf '%s\n' "$planted" | grep -q "^FAIL: .*: a platform row of 3 cells, not 4"; then
    ok
else
    fail "the libuv map check missed the planted platform row of 3 cells"
fi
for claim in uv_mutex_lock uv_once 'uv_thread_\*'; do
    if printf '%s\n' "$planted" | grep -q "^FAIL: .*[: ]$claim is "; then
        fail "the libuv map check refused the true absence of $claim"
    else
        ok
    fi
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
