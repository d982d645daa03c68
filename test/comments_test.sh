#!/usr/bin/env bash
# comments_test: comments cannot name what the code no longer has — every
# tern_/tern__ identifier and every source path a comment names must exist
# (test/comment_names.py) — and the product gives reasons, not citations of
# issues, commits, people, sessions or machines (test/citations_check.py).
# Given the build directory as $1 (unused). Closes with "N passed, N failed".
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
passed=0
failed=0
for check in comment_names.py citations_check.py; do
    out=$(python3 "$here/$check" "$root")
    printf '%s\n' "$out" | grep -v -E '^[0-9]+ passed, [0-9]+ failed$'
    counts=$(printf '%s\n' "$out" | tail -1)
    if [[ "$counts" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
        passed=$((passed + BASH_REMATCH[1]))
        failed=$((failed + BASH_REMATCH[2]))
    else
        echo "FAIL: test/$check did not finish: $counts"
        failed=$((failed + 1))
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
