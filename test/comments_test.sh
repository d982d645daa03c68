#!/usr/bin/env bash
# comments_test: comments cannot name what the code no longer has — every
# tern_/tern__ identifier and every source path a comment names must exist
# (test/comment_names.py). Given the build directory as $1 (unused).
here=$(cd "$(dirname "$0")" && pwd)
exec python3 "$here/comment_names.py" "$(dirname "$here")"
