#!/bin/bash
# tests/softroce/guest-setup.sh -- runs inside the VM (as root, chrooted into the host's read-only
# "/"), before the command. run-in-vm.sh copies it into the per-run ctl dir; it is not meant to be
# run on a host.
#
# Builds the "pair" topology and writes /run/softroce.env, which the command sources:
#   va (10.77.0.1/24) <-veth-> vb (10.77.0.2/24), both in the VM's one network namespace
#   rxe0 on va, rxe1 on vb: rxe0 <-> rxe1 traffic crosses the veth as RoCEv2 (UDP 4791)
#   accept_local=1 / rp_filter=0, so vb accepts packets whose source is an address of this host
#   permanent neighbour entries for both ends (no ARP wait on the first connection)
# With SOFTROCE_RAILS=2, a second rail beside it, built the same way:
#   vc (10.78.0.1/24) <-veth-> vd (10.78.0.2/24), rxe2 on vc, rxe3 on vd
# so each side has two RDMA devices on two links (rxe0+rxe2 on the 10.77.0.1/10.78.0.1 side,
# rxe1+rxe3 on the other); the first pair keeps its names and addresses.
# Knobs, from /run/softroce-ctl/setup.env: SOFTROCE_MTU (netdev MTU of every veth end),
# SOFTROCE_RAILS (1 or 2, default 1).
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
CTL=/run/softroce-ctl
. $CTL/setup.env
MTU=${SOFTROCE_MTU:-1500}
RAILS=${SOFTROCE_RAILS:-1}
fail() { echo "guest-setup: $*" >&2; exit 1; }
command -v ip >/dev/null || fail "no 'ip' on the host (iproute2)"
command -v rdma >/dev/null || fail "no 'rdma' on the host (iproute2)"

ip link set lo up
for f in all default; do
  echo 1 > /proc/sys/net/ipv4/conf/$f/accept_local
  echo 0 > /proc/sys/net/ipv4/conf/$f/rp_filter
done

# The RoCEv2 IPv4 GID (::ffff:a.b.c.d) of each device. It is normally index 1 (index 0 is the
# fe80:: link-local GID), but the table fills in asynchronously after "rdma link add", so wait
# for it and look the index up instead of assuming it.
gid_index() {   # $1 = device; prints the index or nothing
  local d=/sys/class/infiniband/$1/ports/1/gids i
  for _ in $(seq 50); do
    for i in 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do
      [ -e "$d/$i" ] || break
      case "$(cat "$d/$i" 2>/dev/null)" in 0000:0000:0000:0000:0000:ffff:*) echo "$i"; return ;; esac
    done
    sleep 0.1
  done
}

# One rail: veth $1 <-> $2 on $3.1 / $3.2, rxe $4 on $1 and rxe $5 on $2.
rail() {
  local a=$1 b=$2 net=$3 da=$4 db=$5 f
  ip link add "$a" type veth peer name "$b" || fail "cannot create veth pair $a/$b"
  ip addr add "$net.1/24" dev "$a"
  ip addr add "$net.2/24" dev "$b"
  ip link set "$a" mtu "$MTU" && ip link set "$b" mtu "$MTU" || fail "cannot set MTU $MTU on $a/$b"
  ip link set "$a" up && ip link set "$b" up
  for f in "$a" "$b"; do
    echo 1 > /proc/sys/net/ipv4/conf/$f/accept_local
    echo 0 > /proc/sys/net/ipv4/conf/$f/rp_filter
  done
  ip neigh replace "$net.2" lladdr "$(cat /sys/class/net/$b/address)" dev "$a" nud permanent
  ip neigh replace "$net.1" lladdr "$(cat /sys/class/net/$a/address)" dev "$b" nud permanent
  rdma link add "$da" type rxe netdev "$a" || fail "rdma link add $da failed"
  rdma link add "$db" type rxe netdev "$b" || fail "rdma link add $db failed"
}

case $RAILS in 1|2) ;; *) fail "SOFTROCE_RAILS must be 1 or 2, not '$RAILS'" ;; esac
rail va vb 10.77.0 rxe0 rxe1
G0=$(gid_index rxe0); G1=$(gid_index rxe1)
[ -n "$G0" ] && [ -n "$G1" ] || fail "no IPv4 RoCEv2 GID on rxe0/rxe1 after 5 s"
RAIL2=
if [ "$RAILS" = 2 ]; then
  rail vc vd 10.78.0 rxe2 rxe3
  G2=$(gid_index rxe2); G3=$(gid_index rxe3)
  [ -n "$G2" ] && [ -n "$G3" ] || fail "no IPv4 RoCEv2 GID on rxe2/rxe3 after 5 s"
  RAIL2="export SOFTROCE_DEV2=rxe2 SOFTROCE_NETDEV2=vc SOFTROCE_IP2=10.78.0.1
export SOFTROCE_DEV3=rxe3 SOFTROCE_NETDEV3=vd SOFTROCE_IP3=10.78.0.2
export SOFTROCE_GID_INDEX_RXE2=$G2 SOFTROCE_GID_INDEX_RXE3=$G3"
fi

cat > /run/softroce.env <<EOF
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root
export SOFTROCE_IN_VM=1
export SOFTROCE_SHARE=$(printf %q "$SOFTROCE_SHARE")
export SOFTROCE_MTU=$MTU
export SOFTROCE_DEV0=rxe0 SOFTROCE_NETDEV0=va SOFTROCE_IP0=10.77.0.1
export SOFTROCE_DEV1=rxe1 SOFTROCE_NETDEV1=vb SOFTROCE_IP1=10.77.0.2
export SOFTROCE_GID_INDEX_RXE0=$G0 SOFTROCE_GID_INDEX_RXE1=$G1 SOFTROCE_GID_INDEX=$G0
export SOFTROCE_RAILS=$RAILS
$RAIL2
[ -r $CTL/user.env ] && . $CTL/user.env
EOF
rdma link show
cat /run/softroce.env
