#!/usr/bin/env bash
# The watch threads' cost per operation (issue 38, item 2). JobWatch
# (`dk-job-watch`) and the same-host heartbeat (`dk-heartbeat`) are
# process-wide, so a group cannot turn them off beside a baseline as
# collective_bench --without does for the flight recorder: whole jobs
# alternate instead, with the threads ("on"), without them
# (DISTKIT_BENCH_WITHOUT=watch_threads, "off") and with them again ("on2":
# the noise control), for ROUNDS rounds. Prints, per op and size, the median
# over rounds of each arm's time per call and the ratios on/off (above 1: the
# threads cost that much) and on/on2 (the run's own noise).
#   bazel build //tools/dkbench:collective_bench //tools/distrun
#   tools/dkbench/watch_threads_ab.sh [ROUNDS] [WORLD_SIZE] [SHM]
set -euo pipefail
rounds=${1:-5} ws=${2:-2} shm=${3:-1}
root=$(cd "$(dirname "$0")/../.." && pwd)
bin="$root/bazel-bin"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((r = 0; r < rounds; r++)); do
  for arm in on off on2; do
    without=""
    [ "$arm" = off ] && without=watch_threads
    DISTKIT_SHM=$shm DISTKIT_BENCH_WITHOUT=$without timeout 600 \
      "$bin/tools/distrun/distrun" --nproc-per-node "$ws" --master-port 0 \
      --cpu-bind core -- "$bin/tools/dkbench/collective_bench" \
      --ops all_reduce,broadcast,all_gather --min-bytes 4 --max-bytes 16777216 \
      --batches 21 2>/dev/null |
      sed 's/^\[rank0\]: //' | grep '^distkit,' | sed "s/^/$arm,$r,/" >>"$out/all.csv"
  done
done
/usr/bin/python3 - "$out/all.csv" "$ws" "$shm" <<'PY'
import collections, statistics, sys
times = collections.defaultdict(list)  # (arm, op, bytes) -> per-round us
for line in open(sys.argv[1]):
    arm, _, _, op, _, size, us = line.strip().split(",")
    times[(arm, op, int(size))].append(float(us))
print(f"watch threads on/off, world size {sys.argv[2]}, "
      f"{'shared memory' if sys.argv[3] == '1' else 'TCP'}: median us per call over rounds")
print(f"{'op':<12}{'bytes':>10}{'on':>10}{'off':>10}{'on2':>10}{'on/off':>9}{'on/on2':>9}")
for op, size in sorted({(k[1], k[2]) for k in times}):
    on, off, on2 = (statistics.median(times[(a, op, size)]) for a in ("on", "off", "on2"))
    print(f"{op:<12}{size:>10}{on:>10.2f}{off:>10.2f}{on2:>10.2f}{on / off:>9.3f}{on / on2:>9.3f}")
PY
