#!/usr/bin/env bash
# consumer_deps_test: what an outside project pays for taking tern.
#
# 1. CMake: a project that links only the shared library (tern::tern)
#    configures, builds and runs without pkg-config and without liburcu's
#    development files (the static library's link needs them, the shared
#    one does not); a project that asks for the static library
#    (COMPONENTS static) without them is refused at configure time.
# 2. meson: tern taken as a subproject defines the library and nothing of
#    its own examples or demo (no executable, no probe for what they use).
#
# Given the build directory as $1. A missing tool (cc, cmake) makes its
# part say skipped; the whole test is skipped (77) only when nothing ran.
# Closes with "N passed, N failed".
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: consumer_deps_test.sh BUILD_DIR}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

passed=0
failed=0
skipped=0
ok() { echo "ok: $*"; passed=$((passed + 1)); }
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }
skip() { echo "skipped: $*"; skipped=$((skipped + 1)); }

# 1. CMake, from an install into a DESTDIR.
if command -v cmake >/dev/null; then
    dest=$work/root
    if meson install -C "$build" --no-rebuild --destdir "$dest" --quiet >"$work/install.log" 2>&1
    then
        prefix=$dest$(meson introspect "$build" --buildoptions | python3 -c '
import json, sys
print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')
        libdir=$(dirname "$(find "$dest" -name 'libtern.so.0' | head -1)")
        mkdir -p "$work/shared" "$work/static" "$work/empty"
        cp "$root/test/consumer/hello.c" "$work/shared/"
        cp "$root/test/consumer/hello.c" "$work/static/"
        cat >"$work/shared/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.13)
project(tern_shared_only C)
find_package(tern 0.1 REQUIRED)
add_executable(hello_shared hello.c)
target_link_libraries(hello_shared PRIVATE tern::tern)
EOF
        cat >"$work/static/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.13)
project(tern_static C)
find_package(tern 0.1 REQUIRED COMPONENTS static)
add_executable(hello_static hello.c)
target_link_libraries(hello_static PRIVATE tern::tern_static)
EOF
        # No liburcu (pkg-config finds nothing), then no pkg-config at all.
        i=0
        for how in "PKG_CONFIG_LIBDIR=$work/empty PKG_CONFIG_PATH=" \
                   "-DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON"; do
            i=$((i + 1))
            envs=() args=()
            case $how in
            -D*) args=("$how") ;;
            *) read -ra envs <<<"$how" ;;
            esac
            b=$work/shared-b$i
            if env -u PKG_CONFIG_SYSROOT_DIR "${envs[@]}" cmake -S "$work/shared" -B "$b" \
                -DCMAKE_PREFIX_PATH="$prefix" "${args[@]}" >"$work/cmake$i.log" 2>&1 &&
                cmake --build "$b" >>"$work/cmake$i.log" 2>&1 &&
                LD_LIBRARY_PATH=$libdir "$b/hello_shared" >>"$work/cmake$i.log" 2>&1; then
                ok "cmake: tern::tern alone, $how"
            else
                tail -20 "$work/cmake$i.log"
                fail "cmake: tern::tern alone needs what only the static library needs ($how)"
            fi
        done
        if env -u PKG_CONFIG_SYSROOT_DIR PKG_CONFIG_LIBDIR="$work/empty" PKG_CONFIG_PATH= \
            cmake -S "$work/static" -B "$work/static-b" -DCMAKE_PREFIX_PATH="$prefix" \
            >"$work/cmake-static.log" 2>&1; then
            fail "cmake: COMPONENTS static was found without liburcu-qsbr"
        else
            ok "cmake: COMPONENTS static without liburcu-qsbr is refused at configure time"
        fi
    else
        cat "$work/install.log"
        fail "meson install into a DESTDIR"
    fi
else
    skip "cmake: cmake not found (Debian: cmake)"
fi

# 2. meson, tern as a subproject: configure only, then ask what it defines.
mkdir -p "$work/sub/subprojects/tern"
cp "$root/test/consumer/meson.build" "$root/test/consumer/hello.c" "$work/sub/"
(cd "$root" && tar cf - --exclude='./build*' --exclude=./.git --exclude=./subprojects .) |
    tar xf - -C "$work/sub/subprojects/tern"
if meson setup "$work/sub/b" "$work/sub" --force-fallback-for=tern --buildtype=plain \
    >"$work/meson.log" 2>&1; then
    extra=$(meson introspect "$work/sub/b" --targets | python3 -c '
import json, sys
for t in json.load(sys.stdin):
    if t["type"] == "executable" and "subprojects/tern/" in t["defined_in"]:
        print(t["name"])')
    if [ -n "$extra" ]; then
        fail "meson subproject: tern builds executables of its own:" $extra
    else
        ok "meson subproject: the library only"
    fi
else
    tail -30 "$work/meson.log"
    fail "meson: dependency('tern') as a subproject"
fi

echo "$passed passed, $failed failed${skipped:+, $skipped skipped}"
[ "$failed" -eq 0 ] || exit 1
[ "$passed" -gt 0 ] || exit 77
