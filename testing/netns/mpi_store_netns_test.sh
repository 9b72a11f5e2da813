#!/usr/bin/env bash
# A store-less MPI job across 2 namespace-hosts x 2 ranks: mpirun with no
# MASTER_ADDR, init_dist('mpi', backend='mpi'). Rank 0 serves the job's
# store on every address and MPI broadcasts where (cc/comm/mpi/
# mpi_job_store.h); the ranks on the other host, with another hostname and
# no loopback route to rank 0, must reach it by its eth0 address, and every
# rank then runs the MPI backend's checks. mpirun starts its daemons in the
# hosts' namespaces through an rsh agent (tools/dkbench/netns_mpi_agent.sh).
#   mpi_store_netns_test.sh LIB AGENT PROGRAM
set -uo pipefail
lib=$1 agent=$2 program=$3
# shellcheck source=netns_hosts.sh
source "$lib"
agent=$(readlink -f "$agent")
program=$(readlink -f "$program")
out=$(mktemp -d)
trap 'rm -rf "$out"; netns_teardown' EXIT
netns_setup 2 || { echo "FAILED: namespace-hosts cannot be made"; exit 1; }
map=""
for ((i = 0; i < 2; i++)); do
  map+="${NETNS_ADDRS[i]}=${NETNS_PIDS[i]} "
  echo "${NETNS_ADDRS[i]} slots=2"
done >"$out/hostfile"
export DKBENCH_NETNS_MAP="$map"
netns_exec 0 env -u MASTER_ADDR -u MASTER_PORT TMPDIR="$out" timeout --signal=KILL 45 \
  mpirun --allow-run-as-root --hostfile "$out/hostfile" --map-by "ppr:2:node" -np 4 \
  --mca plm_rsh_agent "$agent" --mca btl tcp,self,vader \
  --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
  -x TMPDIR "$program" >"$out/log" 2>&1
rc=$?
passed=$(grep -c 'mpi backend checks, rank [0-9]* of 4: passed' "$out/log")
if [ "$rc" -ne 0 ] || [ "$passed" -ne 4 ]; then
  echo "FAILED: exit $rc, $passed of 4 ranks passed:"
  sed 's/^/    /' "$out/log"
  exit 1
fi
echo "ok: 4 ranks on 2 hosts found rank 0's store through MPI and passed"
