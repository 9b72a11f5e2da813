#!/usr/bin/env bash
# Fails when any C or C++ file tracked by git is not clang-format clean
# (Google style, .clang-format at the root). Run by //tools/lint:clang_format_test
# and usable by hand: tools/lint/clang_format_check.sh [--fix]
set -euo pipefail

# Under Bazel the argument is the runfiles path of the root .clang-format, a
# symlink into the source tree; otherwise this script's own checkout.
if [ -n "${1:-}" ] && [ "$1" != "--fix" ]; then
  root=$(dirname "$(readlink -f "$1")")
  shift
else
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
fi
fix="${1:-}"

clang_format=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$clang_format" ]; then
  echo "clang-format-14 not found; run tools/bootstrap.sh" >&2
  exit 1
fi

cd "$root"
mapfile -t files < <(git ls-files -co --exclude-standard -- '*.cc' '*.h' '*.c' '*.cpp' | \
  while read -r f; do [ -f "$f" ] && echo "$f"; done)
if [ "$fix" = "--fix" ]; then
  "$clang_format" -i --style=file "${files[@]}"
  exit 0
fi
# One process for every file (one per file took 38 s of a loaded CI machine):
# --dry-run names each file that needs formatting in a warning; any other
# failure (a file it cannot read or parse) is its exit status.
report=$("$clang_format" --style=file --dry-run "${files[@]}" 2>&1) || {
  echo "$report" | head -20
  echo "clang-format failed" >&2
  exit 1
}
mapfile -t bad < <(echo "$report" |
  sed -n 's/^\(.*\):[0-9]*:[0-9]*: warning: code should be clang-formatted.*/\1/p' | sort -u)
if ((${#bad[@]})); then
  echo "These files are not clang-format clean (fix: tools/lint/clang_format_check.sh --fix):"
  printf '  %s\n' "${bad[@]}"
  "$clang_format" --style=file --dry-run "${bad[0]}" 2>&1 | head -20
  exit 1
fi
echo "clang-format: ${#files[@]} files clean"
