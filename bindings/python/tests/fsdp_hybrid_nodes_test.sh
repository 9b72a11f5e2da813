#!/usr/bin/env bash
# HYBRID_SHARD across "nodes" on one host: two distrun instances (--nnodes 2,
# two ranks each) form one 4-rank job; each unit is sharded inside a node and
# replicated across the two, and training must equal training alone on the
# global batch (fsdp_multirank_test.py --hybrid-nodes).
set -euo pipefail
distrun="$1"
check="$2"
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
logs="${TEST_TMPDIR:-/tmp}/hybrid"
DISTKIT_TOKEN=$(/usr/bin/python3 -c "import secrets; print(secrets.token_hex(16))")
export DISTKIT_TOKEN
mkdir -p "$logs"
for node in 0 1; do
  "$distrun" --nnodes 2 --node-rank "$node" --nproc-per-node 2 --master-addr 127.0.0.1 \
    --master-port "$port" --timeout 150 -- "$check" --hybrid-nodes >"$logs/node$node.log" 2>&1 &
  pids[$node]=$!
done
status=0
for node in 0 1; do
  wait "${pids[$node]}" || status=$?
done
cat "$logs/node0.log" "$logs/node1.log"
test "$status" -eq 0
test "$(grep -c 'hybrid checks passed' "$logs/node0.log" "$logs/node1.log" | awk -F: '{s += $2} END {print s}')" -eq 4
