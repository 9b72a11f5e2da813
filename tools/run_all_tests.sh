#!/usr/bin/env bash
# The README's test command and what CI (.ci/run) runs. Installs what is
# missing (tools/bootstrap.sh), then runs every phase even when an earlier one
# failed, and ends with a summary: each phase's wall time and result, the 10
# slowest test targets, and a warning when the whole passed its budget.
#
#   tools/run_all_tests.sh [bazel test options...]   (passed to the Bazel test
#                                                     phases: test, asan, tsan)
#
# Phases:
#   build     bazel build //... (everything, benchmarks and tools included)
#   test      bazel test //... (the vendoring test started first, beside it)
#   asan      the ABI (misuse tests included), the layers under it and the
#             training engines under AddressSanitizer + UndefinedBehaviorSanitizer
#   tsan      ThreadSanitizer over the concurrent parts (tools/tsan/run_tsan.sh)
#   fuzz      the libFuzzer targets side by side, 30 s (tools/fuzz/run_fuzzers.sh)
#   gpu       the GPU checks (tools/gpu_check.sh, built without Bazel) on
#             the CUDA + NCCL simulator (testing/gpu_sim, 4 devices, a quick
#             bandwidth table), the GPU machine's bundle on the simulator in
#             a clean environment (tools/gpu_bundle_test.sh), then on this
#             machine's GPU: without one that part builds and the phase is
#             SKIPPED (exit 77, neither passed nor failed) once the
#             simulator's parts passed; they fail it otherwise
#
# The budget (docs/testing.md): 20 minutes from a fresh clone on a 2-core
# machine. Past DISTKIT_TEST_BUDGET_S (default 1500 s, 25 minutes) the summary
# warns and names the phases over their own budgets; a warning, not a
# failure, because wall time on a shared machine is noisy.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

