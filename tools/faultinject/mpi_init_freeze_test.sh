#!/usr/bin/env bash
# A rank frozen before MPI's init (which has no timeout of its own): the
# other ranks' dk_init must fail with a clear DEADLINE_EXCEEDED within the
# init timeout and the job end (mpirun stops the rest once one rank has
# failed), instead of every rank waiting forever in MPI_Init_thread.
# Usage: mpi_init_freeze_test.sh FAULT_RANK_BINARY
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
# The first rank whose init times out reports it and exits; mpirun then ends
# the job, so the other may be stopped before it prints its own report.
reported=$(grep -c "^\[[0-9]*,[01]\]<stderr>:init failed: .*MPI_Init_thread did not complete within 3s" "$session/out.txt" || true)
if [ "$reported" -lt 1 ]; then
  echo "FAIL: no rank reported the frozen init"
  fail=1
fi
if grep -q "joined" "$session/out.txt"; then
  echo "FAIL: a rank joined a job whose rank 2 never initialized"
  fail=1
fi
if [ "$took_ms" -gt 10000 ]; then
  echo "FAIL: took ${took_ms} ms (bound: timeout 3 s + 7 s)"
  fail=1
fi
[ "$fail" -eq 0 ] && echo "PASS: the job failed clearly within the init timeout ($reported rank(s) reported before mpirun ended it)"
exit "$fail"
