# netns_hosts.sh: H real "hosts" on one Linux machine, for multi-host tests.
# Source it (bash), then:
#
#   netns_setup H           # H hosts on one switch; sets the arrays below
#   netns_exec I cmd...     # runs cmd on host I (its network and hostname)
#   netns_spawn I cmd...    # the same in the background: NETNS_SPAWNED is its
#                           # pid; it is killed if this shell dies
#   netns_rate I RATE       # limits host I's link to RATE both ways (tc tbf,
#                           # e.g. 1gbit); netns_rate I off removes it
#   netns_link I down|up    # cuts / restores host I's link at the switch
#   netns_teardown          # removes everything (also run on exit)
#
# Each host is a network namespace and a UTS namespace of its own: its own
# interfaces, address, routes, ports and hostname, as a separate machine has
# (the filesystem, /dev/shm and pids stay shared). Host I has one interface,
# eth0, with address ${NETNS_ADDRS[I]} in ${NETNS_SUBNET}.0/24, and hostname
# ${NETNS_NAMES[I]}; its other end is port p<I> of a bridge (br0) in a
# "switch" namespace of its own. Nothing is added to the namespace the caller
# runs in: the hosts reach each other and nothing else.
#
# Namespaces are anonymous, each held by a process of this shell
# (PR_SET_PDEATHSIG: it dies with this shell, even on SIGKILL). The kernel
# removes a namespace, with its interfaces, when its last process exits, so
# nothing is left behind however the test ends, and `ip netns list` never
# shows them. Names (hostnames) and the subnet come from this run's pid and
# a random number, so tests run side by side; their networks are disjoint
# anyway.
#
# Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN), ip, nsenter, unshare and setpriv
# (util-linux), and tc for rates. netns_can_create_hosts says whether this
# machine allows it, and why not.

# ip and tc live in /usr/sbin, which a test's PATH may lack.
case ":$PATH:" in
  *:/usr/sbin:*) ;;
  *) PATH="$PATH:/usr/sbin:/sbin" ;;
esac

NETNS_HOSTS=0
NETNS_RUN=""
NETNS_SUBNET=""
NETNS_SWITCH_PID=""
NETNS_PIDS=()   # the process holding host I's namespaces
NETNS_ADDRS=()  # host I's address
NETNS_NAMES=()  # host I's hostname
NETNS_SPAWNED=""
_NETNS_CHILDREN=()  # every process this library started, killed at teardown

# Whether hosts can be made here; prints why not. Builds two hosts in a
# subshell (whose namespaces go with it), so it leaves nothing behind.
netns_can_create_hosts() {
  # netns_job.sh waits for the first node to end (wait -n -p).
  if ((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] < 501)); then
    echo "bash $BASH_VERSION is older than 5.1"
    return 1
  fi
  local tool
  for tool in ip nsenter unshare setpriv; do
    if ! command -v "$tool" >/dev/null 2>&1; then
      echo "$tool is not installed (iproute2, util-linux)"
      return 1
    fi
  done
  local out
  if ! out=$( (netns_setup 2 && netns_exec 1 hostname) 2>&1); then
    echo "cannot create network and UTS namespaces joined by a bridge" \
      "(needs root, or CAP_SYS_ADMIN and CAP_NET_ADMIN): ${out//$'\n'/ }"
    return 1
  fi
  return 0
}

# Whether links can be rate-limited (tc with the tbf qdisc); prints why not.
netns_can_limit_rates() {
  if ! command -v tc >/dev/null 2>&1; then
    echo "tc is not installed (iproute2)"
    return 1
  fi
  local out
  if ! out=$( (netns_setup 1 && netns_rate 0 1gbit) 2>&1); then
    echo "tc cannot add a tbf qdisc: ${out//$'\n'/ }"
    return 1
  fi
  return 0
}

# Starts a process that holds a new network (and UTS) namespace; sets
# _NETNS_HELD to its pid once the namespaces exist. Not in a subshell: the
# holder must be this shell's child to die with it.
_netns_hold() {
  setpriv --pdeathsig KILL unshare --net --uts sleep infinity &
  local pid=$!
  _NETNS_CHILDREN+=("$pid")
  local mine i
  mine=$(readlink /proc/self/ns/uts)
  for ((i = 0; i < 1000; i++)); do
    local theirs
    theirs=$(readlink "/proc/$pid/ns/uts" 2>/dev/null) || {
      echo "netns: the namespace holder exited at start" >&2
      return 1
    }
    if [ "$theirs" != "$mine" ]; then
      _NETNS_HELD=$pid
      return 0
    fi
    sleep 0.01
  done
  echo "netns: the namespace holder did not enter its namespaces" >&2
  return 1
}

# Runs cmd inside the namespaces held by pid.
_netns_in() {
  local pid=$1
  shift
  nsenter --target "$pid" --net --uts -- "$@"
}

