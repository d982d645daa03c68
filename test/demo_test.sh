#!/usr/bin/env bash
# Integration test of the demo server (docs/examples/demo), driven with
# curl and wrk over loopback only. Given the build directory as $1.
#
#   1. correct bodies for /, /hash, /stats, 404 and 400
#   2. keep-alive: two requests on one connection
#   3. saturation: 200 parallel requests against a 1-thread, 4-slot pool;
#      every request is answered exactly once, with 200 or with 503 and
#      Retry-After, and the server's own counts agree
#   4. a few seconds of wrk at saturation; the server stays healthy
#   5. a /slow client that hangs up has its job cancelled (seen in /stats)
#   5b. /files/<path> from --files DIR: byte-for-byte bodies with
#      Content-Length, 404, and 403 for every escape attempt (.., encoded
#      .., absolute paths, symlinks to a file or a directory outside);
#      shedding with 503 under load; no descriptor left behind
#   6. SIGTERM: no new connections, the stream in flight finishes, final
#      statistics are printed, exit status 0
#
# Exit 77 (skipped) when curl or wrk is missing, or when the demo was not
# built (no libhttp-parser-dev / libssl-dev). Every wait is bounded.
set -u

build=${1:?usage: demo_test.sh BUILD_DIR}
demo="$build/docs/examples/demo/tern-demo"
for tool in curl wrk; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "SKIP: $tool is not installed (apt-get install curl wrk)"
        exit 77
    fi
done
if [ ! -x "$demo" ]; then
    echo "SKIP: $demo was not built (needs libhttp-parser-dev and libssl-dev)"
    exit 77
fi

work=$(mktemp -d)
# The directory /files/ serves, and things outside it to reach for.
root="$work/root"
mkdir -p "$root/sub"
printf 'hello, files\n' >"$root/hello.txt"
printf 'inner\n' >"$root/sub/inner.txt"
head -c 300000 /dev/urandom >"$root/blob.bin"
head -c 3000000 /dev/urandom >"$root/big.bin"
printf 'secret\n' >"$work/secret"
ln -s hello.txt "$root/link_in"
ln -s "$work/secret" "$root/link_out"
ln -s "$work" "$root/dir_out"
ln -s ../../secret "$root/sub/up_out"
pid=
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null
    fi
    rm -rf "$work"
}
trap cleanup EXIT

passed=0
failed=0
ok() { echo "ok: $*"; passed=$((passed + 1)); }
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }
check() { # check DESCRIPTION COMMAND...
    local what=$1
    shift
    if "$@"; then ok "$what"; else fail "$what"; fi
}
finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit $?
}

# One pool thread, four queue slots: easy to saturate on purpose. The
# queue-wait bound is high so that refusals here come from the full queue.
"$demo" --port 0 --threads 1 --queue 4 --long-max 8 --shed-wait-ms 10000 \
    --files "$root" >"$work/out" 2>"$work/err" &
pid=$!
port=
for _ in $(seq 100); do
    port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$work/out")
    [ -n "$port" ] && break
    sleep 0.1
done
if [ -z "$port" ]; then
    fail "the server did not start"
    cat "$work/err"
    finish
fi
base="http://127.0.0.1:$port"
get() { curl -s --max-time 10 "$@"; }
snapshot() { # snapshot FILE: save /stats (one request) to FILE
    get "$base/stats" | tr ',{}' '\n\n\n' >"$1"
}
field() { # field FILE NAME: one counter from a snapshot
    sed -n "s/^\"$2\":\([0-9]*\)$/\1/p" "$1" | head -1
}
counter() { # counter NAME: one counter from a fresh /stats
    snapshot "$work/snap" && field "$work/snap" "$1"
}

# 1. bodies
check "GET / serves the page" bash -c "curl -s --max-time 10 '$base/' | grep -q '<h1>tern demo</h1>'"
# PBKDF2-HMAC-SHA256("tern", "tern-demo-salt", 1000 rounds, 32 bytes), computed independently.
want=abd9261cf2d4252c054dc08fe1dc6c689acb049edebc5e62d6efd0151fa4627c
check "GET /hash gives the PBKDF2 digest" test "$(get "$base/hash?rounds=1000")" = "$want"
check "GET /stats is JSON with the pool's figures" \
    bash -c "curl -s --max-time 10 '$base/stats' | grep -q '\"pool\":{\"threads\":1,'"
check "unknown path is 404" test "$(get -o /dev/null -w '%{http_code}' "$base/nope")" = 404
check "bad rounds is 400" test "$(get -o /dev/null -w '%{http_code}' "$base/hash?rounds=x")" = 400

