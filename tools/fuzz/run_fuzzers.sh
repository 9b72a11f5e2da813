#!/usr/bin/env bash
# Builds distkit's libFuzzer targets with clang-14 (-fsanitize=fuzzer plus
# ASan and UBSan) and runs them side by side for a bounded time, reporting
# executions and crashes per target. The test command runs them for 30 s
# (three fuzzers on two cores: about 20 s of a core each); longer runs:
#
#   tools/fuzz/run_fuzzers.sh [SECONDS_PER_TARGET]     (default 30)
#
# Targets (tools/fuzz/README.md):
#   store_requests  the store's request handling (wire decoding, client checks,
#                   the server's state) against a model
#   tensor_args     the tensor argument checks behind every ABI call
#   capi            the C ABI itself, through libdistkit.so, with fuzzed
#                   arguments (only the harness is instrumented for coverage)
# A crash leaves its input in $FUZZ_OUT/<target>/ and fails the script.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
seconds="${1:-30}"
out="${FUZZ_OUT:-${TMPDIR:-/tmp}/distkit-fuzz}"
mkdir -p "$out"
CXX=clang++-14
CC=clang-14
SAN=(-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -g -O1)
ABSL_LIBS=$(pkg-config --libs absl_status absl_statusor absl_strings \
  absl_synchronization absl_time absl_str_format absl_hash absl_raw_hash_set)

build() {  # name, sources...
  local name="$1"
  shift
  "$CXX" -std=c++17 "${SAN[@]}" -I. "$@" -o "$out/$name" \
    $ABSL_LIBS -lpthread
}
build store_requests_fuzzer tools/fuzz/store_requests_fuzzer.cc \
  cc/store/hash_store.cc cc/store/request_limits.cc cc/store/call_deadline.cc \
  cc/store/internal/wire.cc &
store_build=$!
build tensor_args_fuzzer tools/fuzz/tensor_args_fuzzer.cc \
  cc/core/data_type.cc cc/core/device.cc cc/core/float_cast.cc \
  cc/core/reduce_op.cc cc/core/status.cc cc/core/tensor_ref.cc &
tensor_build=$!
bazel build //capi:libdistkit.so 2>/dev/null
wait "$store_build"
wait "$tensor_build"
lib_dir="$(bazel info bazel-bin 2>/dev/null)/capi"
"$CC" -std=c11 "${SAN[@]}" -Icapi/include tools/fuzz/capi_fuzzer.c \
  -L"$lib_dir" -ldistkit -Wl,-rpath,"$lib_dir" -o "$out/capi_fuzzer"

targets=(store_requests tensor_args capi)
declare -A pids
for target in "${targets[@]}"; do
  dir="$out/$target"
  mkdir -p "$dir/corpus"
  (cd "$dir" && ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 "$out/${target}_fuzzer" \
    -max_total_time="$seconds" -print_final_stats=1 -timeout=10 \
    -rss_limit_mb=4096 corpus >"$dir/log.txt" 2>&1) &
  pids[$target]=$!
done

status=0
printf '%-16s %12s %8s\n' target executions crashes
for target in "${targets[@]}"; do
  dir="$out/$target"
  log="$dir/log.txt"
  set +e
  wait "${pids[$target]}"
  rc=$?
  set -e
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" |
    grep -o '[0-9]*$' || echo "?")
  crashes=0
  if [ "$rc" -ne 0 ]; then
    crashes=1
    status=1
    echo "--- $target crashed (exit $rc); input and log in $dir" >&2
    tail -30 "$log" >&2
  fi
  printf '%-16s %12s %8s\n' "$target" "$execs" "$crashes"
done
exit $status
