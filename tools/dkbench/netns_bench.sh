#!/usr/bin/env bash
# dkbench netns: collectives across real network hosts (network namespaces,
# testing/netns), beside torch.distributed's Gloo and OpenMPI over the same
# namespaces and the link's bound, in one run.
#
#   tools/dkbench/netns_bench.sh [--hosts "2 3 4"] [--ranks-per-host 2]
#       [--rates "1gbit none"] [--sizes "16777216 67108864"]
#       [--ops all_reduce,all_gather,reduce_scatter] [--batches 3] [--no-torch]
#       [--no-mpi]
#
# For each rate and host count: one TCP flow's throughput through two hosts
# with that rate on their links (tools/dkbench/link_throughput.py: what one
# flow gets, headers and acknowledgements included), then distkit's
# collective_bench and torch's Gloo (torch_bench.py; GLOO_SOCKET_IFNAME=eth0,
# which torch needs there and distkit does not) as distrun jobs over H
# namespace-hosts x N ranks (testing/netns/netns_job.sh), and OpenMPI's
# (mpi_bench) under mpirun started on host 0 with the other hosts in its
# hostfile by address, its daemons started in their namespaces by an rsh
# agent (netns_mpi_agent.sh; TCP between hosts on eth0, shared memory
# within one, as on a cluster; its default collectives, coll/tuned: its
# hierarchical ones, coll/han, end in a segmentation fault in Debian's
# 4.1.4 over these hosts). The bound of an
# operation of S bytes (collective_bench's sizes: all_reduce's buffer,
# all_gather's output, reduce_scatter's input) is the bytes each host's link
# must carry one way at that flow's throughput: all_reduce 2(H-1)/H S,
# all_gather and reduce_scatter (H-1)/H S. Prints one table; the rows are
# medians over batches of each job (collective_bench's own timing). Needs
# root and tc's tbf (a rate of "none" needs no tc); says SKIPPED otherwise.
# Run from the repository root.
set -uo pipefail
hosts_list="2 3 4"
per_host=2
rates="1gbit none"
sizes="16777216 67108864"
ops="all_reduce,all_gather,reduce_scatter"
batches=3
torch=1
mpi=1
while [ $# -gt 0 ]; do
  case "$1" in
    --hosts) hosts_list=$2; shift 2 ;;
    --ranks-per-host) per_host=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --ops) ops=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --no-torch) torch=0; shift ;;
    --no-mpi) mpi=0; shift ;;
    *) echo "netns_bench: unknown argument $1" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/../.." || exit 1
bazel build //tools/distrun //tools/dkbench:collective_bench //tools/dkbench:mpi_bench \
  >/dev/null 2>&1 ||
  { echo "netns_bench: build failed" >&2; exit 1; }