# 2. keep-alive: /stats counts accepted connections, including its own.
a1=$(counter accepted)
get -o /dev/null "$base/" -o /dev/null "$base/hash?rounds=10"
a2=$(counter accepted)
check "two requests share one connection (accepted $a1 -> $a2)" test $((a2 - a1)) -eq 2

# 3. saturation: every request answered exactly once, 200 or 503 + Retry-After.
n=200
snapshot "$work/before"
urls=()
for i in $(seq "$n"); do urls+=(-o /dev/null "$base/hash?rounds=200000&i=$i"); done
curl -s --no-progress-meter --max-time 60 --parallel --parallel-max 50 --parallel-immediate \
    -w '%{http_code} %header{retry-after}\n' "${urls[@]}" >"$work/codes" 2>/dev/null
snapshot "$work/after"
r1=$(field "$work/before" requests)
s1=$(field "$work/before" responses)
r2=$(field "$work/after" requests)
s2=$(field "$work/after" responses)
total=$(wc -l <"$work/codes")
n200=$(grep -c '^200 $' "$work/codes")
n503=$(grep -c '^503 1$' "$work/codes")
check "every one of $n requests answered ($total lines)" test "$total" -eq "$n"
check "each answer is 200 or 503 with Retry-After ($n200 + $n503)" test $((n200 + n503)) -eq "$n"
check "the pool was saturated: some requests shed ($n503)" test "$n503" -gt 0
check "and some were served ($n200)" test "$n200" -gt 0
# Between the two snapshots the server saw the n requests and the second
# /stats, and answered the n (a snapshot counts its own request but not yet
# its own answer, so the first /stats' answer falls in between too).
check "server counted $n requests ($r1 -> $r2)" test $((r2 - r1)) -eq $((n + 1))
check "server answered each once ($s1 -> $s2)" test $((s2 - s1)) -eq $((n + 1))
check "refusals came from the full queue (-EAGAIN)" test "$(counter shed_refused)" -gt 0

# 4. wrk at saturation (bounded: 3 s), then the server still answers.
wrk -t1 -c32 -d3s --timeout 5s "$base/hash?rounds=100000" >"$work/wrk" 2>&1
check "wrk ran" grep -q 'requests in' "$work/wrk"
check "the server still answers after the load" \
    test "$(get -o /dev/null -w '%{http_code}' "$base/")" = 200

# 5. a /slow client that goes away: the job is cancelled.
c1=$(counter slow_cancelled)
get -N --max-time 2 "$base/slow?seconds=30" >"$work/slow1"
rc=$?
check "the /slow client timed out as planned (curl rc $rc)" test "$rc" -eq 28
check "it received the first chunk" grep -q 'tick 1 of 30' "$work/slow1"
c2=$c1
for _ in $(seq 50); do
    c2=$(counter slow_cancelled)
    [ "$c2" -gt "$c1" ] && break
    sleep 0.1
done
check "the server cancelled the job ($c1 -> $c2)" test "$c2" -eq $((c1 + 1))
check "the pool counted the cancellation" test "$(counter cancelled)" -ge 1

# 5b. /files/<path>
code() { # code REL: the status of GET /files/REL (sent as is); bodies kept
    get --path-as-is -o "$work/fbody" -w '%{http_code}' "$base/files/$1"
    cat "$work/fbody" >>"$work/fbodies"
}
fds_before=$(ls "/proc/$pid/fd" | wc -l)
check "a file is served byte for byte" \
    bash -c "curl -s --max-time 10 '$base/files/hello.txt' | cmp -s - '$root/hello.txt'"
check "a binary file too" \
    bash -c "curl -s --max-time 10 '$base/files/blob.bin' | cmp -s - '$root/blob.bin'"
check "with its Content-Length" \
    bash -c "curl -s --max-time 10 -D - -o /dev/null '$base/files/blob.bin' | tr -d '\r' | grep -qx 'Content-Length: 300000'"
