#!/bin/bash
# tests/softroce/rails-smoke.sh -- checks the two-rail topology (SOFTROCE_RAILS=2): four rxe
# devices on two veth pairs, each rail's RoCEv2 GID looked up, and RC traffic on each rail moving
# that rail's counters (sent_pkts/rcvd_pkts) and not the other rail's.
#     SOFTROCE_RAILS=2 tests/softroce/run-in-vm.sh "$PWD" bash tests/softroce/rails-smoke.sh
# Run on a host, it does exactly that itself (and exits 77 if no VM can be made).
# Last line: "N passed, N failed"; exit status 0 only if nothing failed.
set -u
if [ "${SOFTROCE_IN_VM:-}" != 1 ]; then
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  SOFTROCE_RAILS=2 exec "$here/run-in-vm.sh" "$(cd "$here/../.." && pwd)" \
    bash tests/softroce/rails-smoke.sh "$@"
fi

PASS=0 FAIL=0
ok()  { PASS=$((PASS + 1)); echo "ok   - $*"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL - $*"; }
W=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$W"' EXIT
ctr() { cat "/sys/class/infiniband/$1/ports/1/hw_counters/$2" 2>/dev/null || echo -1; }

[ "${SOFTROCE_RAILS:-1}" = 2 ] || { bad "SOFTROCE_RAILS=${SOFTROCE_RAILS:-unset} in the VM, want 2"; echo "$PASS passed, $FAIL failed"; exit 1; }

ibv_devices > "$W/devs" 2>&1
if grep -qw rxe0 "$W/devs" && grep -qw rxe1 "$W/devs" && grep -qw rxe2 "$W/devs" && grep -qw rxe3 "$W/devs"
then ok "ibv_devices lists rxe0..rxe3"
else bad "ibv_devices lists rxe0..rxe3:"; sed 's/^/     /' "$W/devs"; fi

for d in rxe0 rxe1 rxe2 rxe3; do
  if ibv_devinfo -d $d 2>/dev/null | grep -q 'state:.*PORT_ACTIVE'; then ok "$d port active"
  else bad "$d port not active"; fi
done

# RC ping-pong on one rail ($1 client dev, $2 server dev, $3 server IP, $4/$5 GID indexes);
# the rail's two devices must count the packets, the other rail's two must not move.
pingpong_on() {
  local c=$1 s=$2 ip=$3 gc=$4 gs=$5 o1=$6 o2=$7 n=200 port=$8
  local c0 s0 o10 o20
  c0=$(ctr "$c" sent_pkts); s0=$(ctr "$s" rcvd_pkts); o10=$(ctr "$o1" sent_pkts); o20=$(ctr "$o2" rcvd_pkts)
  ibv_rc_pingpong -d "$s" -g "$gs" -p "$port" -n $n > "$W/srv" 2>&1 &
  local spid=$!
  sleep 1
  ibv_rc_pingpong -d "$c" -g "$gc" -p "$port" -n $n "$ip" > "$W/cli" 2>&1
  local crc=$?
  wait $spid; local src=$?
  if [ $crc = 0 ] && [ $src = 0 ]; then ok "ibv_rc_pingpong $c -> $s ($ip), $n iterations"
  else bad "ibv_rc_pingpong $c -> $s: client $crc server $src"; sed 's/^/     /' "$W/cli" "$W/srv"; fi
  local dc=$(( $(ctr "$c" sent_pkts) - c0 )) ds=$(( $(ctr "$s" rcvd_pkts) - s0 ))
  local do1=$(( $(ctr "$o1" sent_pkts) - o10 )) do2=$(( $(ctr "$o2" rcvd_pkts) - o20 ))
  if [ "$dc" -ge $n ] && [ "$ds" -ge $n ]; then ok "$c sent_pkts +$dc, $s rcvd_pkts +$ds"
  else bad "$c sent_pkts +$dc, $s rcvd_pkts +$ds (want >= $n each)"; fi
  if [ "$do1" -lt $n ] && [ "$do2" -lt $n ]; then ok "other rail quiet: $o1 sent_pkts +$do1, $o2 rcvd_pkts +$do2"
  else bad "other rail moved: $o1 sent_pkts +$do1, $o2 rcvd_pkts +$do2"; fi
}
pingpong_on rxe0 rxe1 "$SOFTROCE_IP1" "$SOFTROCE_GID_INDEX_RXE0" "$SOFTROCE_GID_INDEX_RXE1" rxe2 rxe3 18515
pingpong_on rxe2 rxe3 "$SOFTROCE_IP3" "$SOFTROCE_GID_INDEX_RXE2" "$SOFTROCE_GID_INDEX_RXE3" rxe0 rxe1 18516

echo "$PASS passed, $FAIL failed"
[ $FAIL = 0 ]
