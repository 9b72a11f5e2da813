#!/usr/bin/env bash
# Failures across hosts (issue 37, item 5): 2 namespace-hosts x 2 ranks run
# checked all_reduces (tools/faultinject/fault_rank.c, op timeout 3 s), one
# distrun per host as on a cluster, and then host 1's link is cut, host 1
# freezes (every process on it stopped), or host 1's leader (rank 2) is
# killed. Every rank that can still run must end with a clear error (exit 3)
# within the op timeout + 5 s of the fault, and the errors must name the
# host that cannot be reached: its name where the store could say it, or
# the store's address where the store itself is what cannot be reached.
#   netns_failures_test.sh LIB DISTRUN FAULT_RANK
set -uo pipefail
lib=$1 distrun=$(realpath "$2") rank=$(realpath "$3")
# shellcheck source=netns_hosts.sh
source "$lib"
# Every bound below is a comparison through bc; without it they would all pass.
command -v bc >/dev/null || { echo "FAILED: bc is not installed"; exit 1; }
timeout_ms=3000
bound_s=8  # the op timeout + 5 s
# Joining has its own bound (connect_timeout_ms): what these scenarios time
# is the faults, not how fast a loaded machine starts a job (CI run 49: 4
# ranks took 2.9 s to create the world beside 3 other tests).
connect_timeout_ms=60000
failures=0
dir=$(mktemp -d)
trap 'netns_teardown; rm -rf "$dir"' EXIT

fail() {
  echo "FAILED: $*"
  failures=$((failures + 1))
}

# Each line with the time it arrived, kept in the log for the reader: the
# bounds use the rank's own clock (expect_errors), which these stamps follow
# by what distrun's forwarding took.
stamp() {
  local line
  while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done
  # When distrun's output ended: when it exited (its ranks had already).
  printf '%s %s\n' "$EPOCHREALTIME" "(end of output)"
}

# Starts the job; fills node_pid[i]. The ranks wait for $dir/go before
# init (FAULT_GO_FILE), which appears once all four have started: spawning
# one host's ranks can lag the other's by seconds on a loaded machine (CI
# run 31: 2.1 s), which is not what these scenarios test. Returns once every
# rank has joined.
start_job() {
  local token i
  token=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
  rm -f "$dir/go"
  for i in 0 1; do
    # FAULT_PREFAULT: the ranks' code is in memory before the fault, so
    # that a rank reading its error path back from a busy disk is not what
    # is timed (the project's CI at 35b654d: both ranks of host 1 reported
    # 3 s later than in any run here, at the same moment).
    netns_spawn "$i" env DISTKIT_TOKEN="$token" FAULT_STEPS=100000000 FAULT_PREFAULT=1 \
      FAULT_TIMEOUT_MS="$timeout_ms" FAULT_CONNECT_TIMEOUT_MS="$connect_timeout_ms" \
      FAULT_GO_FILE="$dir/go" setsid \
      "$distrun" --nnodes 2 \
      --node-rank "$i" --nproc-per-node 2 --master-addr "${NETNS_ADDRS[0]}" \
      --master-port 29500 --timeout 60 -- "$rank" \
      > >(stamp >"$dir/host$i.log") 2>&1
    node_pid[i]=$NETNS_SPAWNED
  done
  local want=started since=$SECONDS
  until [ "$want" = joined ] &&
    [ "$(cat "$dir"/host*.log | grep -c 'joined rank=')" -eq 4 ]; do
    if [ "$want" = started ] &&
      [ "$(cat "$dir"/host*.log | grep -c '\]: pid=')" -eq 4 ]; then
      touch "$dir/go"
      want=joined
      since=$SECONDS
    fi
    sleep 0.1
    if [ $((SECONDS - since)) -gt $((connect_timeout_ms / 1000 + 5)) ]; then
      fail "the job's ranks were not $want within $((connect_timeout_ms / 1000 + 5)) s"
      cat "$dir"/host*.log
      return 1
    fi
  done
  sleep 0.5  # well inside the loop of all_reduces
}

