#!/usr/bin/env bash
# Runs one multi-rank test through distrun: a free store port, a time bound,
# stragglers stopped, every rank's output in the test log (prefixed) and raw
# per-rank logs among the test's undeclared outputs.
#
#   run_multirank.sh DISTRUN WORLD_SIZE TIMEOUT_S [distrun flags...] -- program args... [: program2 ...]
#
# The flags before "--" go to distrun (e.g. --max-replacements 1).
set -euo pipefail
distrun="$1"
world_size="$2"
timeout_s="$3"
shift 3
flags=()
if [[ " $* " == *" -- "* ]]; then
  while [ "$1" != "--" ]; do
    flags+=("$1")
    shift
  done
  shift
fi
log_dir="${TEST_UNDECLARED_OUTPUTS_DIR:-${TEST_TMPDIR:-/tmp}}/ranks"
echo "multirank: world size ${world_size}, time limit ${timeout_s}s, logs in ${log_dir}" >&2
# A Python program built with //testing/python:rank_zygote (the Python
# multi-rank tests): its ranks fork from one process that imported torch
# once (testing/python/zygote/rank_zygote.py), started here before distrun
# and stopped after it. Where it does not come up, the ranks start as usual.
# (One program for every rank, Bazel's Python launcher script, the zygote in the runfiles;
# --test_env=DISTKIT_TEST_NO_ZYGOTE=1 turns it off, to compare.)
if [ "$world_size" -ge 2 ] && [ -z "${DISTKIT_TEST_NO_ZYGOTE:-}" ] && [[ " $* " != *" : "* ]] &&
  [ -e testing/python/zygote/rank_zygote.py ] && head -c 64 "$1" | grep -q python; then
  zygote="distkit-rank-zygote-$$-${RANDOM}"
  ready="${TEST_TMPDIR:-/tmp}/rank_zygote.${zygote}.ready"
  # With what distrun gives every rank that reaches start-up (libgomp reads
  # OMP_NUM_THREADS when torch loads it; Python's streams are made then).
  OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" PYTHONUNBUFFERED="${PYTHONUNBUFFERED:-1}" \
    DISTKIT_RANK_ZYGOTE_SERVE="$zygote" "$@" </dev/null &
  zygote_pid=$!
  trap 'kill -9 "$zygote_pid" 2>/dev/null || true' EXIT
  for _ in $(seq 600); do
    [ -e "$ready" ] && break
    kill -0 "$zygote_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ -e "$ready" ]; then
    export DISTKIT_RANK_ZYGOTE="$zygote"
  else
    echo "multirank: the rank zygote did not come up; ranks start on their own" >&2
  fi
fi
"$distrun" --nproc-per-node "$world_size" --master-port 0 \
  --timeout "$timeout_s" --grace-period 5 --log-dir "$log_dir" ${flags[@]+"${flags[@]}"} -- "$@"
