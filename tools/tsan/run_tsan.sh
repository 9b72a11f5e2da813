#!/usr/bin/env bash
# ThreadSanitizer over the concurrent parts: the store (client, server, the
# in-process HashStore), async work and the op queue (work, flight recorder,
# collectives, abort and the two-thread rule), and the gradient reducer
# (buckets reduced asynchronously during backward). Abseil's locks come from
# a TSan build of Debian's own Abseil (build_absl_tsan.sh), so TSan sees
# them. Extra arguments go to `bazel test` (e.g. more targets, --runs_per_test).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
set +e
lib="$(tools/tsan/build_absl_tsan.sh)"
built=$?
set -e
if [ "$built" -eq 3 ]; then
  echo "run_tsan: SKIPPED: no TSan build of Abseil (Debian's source could not be fetched)"
  exit 0
elif [ "$built" -ne 0 ]; then
  echo "run_tsan: FAIL: building Abseil with TSan failed" >&2
  exit 1
fi
TARGETS=(
  //cc/store:hash_store_test
  //cc/store:tcp_store_test
  //cc/comm:comm_test
  //cc/group:flight_recorder_test
  //cc/group:op_queue_test
  //cc/group:collectives_test_ws2
  //cc/group:fault_abort_test
  //cc/group:fault_abort_hosts_test
  //cc/group:fault_threads_test
  //cc/parallel:grad_reducer_test
)
options="halt_on_error=1:second_deadlock_stack=1:history_size=4"
options+=":suppressions=$PWD/tools/tsan/suppressions.txt"

# First the configuration itself: a real race is reported, and accesses
# under absl::Mutex are not.
bazel build --config=tsan //tools/tsan:tsan_canary
canary="$(bazel info --config=tsan bazel-bin)/tools/tsan/tsan_canary"
if LD_LIBRARY_PATH="$lib" TSAN_OPTIONS="$options" "$canary" race \
    >/tmp/tsan_canary.$$ 2>&1 ||
    ! grep -q "WARNING: ThreadSanitizer: data race" /tmp/tsan_canary.$$; then
  cat /tmp/tsan_canary.$$
  echo "run_tsan: FAIL: TSan did not report the canary's race" >&2
  exit 1
fi
if ! LD_LIBRARY_PATH="$lib" TSAN_OPTIONS="$options" "$canary" mutex \
    >/tmp/tsan_canary.$$ 2>&1; then
  cat /tmp/tsan_canary.$$
  echo "run_tsan: FAIL: TSan does not see absl::Mutex ($lib)" >&2
  exit 1
fi
rm -f /tmp/tsan_canary.$$
echo "run_tsan: the canary's race is reported, its absl::Mutex is seen"

# DISTKIT_TEST_SWEEP=branches: the collectives check runs every size that
# takes another branch, not the whole size and dtype sweep of the plain run.
exec bazel test --config=tsan --test_env=LD_LIBRARY_PATH="$lib" \
  --test_env=TSAN_OPTIONS="$options" --test_env=DISTKIT_TEST_SWEEP=branches \
  "${TARGETS[@]}" "$@"