# Waits for host i's distrun to end (at most `bound_s` + 5 s after `since`:
# its own wind-up beside its ranks'); checks that each of `ranks` reported
# an error (fault_rank's "failed" line; it exits 3) within `bound_s` of the
# fault by its own clock ("failed at"), not before the fault, and that the
# errors contain `names`. The fault lies
# between `before` and `since`, the clock read just before and just after
# it: the bound counts from the later, "not before" from the earlier.
expect_errors() {
  local scenario=$1 i=$2 before=$3 since=$4 names=$5 ranks=$6
  errors_ok=0
  while kill -0 "${node_pid[i]}" 2>/dev/null; do
    if [ "$(echo "$(date +%s.%N) > $since + $bound_s + 5" | bc)" -eq 1 ]; then
      fail "$scenario: host $i's job still ran $((bound_s + 5)) s after the fault"
      sed 's/^/    /' "$dir/host$i.log"
      return
    fi
    sleep 0.05
  done
  sleep 0.1  # the last lines through stamp()
  local r line failed_at at latest=0
  last_failed_at=0
  for r in $ranks; do
    line=$(grep -E "^[0-9.]+ \[rank$r\]: rank $r step [0-9]+ failed" "$dir/host$i.log" | head -1)
    if [ -z "$line" ]; then
      fail "$scenario: rank $r (host $i) reported no error"
      sed 's/^/    /' "$dir/host$i.log"
      return
    fi
    # When the operation returned its error, by the rank's own clock: what
    # the library took, without the time its line then spent in distrun's
    # forwarding and in stamp() (the line's stamp, which the log keeps).
    failed_at=$(sed -nE "s/^[0-9.]+ \[rank$r\]: rank $r step [0-9]+ began at [0-9.]+, failed at ([0-9.]+);.*/\1/p" \
      "$dir/host$i.log" | head -1)
    if [ -z "$failed_at" ]; then
      fail "$scenario: rank $r (host $i) did not say when it failed"
      sed 's/^/    /' "$dir/host$i.log"
      return
    fi
    at=$(echo "$failed_at - $since" | bc)
    if [ "$(echo "$failed_at < $before" | bc)" -eq 1 ]; then
      fail "$scenario: rank $r (host $i) failed before the fault"
      sed 's/^/    /' "$dir/host$i.log"
      return
    fi
    if [ "$(echo "$at > $bound_s" | bc)" -eq 1 ]; then
      fail "$scenario: rank $r (host $i) reported its error $at s after the fault"
      sed 's/^/    /' "$dir/host$i.log"
      return
    fi
    if ! echo "$line" | grep -q -- "$names"; then
      fail "$scenario: rank $r's error does not name '$names'"
      sed 's/^/    /' "$dir/host$i.log"
      return
    fi
    [ "$(echo "$at > $latest" | bc)" -eq 1 ] && latest=$at
    [ "$(echo "$failed_at > $last_failed_at" | bc)" -eq 1 ] && last_failed_at=$failed_at
  done
  if grep -qE 'wrong sum|Segmentation|Aborted|core dumped' "$dir/host$i.log"; then
    fail "$scenario: host $i saw a wrong result or a crash"
    sed 's/^/    /' "$dir/host$i.log"
    return
  fi
  echo "ok: $scenario: rank(s) $ranks (host $i) reported errors naming" \
    "'$names' within $(printf '%.1f' "$latest") s of the fault"
  errors_ok=1
}

stop_everything() {
  local i pid
  for i in 0 1; do
    for pid in $(sed -n 's/^[0-9.]* \[rank[0-9]*\]: pid=\([0-9]*\)$/\1/p' "$dir/host$i.log"); do
      kill -KILL "$pid" 2>/dev/null
    done
    kill -KILL "${node_pid[i]}" 2>/dev/null
    wait "${node_pid[i]}" 2>/dev/null
  done
  netns_teardown
}

# A cut link: host 1 keeps running, cut off from host 0 and the store.
netns_setup 2 || exit 1
if start_job; then
  before=$EPOCHREALTIME
  netns_link 1 down
  cut=$EPOCHREALTIME
  expect_errors "cut link" 0 "$before" "$cut" "${NETNS_NAMES[1]}" "0 1"
  expect_errors "cut link" 1 "$before" "$cut" "${NETNS_ADDRS[0]}" "2 3"
  # Host 1's distrun, cut off from node 0's store since its failure notice
  # (0.5 s), tries its exit report only briefly (2 s, not 5): it ends soon
  # after its ranks, as any launcher whose job failed should (5.5 s before,
  # 2.5 now; the rest of the bound is for a loaded machine).
  for _ in $(seq 50); do
    grep -q '^[0-9.]* (end of output)$' "$dir/host1.log" && break
    sleep 0.1
  done
  ended=$(sed -n 's/^\([0-9.]*\) (end of output)$/\1/p' "$dir/host1.log")
  if [ "$errors_ok" -eq 0 ]; then
    :  # failed above already
  elif [ -z "$ended" ]; then
    fail "cut link: host 1's output did not end"
  elif linger=$(echo "$ended - $last_failed_at" | bc) &&
    [ "$(echo "$linger > 5" | bc)" -eq 1 ]; then
    fail "cut link: host 1's distrun ended $linger s after its last rank's error"
    sed 's/^/    /' "$dir/host1.log"
  else
    echo "ok: cut link: host 1's distrun ended $(printf '%.1f' "$linger") s after its last rank's error"
  fi
fi
stop_everything

# A frozen host: every process of host 1 stopped (as a machine that hangs).
netns_setup 2 || exit 1
if start_job; then
  # distrun and its ranks (each rank leads a process group of its own).
  host1=("${node_pid[1]}" $(sed -n 's/^[0-9.]* \[rank[0-9]*\]: pid=\([0-9]*\)$/\1/p' "$dir/host1.log"))
  before=$EPOCHREALTIME
  kill -STOP "${host1[@]}"
  frozen=$EPOCHREALTIME
  expect_errors "frozen host" 0 "$before" "$frozen" "${NETNS_NAMES[1]}" "0 1"
  kill -CONT "${host1[@]}" 2>/dev/null
fi
stop_everything

# A killed leader: rank 2, host 1's link to the other host's leader.
netns_setup 2 || exit 1
if start_job; then
  leader=$(sed -n 's/^[0-9.]* \[rank2\]: pid=\([0-9]*\)$/\1/p' "$dir/host1.log")
  before=$EPOCHREALTIME
  kill -KILL "$leader"
  killed=$EPOCHREALTIME
  expect_errors "killed leader" 0 "$before" "$killed" "rank 2 .*${NETNS_NAMES[1]}" "0 1"
  expect_errors "killed leader" 1 "$before" "$killed" "rank 2" "3"
fi
stop_everything

rm -rf "$dir"  # netns_setup's own EXIT trap replaced the one above
[ "$failures" -eq 0 ] && echo "PASSED" || echo "$failures failure(s)"
[ "$failures" -eq 0 ]
