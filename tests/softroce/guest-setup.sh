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
# Knobs, from /run/softroce-ctl/setup.env: SOFTROCE_MTU (netdev MTU of va and vb).
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
CTL=/run/softroce-ctl
. $CTL/setup.env
MTU=${SOFTROCE_MTU:-1500}
fail() { echo "guest-setup: $*" >&2; exit 1; }
command -v ip >/dev/null || fail "no 'ip' on the host (iproute2)"
command -v rdma >/dev/null || fail "no 'rdma' on the host (iproute2)"

ip link set lo up
ip link add va type veth peer name vb || fail "cannot create veth pair"
ip addr add 10.77.0.1/24 dev va
ip addr add 10.77.0.2/24 dev vb
ip link set va mtu "$MTU" && ip link set vb mtu "$MTU" || fail "cannot set MTU $MTU"
ip link set va up && ip link set vb up
for f in all default va vb; do
  echo 1 > /proc/sys/net/ipv4/conf/$f/accept_local
  echo 0 > /proc/sys/net/ipv4/conf/$f/rp_filter
done
ip neigh replace 10.77.0.2 lladdr "$(cat /sys/class/net/vb/address)" dev va nud permanent
ip neigh replace 10.77.0.1 lladdr "$(cat /sys/class/net/va/address)" dev vb nud permanent
rdma link add rxe0 type rxe netdev va || fail "rdma link add rxe0 failed"
rdma link add rxe1 type rxe netdev vb || fail "rdma link add rxe1 failed"

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
G0=$(gid_index rxe0); G1=$(gid_index rxe1)
[ -n "$G0" ] && [ -n "$G1" ] || fail "no IPv4 RoCEv2 GID on rxe0/rxe1 after 5 s"

cat > /run/softroce.env <<EOF
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root
export SOFTROCE_IN_VM=1
export SOFTROCE_SHARE=$(printf %q "$SOFTROCE_SHARE")
export SOFTROCE_MTU=$MTU
export SOFTROCE_DEV0=rxe0 SOFTROCE_NETDEV0=va SOFTROCE_IP0=10.77.0.1
export SOFTROCE_DEV1=rxe1 SOFTROCE_NETDEV1=vb SOFTROCE_IP1=10.77.0.2
export SOFTROCE_GID_INDEX_RXE0=$G0 SOFTROCE_GID_INDEX_RXE1=$G1 SOFTROCE_GID_INDEX=$G0
[ -r $CTL/user.env ] && . $CTL/user.env
EOF
rdma link show
cat /run/softroce.env
