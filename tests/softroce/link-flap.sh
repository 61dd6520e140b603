#!/bin/bash
# tests/softroce/link-flap.sh BUILD_DIR
#
# Fault test over verbs: takes the client's link down and up again under a live connection. In
# the Soft-RoCE VM, link_flap (tests/softroce/link_flap.c, public API only) runs a server on
# rdma://10.77.0.2:0 and a client bound to 10.77.0.1 (rxe0 on va), with RRPC_KEEPALIVE_MS=200
# (so a dead peer is declared after 600 ms) and 300 ms call deadlines, makes echo calls, then runs
# `ip link set va down`, destroys a second client context, keeps calling for half the outage and
# tries a connect; 4 s after the down the script (in the background, not link_flap) runs
# `ip link set va up` and restores va's permanent neighbour entry for 10.77.0.2, which the
# link-down flushed (guest-setup.sh made it).
# A watchdog in link_flap prints "# STALL:" with every thread's kernel stack when it makes no
# progress for 3 s. Checks:
#   - calls before the outage succeed;
#   - a context destroyed during the outage returns within 2 s + 1.5 s, leaving its cm_ids to the
#     reaper thread with a warning (their DREQ waits for the port);
#   - calls during the outage fail, each with RRPC_E_DEADLINE, RRPC_E_CONN_LOST or RRPC_E_CLOSED,
#     none taking longer than its deadline + 1 s; a connect during the outage fails in bounded time;
#   - after the link is up a NEW connection comes up (retried for up to 30 s) and carries calls;
#   - the old connection went down with a reason (or, if it survived, its calls end in bounded time);
#   - everything closes, and the program ends within LINK_FLAP_TIMEOUT seconds (default 120).
#
# On a host it compiles link_flap against BUILD_DIR/libroce_rpc into BUILD_DIR/link-flap/ and
# re-runs itself in a VM via run-in-vm.sh with BUILD_DIR as the shared directory (as
# dscp-capture.sh). Exit 77 and "skipped: <reason>" when no VM can be made or BUILD_DIR has no
# verbs transport. Knobs: LINK_FLAP_OUTAGE_MS (4000: longer than the 2 s a destroyed context
# waits for its cm_ids), LINK_FLAP_KEEPALIVE_MS (200), LINK_FLAP_DEADLINE_MS (300),
# LINK_FLAP_TIMEOUT (120); SOFTROCE_* as for run-in-vm.sh.
# Output: "ok - ..." / "not ok - ..." per check, "# ..." observations, last line
# "N passed, N failed"; exit 0 only if nothing failed.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ $# = 1 ] || { echo "usage: tests/softroce/link-flap.sh BUILD_DIR" >&2; exit 2; }
BUILD=$(cd "$1" 2>/dev/null && pwd) || { echo "link-flap: no such directory: $1" >&2; exit 2; }
OUT=$BUILD/link-flap
OUTAGE=${LINK_FLAP_OUTAGE_MS:-4000}
KA=${LINK_FLAP_KEEPALIVE_MS:-200}
DL=${LINK_FLAP_DEADLINE_MS:-300}
TMO=${LINK_FLAP_TIMEOUT:-120}

# ---- on the host: build the program, then start a VM ------------------------------------------
if [ "${SOFTROCE_IN_VM:-}" != 1 ]; then
  if ! grep -q RRPC_HAVE_VERBS "$BUILD/build.ninja" 2>/dev/null; then
    echo "skipped: $BUILD was configured without the verbs transport (install libibverbs-dev librdmacm-dev, meson setup --reconfigure)"
    exit 77
  fi
  [ -e "$BUILD/libroce_rpc/libroce_rpc.so" ] ||
    { echo "link-flap: $BUILD/libroce_rpc/libroce_rpc.so missing; run: ninja -C $BUILD" >&2; exit 2; }
  mkdir -p "$OUT" || exit 2
  TOP=$(cd "$HERE/../.." && pwd)
  ${CC:-cc} -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -I"$TOP/include" \
      -o "$OUT/link_flap" "$HERE/link_flap.c" \
      -L"$BUILD/libroce_rpc" -Wl,-rpath,"$BUILD/libroce_rpc" -lroce_rpc -lpthread ||
    { echo "link-flap: compiling link_flap failed" >&2; exit 2; }
  cp "$HERE/link-flap.sh" "$OUT/link-flap.sh" || exit 2
  export LINK_FLAP_OUTAGE_MS=$OUTAGE LINK_FLAP_KEEPALIVE_MS=$KA LINK_FLAP_DEADLINE_MS=$DL \
         LINK_FLAP_TIMEOUT=$TMO
  SOFTROCE_PASS_VARS="${SOFTROCE_PASS_VARS:+$SOFTROCE_PASS_VARS }LINK_FLAP_OUTAGE_MS LINK_FLAP_KEEPALIVE_MS LINK_FLAP_DEADLINE_MS LINK_FLAP_TIMEOUT" \
    exec "$HERE/run-in-vm.sh" "$BUILD" bash "$OUT/link-flap.sh" "$BUILD"
