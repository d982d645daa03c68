#!/usr/bin/env bash
# consumers_test: an outside project finds and links an installed tern
# every way C users look: pkg-config, CMake's find_package
# (tern::tern, tern::tern_static) and meson's dependency('tern') — found
# installed through pkg-config, and as a subproject fallback — each with
# the shared and the static library. Installs the build into a temporary
# DESTDIR, builds test/consumer/hello.c each way, runs every program, and
# checks that the shared ones load libtern.so.0 and the static ones do not.
# Then builds the guide's whole server (docs/examples/hash_server.c) the
# same way and runs it against loopback with a scripted client.
#
# Given the build directory as $1. A tool that is missing (cc, cmake) makes
# its part say skipped, with the reason; the whole test is skipped (77)
# only when nothing could run. Closes with "N passed, N failed".
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: consumers_test.sh BUILD_DIR}" && pwd)
src=$root/test/consumer
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

passed=0
failed=0
skipped=0
ok() { passed=$((passed + 1)); }
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }
skip() { echo "skipped: $*"; skipped=$((skipped + 1)); }

dest=$work/root
if ! meson install -C "$build" --no-rebuild --destdir "$dest" --quiet >"$work/install.log" 2>&1; then
    cat "$work/install.log"
    fail "meson install into a DESTDIR"
    echo "$passed passed, $failed failed"
    exit 1
fi
prefix=$dest$(meson introspect "$build" --buildoptions |
    python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')
pcfile=$(find "$dest" -name tern.pc | head -1)
libdir=$(dirname "$(dirname "$pcfile")")
# The .pc names the final prefix; the sysroot maps it into the DESTDIR.
export PKG_CONFIG_SYSROOT_DIR=$dest
export PKG_CONFIG_PATH=$(dirname "$pcfile")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}

# check LABEL PROGRAM shared|static: it runs, and loads libtern.so.0 or not.
check() {
    local label=$1 prog=$2 kind=$3 out
    if [ ! -x "$prog" ]; then
        fail "$label: $prog was not built"
        return
    fi
    if ! out=$(LD_LIBRARY_PATH=$libdir "$prog" 2>&1); then
        fail "$label: $prog failed: $out"
        return
    fi
    local needs=no
    readelf -d "$prog" | grep -q 'NEEDED.*\[libtern\.so\.0\]' && needs=yes
    if [ "$kind" = shared ] && [ "$needs" = no ]; then
        fail "$label: $prog does not load libtern.so.0"
    elif [ "$kind" = static ] && [ "$needs" = yes ]; then
        fail "$label: $prog loads libtern.so.0 though linked statically"
    else
        echo "ok: $label ($kind): $out"
        ok
    fi
}

# The FNV-1a hash and size hash_server should answer for a file.
fnv1a() {
    python3 -c 'import sys
h = 14695981039346656037
data = open(sys.argv[1], "rb").read()
for b in data:
    h = ((h ^ b) * 1099511628211) % 2**64
print("%016x %d" % (h, len(data)))' "$1"
}

# One request to hash_server on 127.0.0.1:$1 for /$2; prints the reply.
# shellcheck disable=SC2016 # the inner shell expands its own arguments
http_get() {
    timeout 20 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" &&
        printf "GET /%s HTTP/1.0\r\nHost: localhost\r\n\r\n" "$2" >&3 && cat <&3' _ "$1" "$2"
}

# Serve a directory with the built hash_server ($hs), ask it for files,
# read its counts, stop it; then run its own test.
hash_server_check() {
    local files=$work/hs-files fifo=$work/hs-out pid line port reply want
    mkdir -p "$files"
    printf 'hello, tern\n' >"$files/hello.txt"
    head -c 300000 /dev/urandom >"$files/random.bin"
    mkfifo "$fifo"
    LD_LIBRARY_PATH=$libdir "$hs" 0 "$files" >"$fifo" 2>"$work/hs-err.log" &
    pid=$!
    exec 4<"$fifo"
    if ! read -r -t 20 -u 4 line || [[ ! "$line" =~ ^listening\ on\ 127\.0\.0\.1:([0-9]+)$ ]]; then
        fail "hash_server: no 'listening on' line (got: ${line:-nothing}):" \
            "$(cat "$work/hs-err.log")"
        kill -KILL "$pid" 2>/dev/null
        exec 4<&-
        return
    fi
    port=${BASH_REMATCH[1]}
    for name in hello.txt random.bin; do
        reply=$(http_get "$port" "$name" | tr -d '\r')
        want=$(fnv1a "$files/$name")
        if [[ "$reply" == "HTTP/1.0 200 OK"*$'\n\n'"$want" ]]; then
            ok
        else
            fail "hash_server: /$name answered '$reply', not 200 and '$want'"
        fi
    done
    reply=$(http_get "$port" missing.txt | tr -d '\r')
    if [[ "$reply" == "HTTP/1.0 404 Not Found"* ]]; then ok; else fail "hash_server: '$reply'"; fi
    reply=$(http_get "$port" ..%2Fetc | tr -d '\r')
    if [[ "$reply" == "HTTP/1.0 400 Bad Request"* ]]; then ok; else fail "hash_server: '$reply'"; fi
    kill -USR1 "$pid"
    want="stats: 4 connections, 2 served, 1 not found, 0 shed, 1 failed;"
    if read -r -t 20 -u 4 line && [[ "$line" == "$want"* ]]; then
        echo "ok: hash_server: $line"
        ok
    else
        fail "hash_server: SIGUSR1 printed '${line:-nothing}', not '$want ...'"
    fi
    kill -TERM "$pid"
    # Its output ends when it exits: a read with a time limit waits for that.
    local rc=0
    read -r -t 20 -u 4 line || rc=$?
    exec 4<&-
    if [ "$rc" -eq 0 ] || [ "$rc" -gt 128 ]; then
        fail "hash_server: still running after SIGTERM (its output: '${line:-}')"
        kill -KILL "$pid"
        wait "$pid"
    elif wait "$pid"; then
        ok
    else
        fail "hash_server: exited with status $? after SIGTERM: $(cat "$work/hs-err.log")"
    fi
    if line=$(LD_LIBRARY_PATH=$libdir timeout 60 "$hs" 2>&1) && [[ "$line" == *"hash_server: ok" ]]
    then
        echo "ok: hash_server (its own test, with a child process)"
        ok
    else
        fail "hash_server: its own test: $line"
    fi
}