check "a file in a subdirectory" test "$(get "$base/files/sub/inner.txt")" = inner
check "a symlink inside the directory is followed" test "$(get "$base/files/link_in")" = "hello, files"
check "a missing file is 404" test "$(code missing.txt)" = 404
check "a missing directory is 404" test "$(code nowhere/x)" = 404
check "../ is 403" test "$(code ../secret)" = 403
check "sub/../../ is 403" test "$(code sub/../../secret)" = 403
check "encoded %2e%2e is 403" test "$(code %2e%2e/secret)" = 403
check "encoded %2E%2E%2F is 403" test "$(code sub%2F%2E%2E%2F%2E%2E%2Fsecret)" = 403
check "./ is 403" test "$(code ./hello.txt)" = 403
check "an absolute path is 403" test "$(code /etc/passwd)" = 403
check "an encoded absolute path is 403" test "$(code %2Fetc%2Fpasswd)" = 403
check "an encoded NUL is 403" test "$(code hello.txt%00.png)" = 403
check "a symlink to a file outside is 403" test "$(code link_out)" = 403
check "a symlink to a directory outside is 403" test "$(code dir_out/secret)" = 403
check "a relative symlink climbing out is 403" test "$(code sub/up_out)" = 403
check "a directory is 403" test "$(code sub)" = 403
check "no answer carried the secret" bash -c "! grep -q '^secret$' '$work/fbodies'"
check "bad encoding is 400" test "$(code %zz)" = 400
check "the server counted its refusals" test "$(counter forbidden)" -ge 12
# Under load: /hash fills the 1-thread, 4-slot pool while files are asked for.
urls=()
for i in $(seq 40); do urls+=(-o /dev/null "$base/hash?rounds=200000&i=$i"); done
curl -s --no-progress-meter --max-time 60 --parallel --parallel-max 40 --parallel-immediate \
    "${urls[@]}" >/dev/null 2>&1 &
hashes=$!
furls=()
for i in $(seq 60); do furls+=(-o /dev/null "$base/files/big.bin?i=$i"); done
curl -s --no-progress-meter --max-time 60 --parallel --parallel-max 30 --parallel-immediate \
    -w '%{http_code} %header{retry-after} %{size_download}\n' "${furls[@]}" \
    >"$work/fcodes" 2>/dev/null
wait "$hashes"
# And without the /hash load, many at once: each whole or shed, some whole.
gurls=()
for i in $(seq 30); do gurls+=(-o /dev/null "$base/files/big.bin?j=$i"); done
curl -s --no-progress-meter --max-time 60 --parallel --parallel-max 30 --parallel-immediate \
    -w '%{http_code} %header{retry-after} %{size_download}\n' "${gurls[@]}" \
    >>"$work/fcodes" 2>/dev/null
ftotal=$(wc -l <"$work/fcodes")
f200=$(grep -c '^200  3000000$' "$work/fcodes")
f503=$(grep -c '^503 1 ' "$work/fcodes")
check "every file request answered ($ftotal of 90)" test "$ftotal" -eq 90
check "each whole (200, all bytes) or shed (503 + Retry-After): $f200 + $f503" \
    test $((f200 + f503)) -eq 90
check "some file requests were shed under load ($f503)" test "$f503" -gt 0
check "some were served whole ($f200)" test "$f200" -gt 0
wrk -t1 -c16 -d2s --timeout 5s "$base/files/hello.txt" >"$work/wrk_files" 2>&1
check "wrk on /files ran" grep -q 'requests in' "$work/wrk_files"
check "files still served after the load" test "$(get "$base/files/sub/inner.txt")" = inner
fds_after=$(ls "/proc/$pid/fd" | wc -l)
for _ in $(seq 50); do
    [ "$fds_after" -le "$fds_before" ] && break
    sleep 0.1
    fds_after=$(ls "/proc/$pid/fd" | wc -l)
done
check "no descriptor left open by /files ($fds_before -> $fds_after)" \
    test "$fds_after" -le "$fds_before"

# 6. SIGTERM while a /slow stream runs: it finishes, then the server exits 0.
get -N --max-time 20 "$base/slow?seconds=2" >"$work/slow2" &
slow=$!
sleep 0.5
kill -TERM "$pid"
sleep 0.3
get -o /dev/null --max-time 2 "$base/"
rc=$?
check "no new connections after SIGTERM (curl rc $rc)" test "$rc" -eq 7
wait "$slow"
rc=$?
check "the stream in flight finished (curl rc $rc)" test "$rc" -eq 0
check "with all its chunks" grep -q 'tick 2 of 2' "$work/slow2"
status=timeout
for _ in $(seq 100); do
    if ! kill -0 "$pid" 2>/dev/null; then
        wait "$pid"
        status=$?
        pid=
        break
    fi
    sleep 0.1
done
check "the server exited with status 0 (got $status)" test "$status" = 0
check "and printed its final statistics" grep -q '^final statistics:' "$work/out"
finish
