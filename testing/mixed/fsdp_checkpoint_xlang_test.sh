#!/usr/bin/env bash
# A sharded FSDP checkpoint crosses languages and world sizes (the format of
# docs/architecture.md, "Sharded checkpoints"): LibTorch's
# FullyShardedDataParallel saves at 3 ranks, Python's distkit.fsdp loads it
# at 2 and checks every parameter, changes them and saves at 2, and C++
# loads that at 3 and checks. Three short jobs, one after the other.
set -euo pipefail
distrun="$1"
cpp="$2"
python="$3"
dir="${TEST_TMPDIR:-/tmp}/fsdp_xlang"
rm -rf "$dir"
mkdir -p "$dir/from_cpp" "$dir/from_python"
run() {
  local n="$1"
  shift
  # A free port: 29500 (the default) may be another job's or test's.
  "$distrun" --nproc-per-node "$n" --master-port 0 --timeout 60 -- "$@"
}
run 3 "$cpp" --xlang-save "$dir/from_cpp"
test "$(ls "$dir/from_cpp" | wc -l)" -eq 3
run 2 "$python" "$dir/from_cpp" "$dir/from_python"
test "$(ls "$dir/from_python" | wc -l)" -eq 2
run 3 "$cpp" --xlang-load "$dir/from_python"
echo "fsdp_checkpoint_xlang_test: C++ (3 ranks) -> Python (2) -> C++ (3) passed"
