#!/bin/bash
# launchers_test.sh MODE CHECK [PY_CHECK]: starts a real job the way users do
# and runs launcher_multirank_test in every rank.
#   torchrun: python3 -m torch.distributed.run --nproc_per_node 2 (C++ and
#             Python ranks; torchrun's agent store holds MASTER_PORT)
#   mpirun:   mpirun -np 3, init_dist('mpi') with the Gloo backend
#   mpirun_torch: mpirun -np 3 and 4, init_dist('mpi') on the MPI backend,
#             torch.distributed.new_group (a Python program); and -np 3
#             without MASTER_ADDR (the store found through MPI)
#   slurm:    3 processes started here with the variables srun sets
#             (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODELIST in
#             hostlist form; no MASTER_ADDR, no scontrol)
set -euo pipefail
mode="$1" check="$2" pycheck="${3:-}"
free_port() {
  /usr/bin/python3 "$FREE_PORT_PAIR"  # testing/free_port_pair.py
}
port="$(free_port)"
case "$mode" in
  torchrun)
    # torch 1.13 under Python 3.11 cannot parse --redirects/--tee 0 (the
    # defaults; Flag iteration yields only single-bit members): redirect stdout
    # to files and tee it back to the console instead.
    for program in "$check pytorch" "$pycheck"; do
      timeout --signal=KILL 120 /usr/bin/python3 -m torch.distributed.run \
        --nproc_per_node 2 --master_addr 127.0.0.1 --master_port "$(free_port)" \
        --redirects 1 --tee 1 --log_dir "${TEST_TMPDIR:-/tmp}/torchrun" \
        --no_python $program
    done
    ;;
  mpirun)
    session="$(mktemp -d /tmp/dkmpi.XXXXXX)"
    trap 'rm -rf "$session"' EXIT
    TMPDIR="$session" timeout --signal=KILL 120 mpirun --allow-run-as-root \
      --oversubscribe --mca btl self,vader,tcp --mca btl_tcp_if_include lo \
      --mca btl_vader_backing_directory "$session" \
      -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$port" -np 3 "$check" mpi gloo
    ;;
  mpirun_torch)
    # torch.distributed.new_group on distkit over MPI, at 3 and 4 ranks (the
    # program is a py_binary: Bazel's launcher finds its runfiles).
    session="$(mktemp -d /tmp/dkmpi.XXXXXX)"
    trap 'rm -rf "$session"' EXIT
    for np in 3 4; do
      TMPDIR="$session" timeout --signal=KILL 120 mpirun --allow-run-as-root \
        --oversubscribe --mca btl self,vader,tcp --mca btl_tcp_if_include lo \
        --mca btl_vader_backing_directory "$session" \
        -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$(free_port)" -np "$np" "$check"
    done
    # Without MASTER_ADDR: rank 0 serves the store and MPI tells the others
    # where (cc/comm/mpi/mpi_job_store.h).
    env -u MASTER_ADDR -u MASTER_PORT TMPDIR="$session" timeout --signal=KILL 120 \
      mpirun --allow-run-as-root --oversubscribe --mca btl self,vader,tcp \
      --mca btl_tcp_if_include lo --mca btl_vader_backing_directory "$session" \
      -np 3 "$check"
    ;;
  slurm)
    pids=()
    for r in 0 1 2; do
      env -u MASTER_ADDR -u RANK -u WORLD_SIZE SLURM_PROCID=$r SLURM_NTASKS=3 \
        SLURM_LOCALID=$r SLURM_NODELIST='localhost,node[02-03]' SLURM_JOB_ID=77 \
        MASTER_PORT="$port" timeout --signal=KILL 120 "$check" slurm &
      pids+=($!)
    done
    status=0
    for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
    exit $status
    ;;
  *) echo "unknown mode $mode" >&2; exit 2 ;;
esac