budget_s="${DISTKIT_TEST_BUDGET_S:-1500}"
# Each phase's share of the 20-minute budget on 2 cores, cold (seconds).
declare -A phase_budget=(
  [bootstrap]=120 [build]=390 [test]=420 [asan]=150 [tsan]=150 [fuzz]=50 [gpu]=40
)
report_dir="${DISTKIT_TEST_REPORT_DIR:-${TMPDIR:-/tmp}/distkit-tests.$$}"
mkdir -p "$report_dir"
rm -f "$report_dir"/*.bep.json "$report_dir/counts" "$report_dir/vendoring.result" \
  "$report_dir/failed_logs"  # a reused directory
phases=()
declare -A phase_secs phase_rc
total_start=$(date +%s)

run_phase() {  # name, command...
  local name="$1"
  shift
  echo "=== run_all_tests: phase '$name' ($(date +%T))"
  local start
  start=$(date +%s)
  "$@"
  local rc=$?
  phases+=("$name")
  phase_secs[$name]=$(($(date +%s) - start))
  phase_rc[$name]=$rc
  keep_failed_logs "$name"
  echo "=== run_all_tests: phase '$name' $(phase_result "$name" "$rc") in ${phase_secs[$name]} s"
}

# The gpu phase's 77: the simulator's checks passed, the real GPU's could
# not run here (no GPU): SKIPPED, neither a pass nor a failure. From any other
# phase 77 is a failure like any other code.
phase_result() {  # name, exit status
  if [ "$2" -eq 0 ]; then
    echo passed
  elif [ "$1" = gpu ] && [ "$2" -eq 77 ]; then
    echo "SKIPPED (no GPU here; see its output)"
  else
    echo "FAILED (exit $2)"
  fi
}

# The end of each failed test's log, kept when its phase ends (a later phase
# of the same configuration would overwrite the log) and printed just before
# the summary: CI shows only the output's last lines, and a failure named
# there without its reason cannot be looked into.
keep_failed_logs() {  # phase name
  [ -f "$report_dir/$1.bep.json" ] || return 0
  python3 - "$report_dir/$1.bep.json" "$1" >>"$report_dir/failed_logs" <<'PY'
import json, re, sys
from urllib.parse import unquote, urlparse
path, phase = sys.argv[1], sys.argv[2]
for line in open(path).read().splitlines():
    try:
        ev = json.loads(line)
    except ValueError:
        continue
    tr = ev.get("id", {}).get("testResult")
    result = ev.get("testResult", {})
    # A missing status is proto3's default, NO_STATUS: not a pass.
    if not tr or result.get("status", "NO_STATUS") == "PASSED":
        continue
    print("--- %s (%s): %s, shard %s, run %s, attempt %s:" % (
        tr["label"], phase, result.get("status", "NO_STATUS"), tr.get("shard", 1),
        tr.get("run", 1), tr.get("attempt", 1)))
    logs = [unquote(urlparse(f.get("uri", "")).path)
            for f in result.get("testActionOutput", []) if f.get("name") == "test.log"]
    try:
        lines = open(logs[0], errors="replace").read().splitlines()
    except (IndexError, OSError) as e:
        lines = ["(no log: %s)" % e]
    # The reason is often above the end (gtest's summary, the launcher's
    # wind-up): the first lines that say what failed, then the end.
    said = [t for t in lines[:-12] if re.search(
        r"Failure$|FAILED|Check failed|CHECK FAILED|FAIL:|Error|error:|Traceback|TIMEOUT", t)]
    for text in said[:8] + (["  ..."] if said else []) + lines[-12:]:
        print("  | " + text[:160])
PY
}

# A test's wall time from its build event (testResult), slowest first.
slowest_targets() {  # bep.json...
  python3 - "$@" <<'PY'
import json, os, sys
times = {}
statuses = {}
skipped = set()
tests = set()
for path in sys.argv[1:]:
    phase = os.path.basename(path).split(".")[0]
    try:
        lines = open(path).read().splitlines()
    except OSError:
        continue
    for line in lines:
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        # A test Bazel did not run because it cannot run on this machine
        # (target_compatible_with: the GPU tests without a GPU).
        configured = ev.get("id", {}).get("targetConfigured")
        if configured and "testSize" in ev.get("configured", {}):
            tests.add(configured["label"])
        done = ev.get("id", {}).get("targetCompleted")
        if (done and done["label"] in tests
                and ev.get("aborted", {}).get("reason") == "SKIPPED"):
            skipped.add("%s (%s)" % (done["label"], phase))
        tr = ev.get("id", {}).get("testResult")
        if not tr:
            continue
        result = ev.get("testResult", {})
        ms = int(result.get("testAttemptDurationMillis", 0))
        key = "%s (%s)" % (tr["label"], phase)
        times[key] = max(times.get(key, 0), ms)
        # The last attempt's status counts (there is one unless retried).
        statuses[key] = result.get("status", "NO_STATUS")
total = sum(times.values())
print("%d test runs in the Bazel phases, %.0f s of test time; the 10 slowest:"
      % (len(times), total / 1000))
for label, ms in sorted(times.items(), key=lambda kv: -kv[1])[:10]:
    print("  %7.1f s  %s" % (ms / 1000, label))
passed = sum(1 for s in statuses.values() if s == "PASSED")
for label in sorted(skipped):
    print("  SKIPPED    %s" % label)
with open(os.environ["DK_COUNTS_FILE"], "w") as f:
    f.write("%d %d %d\n" % (passed, len(statuses) - passed, len(skipped)))
PY
}

# Reads torch's and numpy's files (Python modules and libraries, about 200 MB)
# into the page cache. These machines reclaim page cache that has gone unused
# for a few minutes, and the first tests to import torch after that stalled
# on the disk for 40 s (two of them, side by side, at the start of the test
# phase). Reading is I/O, so it overlaps the CPU-bound build; before the test
# phase it is repeated, from memory when nothing was reclaimed.
warm_page_cache() {
  local dirs=()
  for d in /usr/lib/python3/dist-packages/torch /usr/lib/python3/dist-packages/numpy \
    /usr/lib/python3/dist-packages/functorch; do
    [ -d "$d" ] && dirs+=("$d")
  done
  { ((${#dirs[@]})) && find "${dirs[@]}" -type f -print0
    find /usr/lib/x86_64-linux-gnu -maxdepth 1 \( -name 'libtorch*' -o -name 'libc10*' \) \
      -type f -print0; } 2>/dev/null | xargs -0 -r cat >/dev/null 2>&1 || true
}

run_phase bootstrap tools/bootstrap.sh
warm_page_cache &
run_phase build bazel build //...
wait
warm_page_cache
# The vendoring test (a nested Bazel building distkit's C ABI in another
# workspace: about 140 s of one core) starts with the test phase, beside it,
# instead of wherever Bazel happens to schedule it: started last, it ran alone
# for two minutes while the other core idled. It is the same script the
# //testing/vendoring:vendoring_test target runs, so `bazel test //...` alone
# still runs it; here it is left out of that invocation and counted below.
run_vendoring() {
  local dir="$report_dir/vendoring"
  rm -rf "$dir"
  mkdir -p "$dir"
  local start rc
  start=$(date +%s)
  TEST_TMPDIR="$dir" bash testing/vendoring/vendoring_test.sh WORKSPACE \
    testing/vendoring/consumer.c >"$report_dir/vendoring.log" 2>&1
  rc=$?
  echo "$rc $(($(date +%s) - start))" >"$report_dir/vendoring.result"
  rm -rf "$dir"  # the nested Bazel's output root: hundreds of MB
}
test_phase() {
  run_vendoring &
  local vendoring=$!
  bazel test --build_event_json_file="$report_dir/test.bep.json" "$@" -- //... \
    -//testing/vendoring:vendoring_test
  local rc=$?
  wait "$vendoring"
  local vrc vsecs
  read -r vrc vsecs <"$report_dir/vendoring.result" || vrc=1
  echo "//testing/vendoring:vendoring_test (beside the phase) $([ "$vrc" -eq 0 ] &&
    echo PASSED || echo FAILED) in ${vsecs:-?} s"
  if [ "$vrc" -ne 0 ]; then
    tail -40 "$report_dir/vendoring.log"
    return 1
  fi
  return "$rc"
}
run_phase test test_phase "$@"
# Tests tagged no_asan (the same code with more ranks, or real hosts, whose
# runs under ASan outgrow their bounds) run in the test phase only.
run_phase asan bazel test --config=asan //capi/... //cc/core/... //cc/comm/... //cc/parallel/... \
  --test_tag_filters=-no_asan --build_event_json_file="$report_dir/asan.bep.json" "$@"
run_phase tsan tools/tsan/run_tsan.sh --build_event_json_file="$report_dir/tsan.bep.json" "$@"
run_phase fuzz tools/fuzz/run_fuzzers.sh 30
# The gpu phase: the simulator's runs must pass with nothing SKIPPED but
# what needs torch with CUDA; then the real GPU's run decides (0, or 77
# without one). Without CUDA's and NCCL's headers there is no simulator
# (@local_cuda's FOUND, the same test): only the real GPU's run.
gpu_phase() {
  local rc=0 log sim cuda="${CUDA_HOME:-/usr/local/cuda}"
  if [ -e "$cuda/include/cuda_runtime.h" ] && [ -e "$cuda/include/nccl.h" ]; then
    bazel build //testing/gpu_sim:libdkgpusim.so || return 1
    sim="$PWD/bazel-bin/testing/gpu_sim/libdkgpusim.so"
    log="$report_dir/gpu_sim.log"
    echo "--- gpu: tools/gpu_check.sh on the simulator"
    DISTKIT_CUDART_LIBRARY="$sim" DISTKIT_NCCL_LIBRARY="$sim" DKSIM_DEVICES=4 \
      GPU_CHECK_QUICK=1 GPU_CHECK_TIMEOUT_S=180 tools/gpu_check.sh 2>&1 | tee "$log"
    if [ "${PIPESTATUS[0]}" -ne 0 ]; then
      echo "gpu: FAILED on the simulator"
      rc=1
    elif grep '^SKIPPED' "$log" | grep -qv '^SKIPPED the Python CUDA checks: torch'; then
      echo "gpu: FAILED: on the simulator only what needs torch with CUDA may be SKIPPED"
      rc=1
    fi
    echo "--- gpu: the GPU machine's bundle on the simulator (tools/gpu_bundle_test.sh)"
    tools/gpu_bundle_test.sh || rc=1
  else
    echo "--- gpu: no simulator here (testing/gpu_sim needs $cuda/include's cuda_runtime.h and nccl.h)"
  fi
  echo "--- gpu: tools/gpu_check.sh on this machine's GPU"
  local real=0
  tools/gpu_check.sh || real=$?
  if [ "$rc" -ne 0 ]; then return "$rc"; fi
  return "$real"
}
run_phase gpu gpu_phase

total=$(($(date +%s) - total_start))
if [ -s "$report_dir/failed_logs" ]; then
  echo
  echo "=== run_all_tests: the failed tests (at most the first three)"
  awk '/^--- /{n++} n<=3' "$report_dir/failed_logs"
fi
echo
echo "=== run_all_tests: summary"
failed=()
for name in "${phases[@]}"; do
  result=$(phase_result "$name" "${phase_rc[$name]}")
  [[ "$result" == FAILED* ]] && failed+=("$name")
  printf '  %-10s %5d s  (budget %4d s)  %s\n' "$name" "${phase_secs[$name]}" \
    "${phase_budget[$name]}" "$result"
done
printf '  %-10s %5d s  (target 1200 s on 2 cores; warns past %d s)\n' total "$total" \
  "$budget_s"
DK_COUNTS_FILE="$report_dir/counts" slowest_targets "$report_dir"/*.bep.json
read -r tests_passed tests_failed tests_skipped < "$report_dir/counts" ||
  { tests_passed=0; tests_failed=0; tests_skipped=0; }
# The vendoring test, run beside the test phase, counts as one test.
if [ -f "$report_dir/vendoring.result" ]; then
  read -r vrc _ <"$report_dir/vendoring.result" || vrc=1
  if [ "$vrc" -eq 0 ]; then
    tests_passed=$((tests_passed + 1))
  else
    tests_failed=$((tests_failed + 1))
  fi
fi
# The fuzzers and the GPU check count as one check each.
for name in fuzz gpu; do
  case "$(phase_result "$name" "${phase_rc[$name]:-1}")" in
    passed) tests_passed=$((tests_passed + 1)) ;;
    SKIPPED*) tests_skipped=$((tests_skipped + 1)) ;;
    *) tests_failed=$((tests_failed + 1)) ;;
  esac
done
if [ "$total" -gt "$budget_s" ]; then
  grown=()
  for name in "${phases[@]}"; do
    [ "${phase_secs[$name]}" -gt "${phase_budget[$name]}" ] && grown+=("$name")
  done
  echo "WARNING: the test command took ${total} s, past its ${budget_s} s budget;" \
    "over their own budgets: ${grown[*]:-none}" >&2
fi
if ((${#failed[@]})); then
  echo "run_all_tests: FAILED phases: ${failed[*]}"
  echo "tests: ${tests_passed} passed, ${tests_failed} failed, ${tests_skipped} skipped"
  exit 1
fi
echo "run_all_tests: no phase failed (${#phases[@]} phases, ${total} s)"
echo "tests: ${tests_passed} passed, ${tests_failed} failed, ${tests_skipped} skipped"
