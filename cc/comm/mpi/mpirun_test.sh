#!/bin/bash
# mpirun_test.sh NP PROGRAM [ARGS...]: runs PROGRAM under OpenMPI's mpirun
# with NP local ranks (as root, oversubscribed on this 2-core machine) and a
# time bound.
set -euo pipefail
np="$1"
shift
# OpenMPI's session directory and its shared-memory segments under a short
# private path. Tests run in PID namespaces, so concurrent mpiruns get the
# same job ids and would collide in /dev/shm; Bazel's TEST_TMPDIR is too long
# for some of OpenMPI's paths.
session="$(mktemp -d /tmp/dkmpi.XXXXXX)"
trap 'rm -rf "$session"' EXIT
export TMPDIR="$session"
timeout --signal=KILL 120 mpirun --allow-run-as-root --oversubscribe \
  --mca btl self,vader,tcp --mca btl_tcp_if_include lo \
  --mca btl_vader_single_copy_mechanism none \
  --mca btl_vader_backing_directory "$session" -np "$np" "$@"
