#!/bin/bash
# The wide variants of the reduction loops (reduce_loops.h) must define no
# symbol but their two entry points (Select...ReduceLoop, ...DivideBySize):
# any other one (an inline function left out of line, compiled for AVX2 or
# AVX-512) could be merged by the linker with the baseline copy and run on a
# CPU without those instructions.
set -euo pipefail
status=0
found=0
# Bazel puts the libraries in the runfiles as shared objects (_solib_*/
# lib..._Slibreduce_Ukernels_Uavx2.so): their exported symbols are what the
# linker could merge.
for lib in $(find -L . -name '*reduce_Ukernels_Uavx*.so' | sort -u); do
  found=$((found + 1))
  extra=$(nm -D -C --defined-only "$lib" | awk 'NF >= 3 {print}' |
          grep -v -E ' (_init|_fini|__bss_start|_edata|_end)$' |
          grep -v -E 'distkit::comm_internal::(Select(Avx2|Avx512)ReduceLoop|(Avx2|Avx512)DivideBySize)\(' || true)
  if [ -n "$extra" ]; then
    echo "FAIL: $lib defines more than its entry points:"
    echo "$extra"
    status=1
  else
    echo "ok: $lib"
  fi
done
if [ "$found" -eq 0 ]; then
  echo "FAIL: no variant library found in the runfiles"
  exit 1
fi
exit $status
