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
exec "$distrun" --nproc-per-node "$world_size" --master-port 0 \
  --timeout "$timeout_s" --grace-period 5 --log-dir "$log_dir" ${flags[@]+"${flags[@]}"} -- "$@"
