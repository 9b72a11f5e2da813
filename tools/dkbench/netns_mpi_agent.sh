#!/usr/bin/env bash
# OpenMPI's rsh agent into testing/netns's namespace-hosts (netns_bench.sh
# passes it as `mpirun --mca plm_rsh_agent`): mpirun calls it as
# `agent [options] HOST COMMAND...` to start its daemon (orted) on HOST, an
# address of one of the hosts; it runs COMMAND in that host's network and
# UTS namespaces, as ssh would on a real machine. DKBENCH_NETNS_MAP lists
# "ADDRESS=PID" pairs, PID the process holding that host's namespaces
# (testing/netns/netns_hosts.sh's NETNS_ADDRS and NETNS_PIDS).
while [[ "${1:-}" == -* ]]; do shift; done  # ssh-style options: none apply
host=${1:?usage: netns_mpi_agent.sh HOST COMMAND...}
shift
pid=""
for entry in ${DKBENCH_NETNS_MAP:-}; do
  [ "${entry%%=*}" = "$host" ] && pid=${entry#*=}
done
if [ -z "$pid" ]; then
  echo "netns_mpi_agent: $host is none of the namespace-hosts (DKBENCH_NETNS_MAP: ${DKBENCH_NETNS_MAP:-unset})" >&2
  exit 255
fi
# As ssh does: the words of the remote command joined, run by a shell.
exec /usr/bin/nsenter --target "$pid" --net --uts -- /bin/sh -c "$*"
