#!/bin/bash
# tests/softroce/smoke.sh -- checks that the Soft-RoCE VM does what the tests rely on.
# Meant to run inside the VM:
#     tests/softroce/run-in-vm.sh "$PWD" bash tests/softroce/smoke.sh
# Run on a host, it does exactly that itself (and exits 77 if no VM can be made).
# Last line: "N passed, N failed"; exit status 0 only if nothing failed.
set -u
if [ "${SOFTROCE_IN_VM:-}" != 1 ]; then
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  exec "$here/run-in-vm.sh" "$(cd "$here/../.." && pwd)" bash tests/softroce/smoke.sh "$@"
fi

PASS=0 FAIL=0
ok()  { PASS=$((PASS + 1)); echo "ok   - $*"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL - $*"; }
W=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$W"' EXIT

# 1. both rxe devices are visible to libibverbs
ibv_devices > "$W/devs" 2>&1
if grep -qw rxe0 "$W/devs" && grep -qw rxe1 "$W/devs"; then ok "ibv_devices lists rxe0 and rxe1"
else bad "ibv_devices lists rxe0 and rxe1:"; sed 's/^/     /' "$W/devs"; fi

# 2. the exported GID index points at each device's ::ffff:<IPv4> (RoCEv2) GID
gid_ip() {   # $1 device, $2 index -> dotted IPv4 of an IPv4-mapped GID
  local g; g=$(cat "/sys/class/infiniband/$1/ports/1/gids/$2" 2>/dev/null) || return
  case $g in 0000:0000:0000:0000:0000:ffff:*) ;; *) return ;; esac
  g=${g#0000:0000:0000:0000:0000:ffff:}; g=${g//:/}
  printf '%d.%d.%d.%d' 0x${g:0:2} 0x${g:2:2} 0x${g:4:2} 0x${g:6:2}
}
a=$(gid_ip rxe0 "${SOFTROCE_GID_INDEX_RXE0:-x}"); b=$(gid_ip rxe1 "${SOFTROCE_GID_INDEX_RXE1:-x}")
if [ "$a" = "$SOFTROCE_IP0" ] && [ "$b" = "$SOFTROCE_IP1" ]; then
  ok "GID index $SOFTROCE_GID_INDEX_RXE0/$SOFTROCE_GID_INDEX_RXE1 holds $a/$b (SOFTROCE_GID_INDEX=$SOFTROCE_GID_INDEX)"
else bad "GID index export: rxe0[$SOFTROCE_GID_INDEX_RXE0]='$a' rxe1[$SOFTROCE_GID_INDEX_RXE1]='$b'"; fi

# 3. port state and the RoCE MTU that follows from the netdev MTU
ibv_devinfo -d rxe0 > "$W/info" 2>&1
amtu=$(awk '/active_mtu:/{print $2; exit}' "$W/info")
want=; case $SOFTROCE_MTU in 1500) want=1024 ;; 9000) want=4096 ;; esac
if grep -q 'state:.*PORT_ACTIVE' "$W/info" && { [ -z "$want" ] || [ "$amtu" = "$want" ]; }; then
  ok "rxe0 port active, active_mtu $amtu with netdev MTU $SOFTROCE_MTU"
else bad "rxe0 port state/active_mtu (MTU $SOFTROCE_MTU, expected ${want:-any}):"; sed 's/^/     /' "$W/info"; fi

# 4. rping rxe0 -> rxe1 across the veth, with a capture running on it
tcpdump -i "$SOFTROCE_NETDEV0" --immediate-mode -B 16384 -nn -w "$W/cap.pcap" udp port 4791 2> "$W/tcpdump.err" &
TD=$!
for _ in $(seq 100); do grep -q 'listening on' "$W/tcpdump.err" && break; sleep 0.1; done
N=5
timeout 60 rping -s -a "$SOFTROCE_IP1" -C $N > "$W/server" 2>&1 &
SRV=$!
for _ in $(seq 100); do rdma resource show cm_id 2>/dev/null | grep -q LISTEN && break; sleep 0.1; done
# the source address binding (-I) is what makes the traffic leave rxe1 and cross the veth
timeout 60 rping -c -v -a "$SOFTROCE_IP1" -I "$SOFTROCE_IP0" -C $N > "$W/client" 2>&1
crc=$?
wait $SRV; src=$?
got=$(grep -c '^ping data' "$W/client")
if [ $crc = 0 ] && [ $src = 0 ] && [ "$got" = $N ]; then
  ok "rping $SOFTROCE_IP0 -> $SOFTROCE_IP1: $got iterations"
else
  bad "rping $SOFTROCE_IP0 -> $SOFTROCE_IP1 (client rc=$crc, server rc=$src, $got/$N iterations):"
  sed 's/^/     client: /' "$W/client"; sed 's/^/     server: /' "$W/server"
fi
sleep 0.2
kill -INT $TD; wait $TD
fwd=$(tcpdump -r "$W/cap.pcap" -nn "src $SOFTROCE_IP0 and dst $SOFTROCE_IP1 and udp dst port 4791" 2>/dev/null | wc -l)
rev=$(tcpdump -r "$W/cap.pcap" -nn "src $SOFTROCE_IP1 and dst $SOFTROCE_IP0 and udp dst port 4791" 2>/dev/null | wc -l)
if [ "$fwd" -gt 0 ] && [ "$rev" -gt 0 ]; then
  ok "tcpdump on $SOFTROCE_NETDEV0 saw RoCEv2 (UDP 4791): $fwd packets $SOFTROCE_IP0->$SOFTROCE_IP1, $rev back"
else
  bad "tcpdump on $SOFTROCE_NETDEV0 saw RoCEv2 in both directions ($fwd forward, $rev back):"
  sed 's/^/     /' "$W/tcpdump.err"
fi

echo "$PASS passed, $FAIL failed"
[ $FAIL = 0 ]
