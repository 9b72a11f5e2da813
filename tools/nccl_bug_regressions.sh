#!/usr/bin/env bash
# Puts each of the five GPU-path bugs found by review (issue 35) back into a
# scratch copy of the tree, one at a time, and runs the tests that must catch
# it: each must go red. Then runs the same tests on the unchanged copy: they
# must pass. Shows that the simulator tests can fail, and for which bug.
#
#   tools/nccl_bug_regressions.sh [SCRATCH_DIR]     (DK_BUGS="2 4": only those)
#
#   1 one NCCL communicator for every thread: sends and receives on the
#     collectives' communicator and channel, from their own lanes
#   2 worker threads never select the GPU; allocation "restores" the
#     thread's device 0 (a context on GPU 0 from every rank)
#   3 the torch backend (its Python fallback; the C++ one has its own test)
#     allocates its outputs on the CPU
#   4 the caller's stream is ignored (only the legacy default stream)
#   5 a failed cudaEventRecord of the op's end is not checked, so the op
#     "completes" before it ran
#
# A few minutes on 2 cores: one Bazel output base for the scratch copy, so
# each mutation rebuilds only what it touches. Exit 0 when every bug was
# caught and the clean copy passed.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
scratch="${1:-${TMPDIR:-/tmp}/distkit-bug-regressions}"
rm -rf "$scratch"
git clone -q "$repo" "$scratch" || exit 2
cd "$scratch" || exit 2
root="$scratch.bazel"
bazel_() { bazel --output_user_root="$root" "$@"; }
trap 'bazel_ shutdown >/dev/null 2>&1 || true' EXIT

sim_tests=(//cc/comm/nccl:nccl_sim_test_ws2 //cc/comm/nccl:nccl_sim_test_ws3)
declare -A tests=(
  [1]="${sim_tests[*]}"
  [2]="${sim_tests[*]}"
  [3]="//bindings/python:torch_backend_devices_test"
  [4]="${sim_tests[*]}"
  [5]="//cc/comm/nccl:nccl_sim_test_ws2"
)

# Replaces `old` by `new` in `file`, failing loudly when `old` is gone (the
# code moved on and this script must follow).
mutate() {  # file, old, new
  python3 - "$@" <<'PY' || exit 2
import sys
path, old, new = sys.argv[1:4]
text = open(path).read()
if old not in text:
    sys.exit("nccl_bug_regressions: %s no longer holds:\n%s" % (path, old))
open(path, "w").write(text.replace(old, new))
PY
}

# One direction of bug 1: `op` (Send, Recv) on the collectives' channel
# instead of its pair's (PairChannel(ctx, `pair`)), addressing `peer` where
# the fix addresses rank `pair_rank` of the pair's communicator.
on_collectives_channel() {  # op, pair, pair_rank, peer
  mutate cc/comm/nccl/nccl_backend.cc \
    "DK_ASSIGN_OR_RETURN(Channel * c, PairChannel(ctx, $2));" \
    'Channel* c = collectives_.get();'
  mutate cc/comm/nccl/nccl_backend.cc \
    "return nccl_->$1(bytes, data.nbytes(), ncclUint8, /*peer=*/$3, comm," \
    "return nccl_->$1(bytes, data.nbytes(), ncclUint8, $4, comm,"
}
bug1() {
  on_collectives_channel Send 'rank_, dst' 1 dst
  on_collectives_channel Recv 'src, rank_' 0 src
}
bug2() {
  # Allocation sets the device and puts the thread's previous one back, which
  # is 0 on a thread that never chose one; the queue's worker runs and stages
  # without selecting the group's device.
  mutate cc/core/cuda_library.cc \
    'if (cuda_.GetDevice(&current) != cudaSuccess || current == device) return;' \
    'if (cuda_.GetDevice(&current) != cudaSuccess) return;'
  mutate cc/core/cuda_library.cc \
    '  if (active) previous_ = current;' \
    '  previous_ = current;'
  mutate cc/comm/nccl/nccl_backend.cc \
    '  DK_RETURN_IF_ERROR(UseDevice());
  Channel& c = *collectives_;' \
    '  Channel& c = *collectives_;'
  mutate cc/comm/nccl/nccl_backend.cc \
    '  DK_RETURN_IF_ERROR(UseDevice());
  // The caller'"'"'s work comes first' \
    '  // The caller'"'"'s work comes first'
}
bug3() {
  mutate bindings/python/distkit/torch_backend_fallback.py \
    'dtype=t.dtype, device=t.device)' 'dtype=t.dtype)'
}
bug4() {
  mutate cc/comm/nccl/nccl_backend.cc \
    'cudaEvent_t ready = static_cast<cudaEvent_t>(ctx.issue_mark);' \
    'cudaEvent_t ready = nullptr;'
}
bug5() {
  mutate cc/comm/nccl/nccl_backend.cc \
    '  if (absl::Status r =
          CudaStatus(*cuda_, cuda_->EventRecord(channel.done, channel.stream),
                     "cudaEventRecord");
      !r.ok()) {' \
    '  cuda_->EventRecord(channel.done, channel.stream);
  if (absl::Status r; false) {'
}

run_tests() {  # label, targets...
  local label="$1"
  shift
  bazel_ test --test_output=errors "$@" >"$scratch.log" 2>&1
  local rc=$?
  grep -hE "CHECK FAILED|dkgpusim: [a-z]|lent a|FAILED in|PASSED in|TIMEOUT" "$scratch.log" |
    grep -v "seed" | sort -u | head -8 | sed "s/^/    $label: /"
  return $rc
}

status=0
echo "== the clean tree"
if ! run_tests clean ${tests[1]} ${tests[3]}; then
  echo "nccl_bug_regressions: FAIL: the clean tree does not pass"
  status=1
fi
for n in ${DK_BUGS:-1 2 3 4 5}; do
  git checkout -q -- .
  echo "== bug $n"
  "bug$n"
  if run_tests "bug $n" ${tests[$n]}; then
    echo "nccl_bug_regressions: FAIL: bug $n went unnoticed by ${tests[$n]}"
    status=1
  else
    echo "bug $n: caught (the tests went red)"
  fi
done
git checkout -q -- .
exit "$status"