cc=${CC:-cc}
# 1. pkg-config.
if command -v pkg-config >/dev/null && command -v "$cc" >/dev/null; then
    # shellcheck disable=SC2046
    "$cc" -std=c11 -o "$work/pc_shared" "$src/hello.c" $(pkg-config --cflags --libs tern) &&
        check pkg-config "$work/pc_shared" shared || fail "pkg-config: shared build"
    # shellcheck disable=SC2046
    "$cc" -std=c11 -o "$work/pc_static" "$src/hello.c" $(pkg-config --cflags tern) \
        $(pkg-config --libs-only-L tern) -Wl,-Bstatic -ltern -Wl,-Bdynamic \
        $(pkg-config --static --libs tern | sed 's/-ltern\b//') &&
        check pkg-config "$work/pc_static" static || fail "pkg-config: static build"
else
    skip "pkg-config: pkg-config or $cc not found"
fi

# 2. CMake's find_package.
if command -v cmake >/dev/null; then
    # Without the sysroot: tern's config finds itself by its own path, and
    # liburcu's .pc (outside the DESTDIR) must keep its real paths.
    if env -u PKG_CONFIG_SYSROOT_DIR cmake -S "$src" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
        >"$work/cmake.log" 2>&1 &&
        cmake --build "$work/cmake" >>"$work/cmake.log" 2>&1; then
        check cmake "$work/cmake/hello_shared" shared
        check cmake "$work/cmake/hello_static" static
    else
        cat "$work/cmake.log"
        fail "cmake: find_package(tern) and build"
    fi
else
    skip "cmake: cmake not found (Debian: cmake)"
fi

# 3. meson, finding the installed tree through pkg-config.
if meson setup "$work/meson-installed" "$src" --wrap-mode=nofallback >"$work/meson1.log" 2>&1 &&
    ninja -C "$work/meson-installed" >>"$work/meson1.log" 2>&1; then
    check meson-installed "$work/meson-installed/hello_shared" shared
    check meson-installed "$work/meson-installed/hello_static" static
else
    cat "$work/meson1.log"
    fail "meson: dependency('tern') from the installed tree"
fi

# 4. meson, tern as a subproject (the fallback, forced). A copy of the
# sources, built without optimisation to keep the check quick.
mkdir -p "$work/sub/subprojects/tern"
cp "$src/meson.build" "$src/hello.c" "$work/sub/"
(cd "$root" && tar cf - --exclude='./build*' --exclude=./.git --exclude=./subprojects .) |
    tar xf - -C "$work/sub/subprojects/tern"
if meson setup "$work/sub/b" "$work/sub" --force-fallback-for=tern --buildtype=plain \
    >"$work/meson2.log" 2>&1 && ninja -C "$work/sub/b" >>"$work/meson2.log" 2>&1; then
    check meson-subproject "$work/sub/b/hello_shared" shared
    check meson-subproject "$work/sub/b/hello_static" static
else
    tail -30 "$work/meson2.log"
    fail "meson: dependency('tern') as a subproject"
fi

# 5. A whole program from the guide, docs/examples/hash_server.c, built
# with pkg-config against the installed tree alone (the source tree's
# headers are not on its path), then run against loopback: a scripted
# client's answers are checked against hashes computed here, SIGUSR1 must
# print the counts and SIGTERM end it with status 0. Last, its own test
# mode, which runs a copy of itself as a child process through tern.
# Every wait is bounded: a read with a time limit on the server's output.
example=$root/docs/examples/hash_server.c
if command -v pkg-config >/dev/null && command -v "$cc" >/dev/null && command -v python3 >/dev/null
then
    hs=$work/hash_server
    # shellcheck disable=SC2046
    if ! "$cc" -std=c11 -Wall -Werror -o "$hs" "$example" $(pkg-config --cflags --libs tern) \
        >"$work/hs-build.log" 2>&1; then
        cat "$work/hs-build.log"
        fail "hash_server: build against the installed tree"
    else
        hash_server_check
    fi
else
    skip "hash_server: pkg-config, $cc or python3 not found"
fi

echo "$passed passed, $failed failed${skipped:+, $skipped skipped}"
[ "$failed" -eq 0 ] || exit 1
[ "$passed" -gt 0 ] || exit 77
