#!/usr/bin/env bash
# bash test/fuzz.sh FUZZ_API [SECONDS]
#
# Fuzz the public API for a bounded time (SECONDS, else TERN_FUZZ_SECONDS,
# else 60) starting from the committed corpus (test/fuzz/corpus). New
# inputs go to a scratch directory, so the source tree is never written.
# A finding (a broken invariant, an ASan or UBSan report, a leak, a
# timeout) leaves its input beside the executable as fuzz-crash-*,
# fuzz-leak-* or fuzz-timeout-* and fails. FUZZ_API is the fuzz_api
# executable of a -Dfuzz=true build (see test/fuzz/meson.build).
# Ends with "1 passed, 0 failed" or "0 passed, 1 failed".
set -uo pipefail
fuzzer=${1:?usage: fuzz.sh FUZZ_API [SECONDS]}
seconds=${2:-${TERN_FUZZ_SECONDS:-60}}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
artifacts=$(cd "$(dirname "$fuzzer")" && pwd)
work=$(mktemp -d)
# UBSan findings are crashes too, and leaks are checked after every input.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
trap 'rm -rf "$work"' EXIT

# -timeout: one input must never take this long (the harness bounds each
# input to milliseconds); -rss_limit_mb: far above the ~400 MB it uses.
# -error_exitcode: libFuzzer's own default, 77, is the code meson reads
# as "skipped", so a finding would pass as a skip. The frames of a
# report's stack (" #3 0x... in fn file:line") are kept with the rest.
"$fuzzer" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 -max_len=1024 \
    -error_exitcode=1 -timeout_exitcode=1 \
    -print_final_stats=1 -artifact_prefix="$artifacts/fuzz-" \
    "$work" "$here/fuzz/corpus" 2>&1 | grep -E '^(#[0-9]+ +(INITED|DONE)|Done|stat::|==|SUMMARY|fuzz_api:|artifact_prefix|Test unit written|Direct leak|Indirect leak)|runtime error|#[0-9]+ (0x[0-9a-f]+ )?in '
status=${PIPESTATUS[0]}
if [ "$status" -eq 0 ]; then
    echo "1 passed, 0 failed"
else
    echo "fuzz_api failed (exit $status); the input is in $artifacts/fuzz-*"
    echo "0 passed, 1 failed"
fi
exit "$status"
