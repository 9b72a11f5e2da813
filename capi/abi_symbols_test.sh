#!/usr/bin/env bash
# libdistkit.so exports only dk_* symbols, every function the header declares,
# and depends on neither LibTorch nor OpenMPI.
set -euo pipefail
lib="$1"
header="$2"
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | sed 's/@.*//' | sort -u)
bad=$(grep -v '^dk_' <<<"$exported" || true)
if [ -n "$bad" ]; then
  echo "FAIL: libdistkit.so exports symbols outside dk_*:"
  echo "$bad" | head -20
  exit 1
fi
declared=$(grep -oE 'dk_[a-z_0-9]+\(' "$header" | tr -d '(' | sort -u)
missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
if [ -n "$missing" ]; then
  echo "FAIL: declared in distkit.h but not exported:"
  echo "$missing"
  exit 1
fi
if readelf -d "$lib" | grep -E 'NEEDED.*(torch|c10)'; then
  echo "FAIL: libdistkit.so links LibTorch"
  exit 1
fi
# OpenMPI is opened when MPI is first used (cc/comm/mpi/mpi_library.h): a
# NEEDED entry or an unresolved MPI symbol would make every rank process pay
# for loading it and keep libdistkit from loading where it is absent.
if readelf -d "$lib" | grep -E 'NEEDED.*(libmpi|libopen-(rte|pal))'; then
  echo "FAIL: libdistkit.so links OpenMPI"
  exit 1
fi
if nm -D --undefined-only "$lib" | grep -E ' (MPI_|PMPI_|ompi_)'; then
  echo "FAIL: libdistkit.so leaves OpenMPI symbols for the loader to resolve"
  exit 1
fi
echo "ok: $(wc -l <<<"$exported") dk_* symbols exported, all declared functions present, no LibTorch, no OpenMPI"
