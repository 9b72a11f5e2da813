#!/usr/bin/env bash
# Runs one distrun job over H namespace-hosts (netns_hosts.sh): on each host
# `distrun --nnodes H --node-rank I`, as a user starts a job on a cluster.
#
#   netns_job.sh --distrun PATH [--hosts H] [--ranks-per-host N] [--rate R]
#                [--timeout S] [--log-dir D] [--rank-env NAME=VALUE]...
#                [--distrun-arg ARG]... [--hosts-lib PATH]
#                -- program args... [: program2 args... ...]
#
# One program runs on every rank; or, with one program per rank separated by
# ':' (hosts x ranks-per-host of them, as distrun's own ':'), rank r runs the
# r-th: each host's distrun gets its ranks' programs (a job whose ranks are
# different programs, e.g. in different languages, spread over the hosts).
# Host 0 hosts the store at its own address; every node shares one
# DISTKIT_TOKEN, the only thing distrun needs beside the master address. No
# address variable reaches the ranks (DISTKIT_GLOO_HOSTNAME,
# DISTKIT_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, DISTKIT_HOST_ID are unset): they
# find their addresses themselves. Each line of output is prefixed with its
# host. When a node fails, the others are stopped; the exit status is the
# first failure's (distrun's: the failed rank's code, 124 past the timeout),
# 0 when every node succeeds. Ranks see DISTKIT_NETNS_HOST (their host's
# index) and DISTKIT_NETNS_HOSTNAMES (every host's name, by index), and each
# --rank-env (set after the address variables are cleared, so a test may set
# one on purpose). Each --distrun-arg goes to every host's distrun (e.g.
# --max-replacements 1: a lost rank's host starts its replacement).
# --hosts-lib: netns_hosts.sh where it is not beside this
# script (Bazel's runfiles). Where this machine cannot make namespace-hosts
# it prints SKIPPED and why, and exits 77 (the Bazel tests are skipped before
# they run there: testing/netns/netns.bzl).
set -uo pipefail
lib="$(dirname "${BASH_SOURCE[0]}")/netns_hosts.sh"
rank_env=()
distrun_args=()
distrun=""
hosts=2
per_host=2
rate=""
timeout_s=60
log_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --distrun) distrun=$2; shift 2 ;;
    --hosts) hosts=$2; shift 2 ;;
    --ranks-per-host) per_host=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --log-dir) log_dir=$2; shift 2 ;;
    --rank-env)
      case "$2" in
        [A-Za-z_]*=*) rank_env+=("$2") ;;
        *) echo "netns_job: --rank-env NAME=VALUE, not '$2'" >&2; exit 2 ;;
      esac
      shift 2
      ;;
    --distrun-arg) distrun_args+=("$2"); shift 2 ;;
    --hosts-lib) lib=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "netns_job: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -z "$distrun" ] || [ $# -eq 0 ]; then
  echo "usage: netns_job.sh --distrun PATH [--hosts H] [--ranks-per-host N]" \
    "[--rate R] [--timeout S] [--log-dir D] [--rank-env NAME=VALUE]..." \
    "[--distrun-arg ARG]... -- program args..." >&2
  exit 2
fi
distrun=$(realpath "$distrun")
# Each host's part of the command: all of it, or its ranks' programs.
programs=1
for a in "$@"; do [ "$a" = ":" ] && programs=$((programs + 1)); done
if [ "$programs" -ne 1 ] && [ "$programs" -ne $((hosts * per_host)) ]; then
  echo "netns_job: $programs programs separated by ':' for $hosts hosts x" \
    "$per_host ranks; give one, or one per rank" >&2
  exit 2
fi
# host_command I: sets cmd to host I's part of "$@" (given as arguments).
host_command() {
  local host=$1 k=0 a
  shift
  cmd=()
  if [ "$programs" -eq 1 ]; then cmd=("$@"); return; fi
  for a in "$@"; do
    if [ "$a" = ":" ]; then
      k=$((k + 1))
      # A ':' between two of this host's ranks stays (distrun's own MPMD).
      if [ $((k / per_host)) -eq "$host" ] && [ $((k % per_host)) -ne 0 ]; then
        cmd+=(":")
      fi
    elif [ $((k / per_host)) -eq "$host" ]; then
      cmd+=("$a")
    fi
  done
}

# shellcheck source=netns_hosts.sh
source "$lib"
if ! why=$(netns_can_create_hosts); then
  echo "SKIPPED: $why"
  exit 77
