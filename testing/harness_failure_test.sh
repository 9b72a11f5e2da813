#!/usr/bin/env bash
# The harness must fail a test when a rank fails (with that rank's code, naming
# it) and when ranks hang past the time bound (124), and never hang itself.
set -uo pipefail
runner="$1"
distrun="$2"
probe="$3"

out=$("$runner" "$distrun" 3 60 -- "$probe" fail 2 9 2>&1)
code=$?
echo "$out"
[ "$code" -eq 9 ] || { echo "FAIL: expected exit 9 from a failing rank, got $code"; exit 1; }
grep -q "rank 2 (pid [0-9]*) exited with code 9" <<<"$out" || { echo "FAIL: rank not named"; exit 1; }

start=$(date +%s)
out=$("$runner" "$distrun" 2 2 -- "$probe" hang 2>&1)
code=$?
echo "$out"
[ "$code" -eq 124 ] || { echo "FAIL: expected 124 on timeout, got $code"; exit 1; }
grep -q "timed out after 2s; stopping rank(s) 0, 1" <<<"$out" || { echo "FAIL: no timeout message"; exit 1; }
[ $(( $(date +%s) - start )) -lt 20 ] || { echo "FAIL: the harness took too long to stop"; exit 1; }
echo "harness failure handling: ok"