netns_setup() {
  local hosts=$1
  if [ "$NETNS_HOSTS" -ne 0 ]; then
    echo "netns: netns_setup called twice" >&2
    return 1
  fi
  if [ "$hosts" -lt 1 ] || [ "$hosts" -gt 200 ]; then
    echo "netns: 1-200 hosts, not $hosts" >&2
    return 1
  fi
  trap netns_teardown EXIT
  trap 'netns_teardown; exit 143' TERM
  trap 'netns_teardown; exit 130' INT
  NETNS_RUN=$(printf '%x%04x' "$$" "$RANDOM")
  # 10.64.0.0-10.127.255.0: a /24 per run, unlikely to match a real network
  # (and unreachable from outside the switch anyway).
  NETNS_SUBNET="10.$((64 + RANDOM % 64)).$((($$ + RANDOM) % 256))"
  _netns_hold || return 1
  NETNS_SWITCH_PID=$_NETNS_HELD
  _netns_in "$NETNS_SWITCH_PID" hostname "dk${NETNS_RUN}sw" &&
    _netns_in "$NETNS_SWITCH_PID" ip link add br0 type bridge &&
    _netns_in "$NETNS_SWITCH_PID" ip link set br0 up || return 1
  local i
  for ((i = 0; i < hosts; i++)); do
    _netns_hold || return 1
    local pid=$_NETNS_HELD
    NETNS_PIDS[i]=$pid
    NETNS_ADDRS[i]="${NETNS_SUBNET}.$((i + 1))"
    NETNS_NAMES[i]="dk${NETNS_RUN}h${i}"
    # Made in the switch's namespace and one end moved to the host's: the
    # caller's namespace is never touched (in Bazel's sandbox the caller may
    # not change it: the sandbox's user namespace does not own it).
    _netns_in "$NETNS_SWITCH_PID" ip link add "p$i" type veth peer name eth0 \
      netns "$pid" &&
      _netns_in "$NETNS_SWITCH_PID" ip link set "p$i" master br0 &&
      _netns_in "$NETNS_SWITCH_PID" ip link set "p$i" up &&
      _netns_in "$pid" hostname "${NETNS_NAMES[i]}" &&
      _netns_in "$pid" ip link set lo up &&
      _netns_in "$pid" ip addr add "${NETNS_ADDRS[i]}/24" dev eth0 &&
      _netns_in "$pid" ip link set eth0 up || return 1
    NETNS_HOSTS=$((i + 1))
  done
  # A bridge port forwards only after the link is up on both ends.
  for ((i = 0; i < hosts; i++)); do
    local tries
    for ((tries = 0; tries < 500; tries++)); do
      if _netns_in "${NETNS_PIDS[i]}" ip -o link show eth0 |
        grep -q 'state UP'; then
        break
      fi
      sleep 0.01
    done
  done
}

netns_exec() {
  local i=$1
  shift
  _netns_in "${NETNS_PIDS[i]}" "$@"
}

netns_spawn() {
  local i=$1
  shift
  setpriv --pdeathsig KILL nsenter --target "${NETNS_PIDS[i]}" --net --uts \
    -- "$@" &
  NETNS_SPAWNED=$!
  _NETNS_CHILDREN+=("$NETNS_SPAWNED")
}

# tbf on both directions of host I's link: its eth0 (what the host sends)
# and the switch's port (what it receives). The bucket holds 2 ms at the
# rate (at least 64 KiB: a GSO packet must fit).
netns_rate() {
  local i=$1 rate=$2
  local dev
  for dev in host switch; do
    local pid=${NETNS_PIDS[i]} ifname=eth0
    if [ "$dev" = switch ]; then
      pid=$NETNS_SWITCH_PID
      ifname="p$i"
    fi
    _netns_in "$pid" tc qdisc del dev "$ifname" root 2>/dev/null || true
    if [ "$rate" != off ]; then
      local bits
      bits=$(_netns_rate_bits "$rate") || return 1
      local burst=$((bits / 8 / 500))
      [ "$burst" -lt 65536 ] && burst=65536
      _netns_in "$pid" tc qdisc add dev "$ifname" root tbf rate "$rate" \
        burst "$burst" latency 100ms || return 1
    fi
  done
}

# "1gbit", "100mbit", "500kbit", "2000000" (bits per second) -> bits/s.
_netns_rate_bits() {
  local r=${1,,}
  case "$r" in
    *gbit) echo $((${r%gbit} * 1000000000)) ;;
    *mbit) echo $((${r%mbit} * 1000000)) ;;
    *kbit) echo $((${r%kbit} * 1000)) ;;
    *[!0-9]*)
      echo "netns: rate '$1' is not N, Nkbit, Nmbit or Ngbit" >&2
      return 1
      ;;
    *) echo "$r" ;;
  esac
}

# A cut cable: the switch's port goes down, the host keeps its address and
# routes, and what it sends is lost (as on a real link, it learns of it only
# through its own timeouts).
netns_link() {
  local i=$1 state=$2
  case "$state" in
    up | down) ;;
    *)
      echo "netns: netns_link I up|down" >&2
      return 1
      ;;
  esac
  _netns_in "$NETNS_SWITCH_PID" ip link set "p$i" "$state"
}

netns_teardown() {
  local pid
  # Everything started here, holders last (a namespace goes with its last
  # process).
  for pid in "${_NETNS_CHILDREN[@]}"; do
    kill -KILL "$pid" 2>/dev/null || true
  done
  for pid in "${_NETNS_CHILDREN[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  _NETNS_CHILDREN=()
  NETNS_PIDS=()
  NETNS_SWITCH_PID=""
  NETNS_HOSTS=0
}