fi
if [ -n "$rate" ] && ! why=$(netns_can_limit_rates); then
  echo "SKIPPED: $why"
  exit 77
fi
netns_setup "$hosts" || exit 1
if [ -n "$rate" ]; then
  for ((i = 0; i < hosts; i++)); do netns_rate "$i" "$rate" || exit 1; done
fi
token=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
names=$(IFS=,; echo "${NETNS_NAMES[*]}")
echo "netns_job: ${hosts} hosts x ${per_host} ranks on ${NETNS_SUBNET}.0/24:" \
  "$(for ((i = 0; i < hosts; i++)); do
    printf '%s=%s ' "${NETNS_NAMES[i]}" "${NETNS_ADDRS[i]}"
  done)" >&2

# Under Bazel each rank's raw log is kept with the test's outputs.
if [ -z "$log_dir" ] && [ -n "${TEST_UNDECLARED_OUTPUTS_DIR:-}" ]; then
  log_dir="$TEST_UNDECLARED_OUTPUTS_DIR/netns_job"
fi
declare -A node_of=()
for ((i = 0; i < hosts; i++)); do
  node_log=()
  if [ -n "$log_dir" ]; then node_log=(--log-dir "$log_dir/host$i"); fi
  host_command "$i" "$@"
  # The store's port is free on host 0: a fresh network namespace has no
  # listener at all.
  netns_spawn "$i" env -u DISTKIT_GLOO_HOSTNAME -u DISTKIT_SOCKET_IFNAME \
    -u GLOO_SOCKET_IFNAME -u DISTKIT_HOST_ID -u DISTKIT_TEST_HOSTS \
    -u MASTER_ADDR -u MASTER_PORT -u DISTKIT_STORE \
    DISTKIT_TOKEN="$token" DISTKIT_NETNS_HOST="$i" \
    DISTKIT_NETNS_HOSTNAMES="$names" "${rank_env[@]}" \
    "$distrun" --nnodes "$hosts" --node-rank "$i" \
    --nproc-per-node "$per_host" --master-addr "${NETNS_ADDRS[0]}" \
    --master-port 29500 --timeout "$timeout_s" --grace-period 5 \
    "${node_log[@]}" "${distrun_args[@]}" -- "${cmd[@]}" \
    > >(sed -u "s/^/[host$i] /") 2> >(sed -u "s/^/[host$i] /" >&2)
  node_of[$NETNS_SPAWNED]=$i
done

# The job's own bound: every distrun ends within --timeout (its ranks
# stopped, then SIGKILL after the grace period) and its exit barrier, which a
# healthy job passes at once. Past that plus a margin, the processes still
# running are printed (the hang's place) and the distruns stopped, so a hang
# ends as a failure that says where, not at the test runner's timeout.
bound_s=$((timeout_s + 20))
(
  trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
  sleep "$bound_s" &
  sleeper=$!
  wait "$sleeper"
  echo "netns_job: still running ${bound_s} s after the start (--timeout" \
    "${timeout_s} s + 20 s); the processes left:" >&2
  # Every descendant of the hosts' distruns, with where it waits.
  ps -e -o pid=,ppid= | awk -v roots="${!node_of[*]}" '
    BEGIN { n = split(roots, r, " "); for (i = 1; i <= n; i++) keep[r[i]] = 1 }
    { parent[$1] = $2 }
    END {
      do {
        grew = 0
        for (p in parent) if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; grew = 1 }
      } while (grew)
      for (p in keep) print p
    }' | xargs -r ps -o pid,ppid,stat,etime,wchan:24,args -p >&2
  for pid in "${!node_of[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  sleep 5
  for pid in "${!node_of[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
) &
watchdog=$!

status=0
left=$hosts
while [ "$left" -gt 0 ]; do
  wait -n -p done_pid "${!node_of[@]}"
  rc=$?
  [ -n "${done_pid:-}" ] || break
  i=${node_of[$done_pid]}
  unset "node_of[$done_pid]"
  left=$((left - 1))
  if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then
    status=$rc
    echo "netns_job: host $i (${NETNS_NAMES[i]}) failed with exit $rc;" \
      "stopping the others" >&2
    for pid in "${!node_of[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  fi
done
kill "$watchdog" 2>/dev/null || true
wait "$watchdog" 2>/dev/null || true
netns_teardown
exit "$status"
