#!/bin/bash
# ddp_vs_torch_test.sh DISTRUN DDP_CHECK REFERENCE WORLD_SIZE: trains with
# distkit's C++ DDP, then with torch's DDP, and compares (testing/python/ddp_reference.py).
set -euo pipefail
distrun="$1" check="$2" reference="$3" n="$4"
out="${TEST_TMPDIR:-/tmp}/ddp_out"
mkdir -p "$out"
"$distrun" --nproc-per-node "$n" --master-port 0 --timeout 150 -- "$check" "$out"
"$distrun" --nproc-per-node "$n" --master-port 0 --timeout 150 -- "$reference" "$out"
