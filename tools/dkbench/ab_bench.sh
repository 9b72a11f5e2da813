#!/usr/bin/env bash
# Two or more builds of collective_bench, alternated over fresh jobs: for
# changes whose effect (5-30% at 4 B) is smaller than what one job's time
# varies by on a shared machine. Each round runs every binary once, as
#   distrun --nproc-per-node WS --cpu-bind core -- BIN --ops OPS
#     --min-bytes MIN --max-bytes MAX --batches 21
# and the table gives, per point, each binary's median time over the rounds
# and the first binary's median over it (> 1: faster than the first).
#   tools/dkbench/ab_bench.sh ROUNDS WS OPS MIN MAX BIN1 BIN2 [BIN...]
# (copy each build's bazel-bin/tools/dkbench/collective_bench aside first).
set -euo pipefail
if [ $# -lt 7 ]; then
  sed -n '2,10p' "$0" >&2
  exit 2
fi
rounds=$1 ws=$2 ops=$3 min=$4 max=$5
shift 5
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
distrun="$root/bazel-bin/tools/distrun/distrun"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
for _ in $(seq "$rounds"); do
  for bin in "$@"; do
    "$distrun" --nproc-per-node "$ws" --cpu-bind core -- "$bin" --ops "$ops" \
      --min-bytes "$min" --max-bytes "$max" --batches 21 2>&1 |
      { grep -o 'distkit,.*' || echo "ab_bench: no result from $bin" >&2; } |
      sed "s|^|$bin,|" >>"$out"
  done
done
python3 - "$out" "$@" <<'PY'
import collections, statistics, sys
times = collections.defaultdict(list)
for line in open(sys.argv[1]):
    binary, _, op, ws, nbytes, us = line.strip().rsplit(",", 5)
    times[(op, int(ws), int(nbytes), binary)].append(float(us))
binaries = sys.argv[2:]
print("op ws bytes", *binaries)
for point in sorted({k[:3] for k in times}):
    first = statistics.median(times[point + (binaries[0],)])
    cells = []
    for b in binaries:
        m = statistics.median(times[point + (b,)])
        cells.append(f"{m:.3f}({first / m:.2f})")
    print(*point, *cells)
PY
