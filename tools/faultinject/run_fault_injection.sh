#!/usr/bin/env bash
# The long fault-injection run (the test command runs 15 of these through
# //tools/faultinject:fault_injection_test): kills, freezes and zombifies
# random ranks, the store host and the launcher, in init and mid-collective,
# over shared memory, TCP and MPI under mpirun, and reports per fault kind
# the runs (by path), hangs and worst time from the fault to the last
# survivor's exit; then 100 start-up kills (a rank SIGKILLed at a random
# moment of start-up under distrun: every survivor's own error within 1 s,
# no segment left in /dev/shm; --startup-launchers distrun,plain adds ranks
# started without a launcher, which rank 0's store does not yet watch).
#
#   tools/faultinject/run_fault_injection.sh [--runs 200] [--seed N]
#       [--kinds K,...] [--paths shm,tcp,mpi] [--stacks]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
tools/bootstrap.sh
bazel build //tools/faultinject:fault_rank //tools/distrun
exec python3 tools/faultinject/fault_inject.py \
  --rank bazel-bin/tools/faultinject/fault_rank \
  --distrun bazel-bin/tools/distrun/distrun --runs 200 --startup-runs 100 "$@"
