#!/usr/bin/env bash
# A rank frozen before MPI's init (which has no timeout of its own): every
# other rank's dk_init must fail with a clear DEADLINE_EXCEEDED within the
# init timeout, and the job end, instead of waiting forever in
# MPI_Init_thread. Usage: mpi_init_freeze_test.sh FAULT_RANK_BINARY
set -euo pipefail
rank_bin="$1"
if ! command -v mpirun >/dev/null; then
  echo "SKIPPED: no mpirun on this machine"
  exit 0
fi
session="$(mktemp -d /tmp/dkmpi.XXXXXX)"
trap 'rm -rf "$session"' EXIT
export TMPDIR="$session" FAULT_LAUNCHER=mpi FAULT_BACKEND=mpi
export FAULT_TIMEOUT_MS=3000 FAULT_FREEZE_RANK=2 FAULT_STEPS=10
start=$(date +%s%N)
set +e
timeout --signal=KILL 30 mpirun --allow-run-as-root --oversubscribe \
  --mca btl self,vader,tcp --mca btl_tcp_if_include lo \
  --mca btl_vader_single_copy_mechanism none \
  --mca btl_vader_backing_directory "$session" --tag-output -np 3 \
  "$rank_bin" > "$session/out.txt" 2>&1
code=$?
set -e
took_ms=$(( ($(date +%s%N) - start) / 1000000 ))
cat "$session/out.txt"
echo "mpirun exit $code after ${took_ms} ms"
fail=0
[ "$code" -ne 0 ] && [ "$code" -ne 137 ] || { echo "FAIL: the job did not fail (or was killed by the 30 s guard)"; fail=1; }
for r in 0 1; do
  if ! grep -q "^\[[0-9]*,$r\]<stderr>:init failed: .*MPI_Init_thread did not complete within 3s" "$session/out.txt"; then
    echo "FAIL: rank $r did not report the frozen init"
    fail=1
  fi
done
if [ "$took_ms" -gt 10000 ]; then
  echo "FAIL: took ${took_ms} ms (bound: timeout 3 s + 7 s)"
  fail=1
fi
[ "$fail" -eq 0 ] && echo "PASS: every other rank failed clearly within the init timeout"
exit "$fail"