fi

# ---- in the VM --------------------------------------------------------------------------------
ulimit -l unlimited
NET=${SOFTROCE_NETDEV0:-va} PEER=${SOFTROCE_NETDEV1:-vb} DEV=${SOFTROCE_DEV0:-rxe0}
IP0=${SOFTROCE_IP0:-10.77.0.1} IP1=${SOFTROCE_IP1:-10.77.0.2}
W=$(mktemp -d)
trap 'ip link set "$NET" up 2>/dev/null; rm -rf "$W"' EXIT
# One line of state: netdev, rxe port, va's neighbour entry for the peer address.
cat > "$W/state" <<EOF
printf 'link %s, $DEV port %s, neigh %s' "\$(cat /sys/class/net/$NET/operstate)" \\
  "\$(cat /sys/class/infiniband/$DEV/ports/1/state)" "\$(ip neigh show $IP1 dev $NET | head -1)"
EOF
# link_flap runs "down" at the start of the outage; it takes va down and schedules, in the
# background and outside link_flap, bringing it up again OUTAGE_MS later, so that a stalled
# link_flap cannot keep the link down. Taking va down flushes its neighbour entries, permanent
# ones included; the up restores the one guest-setup.sh made. At the end of the outage link_flap
# runs "wait-up", which returns once the link is back.
cat > "$W/up" <<EOF
echo "# before up: \$(bash $W/state)"
ip link set $NET up
ip neigh replace $IP1 lladdr \$(cat /sys/class/net/$PEER/address) dev $NET nud permanent
echo "# link up \$(( (\$(date +%s%N) - \$(cat $W/down.at)) / 1000000 )) ms after the down"
touch $W/up.done
EOF
cat > "$W/down" <<EOF
date +%s%N > $W/down.at
ip link set $NET down
echo "# after down: \$(bash $W/state)"
( sleep $((OUTAGE / 1000)).$(printf %03d $((OUTAGE % 1000))); bash $W/up ) < /dev/null &
EOF
cat > "$W/wait-up" <<EOF
for _ in \$(seq 600); do [ -e $W/up.done ] && exit 0; sleep 0.1; done
echo "# the link did not come up"; exit 1
EOF
echo "# before: $(bash "$W/state")"

T0=$(date +%s%N)
RRPC_KEEPALIVE_MS=$KA timeout -k 5 "$TMO" "$OUT/link_flap" -s "$IP1" -c "$IP0" -o "$OUTAGE" \
  -t "$DL" -d "bash $W/down" -u "bash $W/wait-up" > "$W/log" 2>&1
RC=$?
T1=$(date +%s%N)
if [ -e "$W/down.at" ]; then   # let the background "up" finish, if link_flap ended first
  for _ in $(seq $((OUTAGE / 100 + 50))); do [ -e "$W/up.done" ] && break; sleep 0.1; done
fi
cat "$W/log"
echo "# after: $(bash "$W/state")"
PASS=$(grep -c '^ok - ' "$W/log")
FAIL=$(grep -c '^not ok - ' "$W/log")
ok()  { PASS=$((PASS + 1)); echo "ok - $*"; }
bad() { FAIL=$((FAIL + 1)); echo "not ok - $*"; }
MS=$(( (T1 - T0) / 1000000 ))
case $RC in
  0) ok "link_flap finished in $MS ms (bound ${TMO} s)" ;;
  1) if [ "$FAIL" -gt 0 ]; then ok "link_flap finished in $MS ms (bound ${TMO} s), with failed checks"
     else bad "link_flap exited 1 without a failed check"; fi ;;
  124|137) bad "link_flap did not finish within ${TMO} s (killed: hang)" ;;
  *) bad "link_flap exited $RC after $MS ms$([ $RC -gt 128 ] && echo " (signal $((RC - 128)): crash)")" ;;
esac
echo "$PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
