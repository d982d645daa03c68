#!/usr/bin/env bash
# probes_test: the library's static probes (docs/api.md, "Static probes").
#
#   1. Built with probes (meson option `probes`, <sys/sdt.h> found): the
#      library's ELF notes (.note.stapsdt, `readelf -n`) hold every probe of
#      backends/probe.h's TERN_PROBE_MAP under the provider `tern`, and no
#      other. Built without: the library has no stapsdt note at all.
#   2. Where bpftrace can attach (root, uprobes): it counts the events of a
#      running example (test/probe_run, filtered on its pid), and each count
#      equals what the example counted itself: job_submitted, job_started
#      and job_done once per job, job_refused once per refused submission
#      (cause undelivered), post once per post, turn_end once per turn,
#      wake once per wake syscall the loop's statistics count.
#
# Given the build directory as $1. Exits 77 (skipped, saying why) when
# readelf is missing, or, for part 2, when bpftrace is missing or cannot
# attach here (part 1 has then still run). Closes with "N passed, N failed".
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: probes_test.sh BUILD_DIR}
# The SONAME link is the one every build has (the bare .so link is for
# linking and may be missing from a build directory reused across options).
lib=$(readlink -f "$build/libtern.so.0")
example=$build/test/probe_run

if ! command -v readelf >/dev/null; then
    echo "skipped: readelf not found (Debian: binutils)"
    exit 77
fi

passed=0
failed=0
ok() { passed=$((passed + 1)); }
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }
finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit
}

# The one list: X(name, "arguments", "where") entries of TERN_PROBE_MAP.
expected=$(sed -n 's/^ *X(\([a-z_]*\),.*/\1/p' "$root/backends/probe.h" | sort -u)
if [ "$(printf '%s\n' "$expected" | grep -c .)" -lt 9 ]; then
    fail "found only $(printf '%s\n' "$expected" | grep -c .) probes in backends/probe.h: the extraction is broken"
    finish
fi

# 1. The notes.
notes=$(readelf -n "$lib" 2>/dev/null)
found=$(printf '%s\n' "$notes" | awk '/Provider: tern/ { p = 1; next } p && /Name:/ { print $2; p = 0 }' | sort -u)
other=$(printf '%s\n' "$notes" | awk '/Provider:/ && $2 != "tern" { print $2 }' | sort -u | tr '\n' ' ')
if grep -q -- '-DTERN_HAVE_SDT' "$build/build.ninja"; then
    missing=$(comm -23 <(printf '%s\n' "$expected") <(printf '%s\n' "$found") | tr '\n' ' ')
    extra=$(comm -13 <(printf '%s\n' "$expected") <(printf '%s\n' "$found") | tr '\n' ' ')
    if [ -z "${missing// /}" ]; then ok; else fail "probes of TERN_PROBE_MAP missing from $lib's notes: $missing"; fi
    if [ -z "${extra// /}${other// /}" ]; then ok; else fail "notes not in TERN_PROBE_MAP: $extra $other"; fi
else
    if [ -z "$found" ]; then ok; else fail "built without probes, yet $lib has stapsdt notes: $found"; fi
    echo "probes are compiled out in this build: nothing to trace"
    finish
fi

# 2. Real events, where bpftrace can attach.
skip() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ] || exit 1
    echo "skipped (tracing): $*"
    exit 77
}
command -v bpftrace >/dev/null || skip "bpftrace not found (Debian: bpftrace)"
[ "$(id -u)" -eq 0 ] || skip "bpftrace needs root to attach uprobes (running as uid $(id -u))"
[ -x "$example" ] || skip "$example was not built"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
jobs=300
posts=25
mkfifo "$work/go"
# The example waits for a byte on the fifo, so the tracer attaches first.
"$example" "$jobs" "$posts" wait <"$work/go" >"$work/example.out" 2>&1 &
expid=$!
exec 3>"$work/go"
p="usdt:$lib:tern"
f="/pid == $expid/"
script="BEGIN { printf(\"ready\\n\"); }
$p:job_submitted $f { @submitted = count(); }
$p:job_started $f { @started = count(); }
$p:job_done $f { @done = count(); }
$p:job_refused $f { @refused[str(arg2)] = count(); }
$p:post $f { @posts = count(); }
$p:turn_start $f { @turn_start = count(); }
$p:turn_end $f { @turns = count(); }
$p:wake $f { @wakes = count(); }"
# Several sites of one probe (job_started) need the tracer to see the
# library mapped; attaching by path (not -c) works before the example runs.
bpftrace -e "$script" >"$work/trace.out" 2>&1 &
btpid=$!
deadline=$((SECONDS + 60))
until grep -q '^ready$' "$work/trace.out"; do
    if ! kill -0 "$btpid" 2>/dev/null || [ $SECONDS -gt $deadline ]; then
        kill "$btpid" "$expid" 2>/dev/null
        exec 3>&-
        wait "$expid" 2>/dev/null
        reason=$(grep -m1 -i 'error' "$work/trace.out")
        skip "bpftrace cannot attach here: ${reason:-no output within 60 s}"
    fi
    sleep 0.1
done
printf 'x' >&3
exec 3>&-
wait "$expid"
exrc=$?
# SIGTERM, not SIGINT: a background job of a non-interactive shell (as
# meson runs this) ignores SIGINT. bpftrace prints its maps on either.
kill -TERM "$btpid"
for _ in $(seq 300); do
    kill -0 "$btpid" 2>/dev/null || break
    sleep 0.1
done
if kill -0 "$btpid" 2>/dev/null; then
    kill -KILL "$btpid"
    fail "bpftrace did not end within 30 s of SIGTERM"
fi
wait "$btpid"
if [ "$exrc" -eq 0 ]; then ok; else fail "the example exited $exrc: $(cat "$work/example.out")"; fi

# What the example counted itself, and what bpftrace saw.
own() { sed -n "s/.*\\b$1 \\([0-9]*\\).*/\\1/p" "$work/example.out"; }
seen() { sed -n "s/^@$1: \\([0-9]*\\)\$/\\1/p" "$work/trace.out"; }
refused=$(own refused)
[ "$refused" -gt 0 ] 2>/dev/null || fail "the example was never refused (its ring of 16 should refuse): $(cat "$work/example.out")"
check() {
    local what=$1 want=$2 got
    got=$(seen "$what")
    got=${got:-0}
    if [ "$got" = "$want" ]; then ok; else fail "bpftrace counted $got $what events, the example $want"; fi
}
check submitted "$jobs"
check started "$jobs"
check done "$jobs"
check posts "$posts"
check turns "$(own turns)"
check turn_start "$(own turns)"
check wakes "$(own wakes)"
got=$(sed -n 's/^@refused\[undelivered\]: \([0-9]*\)$/\1/p' "$work/trace.out")
if [ "${got:-0}" = "$refused" ]; then ok; else fail "bpftrace counted ${got:-0} refusals with cause undelivered, the example $refused"; fi
[ "$failed" -eq 0 ] || cat "$work/trace.out" "$work/example.out"
finish
