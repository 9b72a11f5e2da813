#!/usr/bin/env bash
# The harness itself (netns_hosts.sh): hosts with their own names and
# addresses that reach each other and nothing else, a cut link, and nothing
# left behind, also when the shell that made them is killed.
#   netns_hosts_test.sh PATH/netns_hosts.sh
set -uo pipefail
lib=$1
# shellcheck source=netns_hosts.sh
source "$lib"
python=/usr/bin/python3
failures=0
check() {  # what, command...
  local what=$1
  shift
  if "$@"; then
    echo "ok: $what"
  else
    echo "FAILED: $what"
    failures=$((failures + 1))
  fi
}

# A TCP listener on host I, port P, that answers each connection with its
# hostname (spawned; killed at teardown).
listen() {
  netns_spawn "$1" "$python" -c '
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(8)
while True:
    c, _ = s.accept()
    c.sendall(socket.gethostname().encode())
    c.close()' "$2"
}
# What host I hears from ADDR:PORT within 0.5 s (empty when nothing answers).
ask() {
  netns_exec "$1" "$python" -c '
import socket, sys
try:
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=0.5)
    print(c.recv(100).decode())
except OSError:
    pass' "$2" "$3"
}
# Waits until host I answers on ADDR:PORT from host J (the listener is up).
wait_listening() {
  local tries
  for ((tries = 0; tries < 100; tries++)); do
    [ -n "$(ask "$1" "$2" "$3")" ] && return 0
    sleep 0.05
  done
  return 1
}

before=$(ip -o link show | awk -F': ' '{print $2}' | sort)
netns_setup 3 || { echo "FAILED: netns_setup 3"; exit 1; }
check "a run id and a subnet" test -n "$NETNS_RUN" -a -n "$NETNS_SUBNET"
for i in 0 1 2; do
  check "host $i is named ${NETNS_NAMES[i]}" \
    test "$(netns_exec "$i" hostname)" = "${NETNS_NAMES[i]}"
  check "host $i has ${NETNS_ADDRS[i]} on eth0 and no other interface" \
    test "$(netns_exec "$i" ip -o -4 addr show | awk '{print $2, $4}' | sort | tr '\n' ' ')" \
    = "eth0 ${NETNS_ADDRS[i]}/24 lo 127.0.0.1/8 "
done
check "the hosts' names differ" \
  test "$(printf '%s\n' "${NETNS_NAMES[@]}" | sort -u | wc -l)" -eq 3
check "nothing was added to the caller's namespace" \
  test "$(ip -o link show | awk -F': ' '{print $2}' | sort)" = "$before"
check "this shell's hostname is unchanged" \
  test "$(hostname)" != "${NETNS_NAMES[0]}"

listen 2 7000
listen 1 7001
check "host 2 listens" wait_listening 0 "${NETNS_ADDRS[2]}" 7000
check "host 1 listens" wait_listening 0 "${NETNS_ADDRS[1]}" 7001
check "host 0 reaches host 2 by its address, and host 2 is itself" \
  test "$(ask 0 "${NETNS_ADDRS[2]}" 7000)" = "${NETNS_NAMES[2]}"
check "host 1 does not see host 2's listener on its own loopback" \
  test -z "$(ask 1 127.0.0.1 7000)"

netns_link 2 down
check "a cut link: host 0 no longer reaches host 2" \
  test -z "$(ask 0 "${NETNS_ADDRS[2]}" 7000)"
check "host 0 still reaches host 1" \
  test "$(ask 0 "${NETNS_ADDRS[1]}" 7001)" = "${NETNS_NAMES[1]}"
netns_link 2 up
check "the link restored: host 0 reaches host 2 again" \
  wait_listening 0 "${NETNS_ADDRS[2]}" 7000

holders=("${NETNS_PIDS[@]}" "$NETNS_SWITCH_PID")
netns_teardown
gone() {
  local pid
  for pid in "$@"; do
    [ -e "/proc/$pid" ] && return 1
  done
  return 0
}
check "teardown ends every namespace's holder" gone "${holders[@]}"

# A shell that made hosts and is killed (SIGKILL: no trap runs) takes them
# with it.
pids_file=$(mktemp)
bash -c 'source "$1"; netns_setup 2 || exit 1
  echo "${NETNS_PIDS[*]} $NETNS_SWITCH_PID" > "$2"; exec sleep 60' \
  x "$lib" "$pids_file" &
killed=$!
for ((tries = 0; tries < 200; tries++)); do
  [ -s "$pids_file" ] && break
  sleep 0.02
done
read -r -a orphans < "$pids_file"
check "the killed shell made 3 namespace holders" test "${#orphans[@]}" -eq 3
kill -KILL "$killed"
wait "$killed" 2>/dev/null
for ((tries = 0; tries < 100; tries++)); do
  gone "${orphans[@]}" && break
  sleep 0.02
done
check "a killed shell's namespaces go with it" gone "${orphans[@]}"
rm -f "$pids_file"
check "no named namespace is left" test -z "$(ip netns list 2>/dev/null | grep dk)"

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) FAILED"
  exit 1
fi
echo "every check passed"