distrun=bazel-bin/tools/distrun/distrun
py=/usr/bin/python3
# shellcheck source=../../testing/netns/netns_hosts.sh
source testing/netns/netns_hosts.sh
if ! why=$(netns_can_create_hosts); then echo "SKIPPED: $why"; exit 77; fi
min_size=${sizes%% *}
max_size=${sizes##* }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# One flow's MB/s from host 1 to host 0 with `rate` on both hosts' links.
link_mbps() {
  local rate=$1 bytes=$((256 << 20))
  [ "$rate" = 1gbit ] && bytes=$((64 << 20))
  netns_setup 2 || return 1
  if [ "$rate" != none ]; then netns_rate 0 "$rate" && netns_rate 1 "$rate" || return 1; fi
  netns_spawn 0 "$py" tools/dkbench/link_throughput.py serve "${NETNS_ADDRS[0]}" 5001 "$bytes" \
    >"$out/flow" 2>&1
  local server=$NETNS_SPAWNED
  netns_exec 1 "$py" tools/dkbench/link_throughput.py send "${NETNS_ADDRS[0]}" 5001 "$bytes"
  wait "$server"
  netns_teardown
  awk '/MB\/s/ {print $1}' "$out/flow"
}

# Rank 0's CSV rows of one job: impl,op,world,bytes,us.
job() {
  local hosts=$1 rate=$2; shift 2
  local rate_args=()
  [ "$rate" != none ] && rate_args=(--rate "$rate")
  testing/netns/netns_job.sh --distrun "$distrun" --hosts "$hosts" \
    --ranks-per-host "$per_host" "${rate_args[@]}" --timeout 600 "$@" 2>/dev/null |
    sed -n 's/^\[host0\] \[rank0\]: //p' | grep -E '^(distkit|torch_gloo),'
}

# Rank 0's CSV rows of OpenMPI's mpi_bench over `hosts` hosts x per_host
# ranks, `rate` on every link.
mpi_job() {
  local hosts=$1 rate=$2; shift 2
  netns_setup "$hosts" || return 1
  local i map=""
  for ((i = 0; i < hosts; i++)); do
    if [ "$rate" != none ]; then netns_rate "$i" "$rate" || return 1; fi
    map+="${NETNS_ADDRS[i]}=${NETNS_PIDS[i]} "
    echo "${NETNS_ADDRS[i]} slots=$per_host"
  done >"$out/hostfile"
  export DKBENCH_NETNS_MAP="$map"
  netns_exec 0 timeout 600 mpirun --allow-run-as-root \
    --hostfile "$out/hostfile" --map-by "ppr:$per_host:node" -np $((hosts * per_host)) \
    --mca plm_rsh_agent "$PWD/tools/dkbench/netns_mpi_agent.sh" \
    --mca btl tcp,self,vader --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
    "$PWD/bazel-bin/tools/dkbench/mpi_bench" "$@" 2>/dev/null | grep -E '^openmpi,'
  netns_teardown
}

printf '%-6s %-5s %-15s %6s %9s %11s %9s %9s %8s %10s %9s %8s %8s\n' rate hosts op MiB \
  "bound ms" "distkit ms" "of bound" "torch ms" "of bound" "torch/dk" "mpi ms" "of bound" \
  "mpi/dk"
for rate in $rates; do
  if [ "$rate" != none ] && ! why=$(netns_can_limit_rates); then
    echo "SKIPPED rate $rate: $why"
    continue
  fi
  mbps=$(link_mbps "$rate")
  [ -n "$mbps" ] || { echo "netns_bench: no flow measurement at $rate" >&2; exit 1; }
  echo "# $rate: one TCP flow $mbps MB/s"
  for hosts in $hosts_list; do
    {
      job "$hosts" "$rate" -- "$PWD/bazel-bin/tools/dkbench/collective_bench" --ops "$ops" \
        --min-bytes "$min_size" --max-bytes "$max_size" --batches "$batches"
      if [ "$torch" = 1 ]; then
        job "$hosts" "$rate" --rank-env GLOO_SOCKET_IFNAME=eth0 -- "$py" \
          "$PWD/tools/dkbench/torch_bench.py" --ops "${ops//,reduce_scatter/}" \
          --min-bytes "$min_size" --max-bytes "$max_size" --batches "$batches"
      fi
      if [ "$mpi" = 1 ]; then
        mpi_job "$hosts" "$rate" --ops "$ops" --min-bytes "$min_size" --max-bytes "$max_size" \
          --batches "$batches"
      fi
    } >"$out/rows"
    "$py" - "$out/rows" "$rate" "$hosts" "$mbps" "$sizes" <<'PY'
import sys
rows, rate, hosts, mbps, sizes = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
times = {}
for line in open(rows):
    impl, op, _, nbytes, us = line.strip().split(",")
    times[(impl, op, int(nbytes))] = float(us) / 1000
wanted = {int(s) for s in sizes.split()}
for op in ("all_reduce", "all_gather", "reduce_scatter"):
    for nbytes in sorted(wanted):
        dk = times.get(("distkit", op, nbytes))
        if dk is None:
            continue
        share = 2 * (hosts - 1) / hosts if op == "all_reduce" else (hosts - 1) / hosts
        bound = share * nbytes / (mbps * 1e6) * 1000
        tg = times.get(("torch_gloo", op, nbytes))
        tcols = (f"{tg:9.1f} {bound / tg:8.2f} {tg / dk:10.2f}" if tg
                 else f"{'-':>9} {'-':>8} {'-':>10}")
        mp = times.get(("openmpi", op, nbytes))
        mcols = (f"{mp:9.1f} {bound / mp:8.2f} {mp / dk:8.2f}" if mp
                 else f"{'-':>9} {'-':>8} {'-':>8}")
        print(f"{rate:<6} {hosts:<5} {op:<15} {nbytes >> 20:6d} {bound:9.1f} {dk:11.1f} "
              f"{bound / dk:9.2f} {tcols} {mcols}")
PY
  done
done
