#!/usr/bin/env bash
# The GPU machine's bundle (tools/gpu_bundle.sh), checked here on the CUDA +
# NCCL simulator (testing/gpu_sim) in a clean environment: `env -i` with only
# PATH, HOME, LD_LIBRARY_PATH (the bundle's lib/ alone), the two library
# variables and DKSIM_DEVICES, running the bundle's run.sh --quick. Passes
# when it exits 0 having run the multi-rank checks, the Python half imported
# distkit from the bundle's libdistkit.so, and nothing was SKIPPED but what
# needs torch with CUDA. Part of tools/run_all_tests.sh's gpu phase.
#
#   tools/gpu_bundle_test.sh   (GPU_BUNDLE_OPT: gpu_check's -O, default 0
#                               here, where nothing is timed)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bazel build //testing/gpu_sim:libdkgpusim.so
sim="$PWD/bazel-bin/testing/gpu_sim/libdkgpusim.so"
dir="$(mktemp -d "${TMPDIR:-/tmp}/distkit_gpu_bundle_test.XXXXXX")"
trap 'rm -rf "$dir"' EXIT
GPU_BUNDLE_OPT="${GPU_BUNDLE_OPT:-0}" tools/gpu_bundle.sh "$dir/bundle"
devices=3  # an odd world size; the gpu phase's own run takes 4
status=0
env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" LD_LIBRARY_PATH="$dir/bundle/lib" \
  DISTKIT_CUDART_LIBRARY="$sim" DISTKIT_NCCL_LIBRARY="$sim" DKSIM_DEVICES=$devices \
  "$dir/bundle/run.sh" --quick >"$dir/log" 2>&1 || status=$?
fail() {
  grep -v '^PASS' "$dir/log" | tail -60
  echo "gpu_bundle_test.sh: FAILED: $*"
  exit 1
}
((status == 0)) || fail "the bundle's run.sh exited $status"
grep -q "^PASS \[w$devices r$((devices - 1))\] all_reduce over 9 dtypes" "$dir/log" ||
  fail "no world size $devices all_reduce check passed"
grep -q "^PASS distkit .* imports with $dir/bundle/lib/libdistkit.so" "$dir/log" ||
  fail "the Python half did not use the bundle's libdistkit.so"
others=$(grep '^SKIPPED' "$dir/log" | grep -v '^SKIPPED the Python CUDA checks: torch' || true)
[[ -z "$others" ]] || fail "SKIPPED beyond the checks that need torch with CUDA: $others"
echo "gpu_bundle_test.sh: passed in a clean environment:" \
  "$(tail -1 "$dir/log" | sed 's/^gpu_check.sh: //')"
