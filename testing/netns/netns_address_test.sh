#!/usr/bin/env bash
# Which address a rank listens on, across 2 namespace-hosts x 2 ranks, each
# host with one interface (eth0) and no name any other host can look up:
# the ranks find it themselves with no variable set, by interface name with
# DISTKIT_SOCKET_IFNAME or torch's GLOO_SOCKET_IFNAME, and a job told to
# listen on loopback, or on an interface that is not there, fails saying so
# (which also shows the hosts really are apart).
#   netns_address_test.sh LIB JOB DISTRUN PROGRAM
set -uo pipefail
lib=$1 job=$2 distrun=$3 program=$4
failures=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT

run() {  # expected exit (0 or fail), what the output must hold, rank env...
  local expect=$1 holds=$2
  shift 2
  local env_args=()
  local e
  for e in "$@"; do env_args+=(--rank-env "$e"); done
  bash "$job" --hosts-lib "$lib" --distrun "$distrun" --hosts 2 \
    --ranks-per-host 2 --timeout 30 "${env_args[@]}" -- "$program" \
    --gtest_filter=DistApi.TensorCollectives >"$out" 2>&1
  local rc=$?
  local what="${*:-no address variable}: "
  if [ "$rc" -eq 77 ]; then
    cat "$out"
    echo "FAILED: namespace-hosts cannot be made, but the build said they can"
    exit 1
  fi
  if { [ "$expect" = 0 ] && [ "$rc" -ne 0 ]; } ||
    { [ "$expect" = fail ] && [ "$rc" -eq 0 ]; } ||
    ! grep -q -- "$holds" "$out"; then
    echo "FAILED: ${what}expected ${expect/0/success} with '$holds', got exit $rc:"
    sed 's/^/    /' "$out"
    failures=$((failures + 1))
  else
    echo "ok: ${what}exit $rc, '$holds'"
  fi
}

run 0 "PASSED  ] 1 test"
run 0 "PASSED  ] 1 test" DISTKIT_SOCKET_IFNAME=eth0
run 0 "PASSED  ] 1 test" GLOO_SOCKET_IFNAME=eth0,eth1
run fail "DISTKIT_SOCKET_IFNAME=eth9: no interface named eth9 (this host has: " \
  DISTKIT_SOCKET_IFNAME=eth9
# Each rank listens on its own loopback: the other host's ranks cannot
# reach it.
run fail "listening on 127.0.0.1" DISTKIT_GLOO_HOSTNAME=127.0.0.1

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) FAILED"
  exit 1
fi
echo "every check passed"
