#!/bin/bash
# tests/softroce/dscp-capture.sh BUILD_DIR
#
# Checks on the wire that verbs traffic is RoCEv2 and carries the DSCP of its QoS class, for two
# classes, in both directions. Inside the Soft-RoCE VM it captures on va (rxe0, 10.77.0.1) with
# tcpdump while dscp_traffic (tests/softroce/dscp_traffic.c, public API only) runs a server on
# rdma://10.77.0.2 and a client bound to 10.77.0.1: echo RPCs on low_latency (DSCP 46) and a
# one-sided WRITE + READ on bulk (DSCP 10). Then it decodes IP + UDP + BTH of every captured packet
# and checks:
#   - every captured packet is IPv4 UDP to port 4791 (RoCEv2);
#   - the low_latency DSCP and the bulk DSCP each appear on data packets in both directions;
#   - no data packet carries DSCP 0, and each carries one of the four classes' DSCPs;
#   - every RDMA WRITE / READ request / READ response packet carries the bulk DSCP;
#   - all packets towards one QP carry one DSCP (one QP per class);
#   - the client context's metrics text carries its RDMA port's kernel counters
#     (rrpc_nic_*_total{device="rxe0",port="1"}), promtool takes it, the port sent packets,
#     and neither device counted an RNR NAK (no receiver-not-ready, ever: the credits' promise).
# "Data packets" are all but the CM's MADs (UD to QP 1); what those carry is printed as a comment.
#
# On a host it compiles dscp_traffic against BUILD_DIR/libroce_rpc into BUILD_DIR/dscp-capture/
# and re-runs itself in a VM via run-in-vm.sh with BUILD_DIR as the shared directory. Exit 77 and
# "skipped: <reason>" when no VM can be made or BUILD_DIR has no verbs transport.
# Knobs: DSCP_CAPTURE_LL, DSCP_CAPTURE_BULK (the two DSCPs, default 46 and 10; must differ from
# each other and from control 48 / background 8); SOFTROCE_* as for run-in-vm.sh.
# The capture is kept as BUILD_DIR/dscp-capture/capture.pcap.
# Output: one "ok - ..." / "not ok - ..." line per check, last line "N passed, N failed";
# exit 0 only if nothing failed.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ $# = 1 ] || { echo "usage: tests/softroce/dscp-capture.sh BUILD_DIR" >&2; exit 2; }
BUILD=$(cd "$1" 2>/dev/null && pwd) || { echo "dscp-capture: no such directory: $1" >&2; exit 2; }
OUT=$BUILD/dscp-capture
LL=${DSCP_CAPTURE_LL:-46}
BULK=${DSCP_CAPTURE_BULK:-10}

# ---- on the host: build the traffic program, then start a VM ----------------------------------
if [ "${SOFTROCE_IN_VM:-}" != 1 ]; then
  if ! grep -q RRPC_HAVE_VERBS "$BUILD/build.ninja" 2>/dev/null; then
    echo "skipped: $BUILD was configured without the verbs transport (install libibverbs-dev librdmacm-dev, meson setup --reconfigure)"
    exit 77
  fi
  command -v tcpdump >/dev/null || PATH=$PATH:/usr/sbin:/sbin command -v tcpdump >/dev/null || {
    echo "skipped: no tcpdump on the host (the VM uses the host's; install tcpdump)"; exit 77; }
  [ -e "$BUILD/libroce_rpc/libroce_rpc.so" ] ||
    { echo "dscp-capture: $BUILD/libroce_rpc/libroce_rpc.so missing; run: ninja -C $BUILD" >&2; exit 2; }
  mkdir -p "$OUT" || exit 2
  TOP=$(cd "$HERE/../.." && pwd)
  # Built here rather than by meson, against the build tree's library (found through the rpath:
  # BUILD_DIR has the same path in the VM).
  ${CC:-cc} -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -I"$TOP/include" \
      -o "$OUT/dscp_traffic" "$HERE/dscp_traffic.c" \
      -L"$BUILD/libroce_rpc" -Wl,-rpath,"$BUILD/libroce_rpc" -lroce_rpc -lpthread ||
    { echo "dscp-capture: compiling dscp_traffic failed" >&2; exit 2; }
  # Only BUILD_DIR is shared with the VM (read-write); this script goes there too, since the
  # source tree may be somewhere the VM cannot see (/tmp is a tmpfs there).
  cp "$HERE/dscp-capture.sh" "$OUT/dscp-capture.sh" || exit 2
  export DSCP_CAPTURE_LL=$LL DSCP_CAPTURE_BULK=$BULK
  SOFTROCE_PASS_VARS="${SOFTROCE_PASS_VARS:+$SOFTROCE_PASS_VARS }DSCP_CAPTURE_LL DSCP_CAPTURE_BULK" \
    exec "$HERE/run-in-vm.sh" "$BUILD" bash "$OUT/dscp-capture.sh" "$BUILD"
fi

# ---- in the VM --------------------------------------------------------------------------------
PASS=0 FAIL=0
ok()  { PASS=$((PASS + 1)); echo "ok - $*"; }
bad() { FAIL=$((FAIL + 1)); echo "not ok - $*"; }
W=$(mktemp -d)
TD=
trap '[ -n "$TD" ] && kill -INT $TD 2>/dev/null; rm -rf "$W"' EXIT
NET=${SOFTROCE_NETDEV0:-va} IP0=${SOFTROCE_IP0:-10.77.0.1} IP1=${SOFTROCE_IP1:-10.77.0.2}

tcpdump -i "$NET" --immediate-mode -B 16384 -nn -w "$W/x.pcap" udp port 4791 2> "$W/tcpdump.err" &
TD=$!
for _ in $(seq 100); do grep -q 'listening on' "$W/tcpdump.err" && break; sleep 0.1; done
grep -q 'listening on' "$W/tcpdump.err" || { echo "# tcpdump did not start:"; sed 's/^/#   /' "$W/tcpdump.err"; }

timeout 300 "$OUT/dscp_traffic" -s "$IP1" -c "$IP0" -l "$LL" -b "$BULK" -m "$W/metrics" > "$W/traffic" 2>&1
TRC=$?
sleep 0.3   # let the last ACKs and CM messages out
kill -INT $TD 2>/dev/null; wait $TD; TD=
cp "$W/x.pcap" "$OUT/capture.pcap" 2>/dev/null

if [ $TRC = 0 ]; then
  ok "dscp_traffic ran: RPCs on low_latency, one-sided WRITE + READ on bulk"
  sed 's/^/#   /' "$W/traffic"
else
  bad "dscp_traffic exited $TRC$([ $TRC = 124 ] && echo ' (timeout)'):"
  sed 's/^/#   /' "$W/traffic"
fi
grep -E 'packets (captured|dropped by kernel)' "$W/tcpdump.err" | sed 's/^/# tcpdump: /'

# The configured DSCPs, as dscp_traffic printed them (defaults if it did not get that far).
CTRL=48 BG=8
for kv in $(sed -n 's/^dscp //p' "$W/traffic" | head -1); do
  case $kv in control=*) CTRL=${kv#*=} ;; background=*) BG=${kv#*=} ;;
              low_latency=*) LL=${kv#*=} ;; bulk=*) BULK=${kv#*=} ;; esac
done

# One line per packet: src dst proto dport dscp ecn opcode dqpn, from the raw bytes (tcpdump -x
# prints each packet from the IP header on, in hex). proto/dport/opcode/dqpn are "-" when absent.
tcpdump -r "$W/x.pcap" -nn -x 2>/dev/null | awk '
  function flush(   v, ihl, tos, p, u, b) {
    if (hex == "") return
    v = substr(hex, 1, 1)
    if (v != "4") { print "?", "?", "-", "-", "-", "-", "-", "-"; hex = ""; return }
    ihl = hx(substr(hex, 2, 1)) * 4
    tos = hx(substr(hex, 3, 2))
    p = hx(substr(hex, 19, 2))
    src = ip(substr(hex, 25, 8)); dst = ip(substr(hex, 33, 8))
    if (p != 17) { print src, dst, p, "-", int(tos / 4), tos % 4, "-", "-"; hex = ""; return }
    u = ihl * 2 + 1; b = u + 16
    print src, dst, p, hx(substr(hex, u + 4, 4)), int(tos / 4), tos % 4,
          substr(hex, b, 2), hx(substr(hex, b + 10, 6))
    hex = ""
  }
  function hx(s,   i, n) {   # mawk has no strtonum
    n = 0; s = tolower(s)
    for (i = 1; i <= length(s); i++) n = n * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1
    return n
  }
  function ip(h) {
    return hx(substr(h, 1, 2)) "." hx(substr(h, 3, 2)) "." \
           hx(substr(h, 5, 2)) "." hx(substr(h, 7, 2))
  }
  /^[ \t]+0x[0-9a-f]+:/ { for (i = 2; i <= NF; i++) hex = hex $i; next }
  { flush() }
  END { flush() }' > "$W/pkts"

TOTAL=$(grep -c . "$W/pkts")
NOTROCE=$(awk '$3 != 17 || $4 != 4791' "$W/pkts" | wc -l)
if [ "$TOTAL" -gt 0 ] && [ "$NOTROCE" = 0 ]; then
  ok "all $TOTAL captured packets on $NET are IPv4 UDP to port 4791 (RoCEv2)"
else
  bad "captured packets are RoCEv2: $TOTAL captured, $NOTROCE not IPv4 UDP/4791"
  awk '$3 != 17 || $4 != 4791' "$W/pkts" | sort | uniq -c | head -5 | sed 's/^/#   /'
fi
# Data = every RoCEv2 packet but the CM MADs (UD SEND to QP 1).
awk '$3 == 17 && $4 == 4791 && $8 != 1' "$W/pkts" > "$W/data"
awk '$3 == 17 && $4 == 4791 && $8 == 1' "$W/pkts" > "$W/cm"

# Per (direction, DSCP) summary, as a comment.
echo "# data packets by direction and DSCP:"
awk '{ print $1 " -> " $2 "  dscp " $5 }' "$W/data" | sort | uniq -c | sed 's/^/#   /'
echo "# CM packets (MADs to QP 1) by direction and DSCP:"
awk '{ print $1 " -> " $2 "  dscp " $5 }' "$W/cm" | sort | uniq -c | sed 's/^/#   /'
[ -s "$W/cm" ] || echo "#   none"
ECN=$(awk '$6 != 0' "$W/pkts" | wc -l)
[ "$ECN" = 0 ] || echo "# $ECN packets have ECN bits set"

both_ways() {   # $1 class name, $2 DSCP
  local f r
  f=$(awk -v s="$IP0" -v d="$IP1" -v x="$2" '$1 == s && $2 == d && $5 == x' "$W/data" | wc -l)
  r=$(awk -v s="$IP1" -v d="$IP0" -v x="$2" '$1 == s && $2 == d && $5 == x' "$W/data" | wc -l)
  if [ "$f" -gt 0 ] && [ "$r" -gt 0 ]; then
    ok "$1 (DSCP $2): $f data packets $IP0 -> $IP1, $r back"
  else
    bad "$1 (DSCP $2) in both directions: $f data packets $IP0 -> $IP1, $r back"
  fi
}
both_ways low_latency "$LL"
both_ways bulk "$BULK"

ND=$(grep -c . "$W/data")
Z=$(awk '$5 == 0' "$W/data" | wc -l)
if [ "$ND" -gt 0 ] && [ "$Z" = 0 ]; then ok "no data packet carries DSCP 0 ($ND data packets)"
else bad "no data packet carries DSCP 0: $Z of $ND do"; fi

OTHER=$(awk -v a="$CTRL" -v b="$LL" -v c="$BULK" -v d="$BG" '$5 != a && $5 != b && $5 != c && $5 != d' "$W/data" | wc -l)
if [ "$ND" -gt 0 ] && [ "$OTHER" = 0 ]; then
  ok "every data packet carries a class DSCP (control $CTRL, low_latency $LL, bulk $BULK, background $BG)"
else bad "every data packet carries a class DSCP: $OTHER of $ND carry another"; fi

# RC opcodes 0x06-0x0b RDMA WRITE, 0x0c READ request, 0x0d-0x10 READ response: only the bulk
# class does one-sided operations in dscp_traffic.
awk '$7 ~ /^(0[6-9a-f]|10)$/' "$W/data" > "$W/onesided"
OF=$(awk -v s="$IP0" '$1 == s' "$W/onesided" | wc -l)
OR=$(awk -v s="$IP1" '$1 == s' "$W/onesided" | wc -l)
OB=$(awk -v x="$BULK" '$5 != x' "$W/onesided" | wc -l)
if [ "$OF" -gt 0 ] && [ "$OR" -gt 0 ] && [ "$OB" = 0 ]; then
  ok "RDMA WRITE/READ packets all carry the bulk DSCP $BULK: $OF $IP0 -> $IP1 (WRITE, READ request), $OR back (READ response)"
else
  bad "RDMA WRITE/READ packets carry the bulk DSCP $BULK: $OF forward, $OR back, $OB with another DSCP"
  awk '{ print $1 " -> " $2 "  opcode 0x" $7 "  dscp " $5 }' "$W/onesided" | sort | uniq -c | head -8 | sed 's/^/#   /'
fi

MIX=$(awk '{ k = $2 " qp " $8; if (k in d && d[k] != $5) m[k] = 1; d[k] = $5; n[k] = 1 }
           END { c = 0; for (k in m) c++; q = 0; for (k in n) q++; print c, q }' "$W/data")
read -r MIXED QPS <<< "$MIX"
if [ "$QPS" -gt 0 ] && [ "$MIXED" = 0 ]; then ok "each of the $QPS destination QPs receives a single DSCP"
else
  bad "each destination QP receives a single DSCP: $MIXED of $QPS receive several"
  awk '{ k = $2 " qp " $8; if (!((k, $5) in s)) { s[k, $5] = 1; l[k] = l[k] " " $5 } }
       END { for (k in l) if (l[k] ~ / .* /) print "#   to " k ": DSCPs" l[k] }' "$W/data" | sort
fi

# The NIC counters in the client context's metrics text (its device: rxe0, the one bound to IP0).
DEV0=${SOFTROCE_DEV0:-rxe0}
M="$W/metrics"
metric() { awk -v n="$1{device=\"$DEV0\",port=\"1\"}" '$1 == n { print $2 }' "$M"; }
SENT=$(metric rrpc_nic_sent_pkts_total 2>/dev/null)
if [ -s "$M" ] && [ -n "$SENT" ] && [ "$SENT" -gt 0 ]; then
  ok "the client's metrics carry $DEV0's kernel counters: rrpc_nic_sent_pkts_total $SENT," \
     "$(grep -c '^rrpc_nic_' "$M") rrpc_nic_* samples"
else
  bad "the client's metrics carry $DEV0's kernel counters (rrpc_nic_sent_pkts_total > 0): got '${SENT}'"
  grep '^rrpc_nic_' "$M" 2>/dev/null | head -5 | sed 's/^/#   /'
fi
if [ ! -x /usr/bin/promtool ]; then
  echo "# promtool not installed (prometheus package): the metrics text was not linted"
elif /usr/bin/promtool check metrics < "$M" > "$W/promtool" 2>&1; then
  ok "promtool check metrics takes the client's metrics text"
else
  bad "promtool check metrics takes the client's metrics text"; sed 's/^/#   /' "$W/promtool" | head -8
fi
# No RNR NAK on either device, read from the kernel directly: the receiver always had a buffer.
RNR=0
for d in /sys/class/infiniband/*/ports/1/hw_counters; do
  for c in rcvd_rnr_err send_rnr_err; do
    v=$(cat "$d/$c" 2>/dev/null || echo 0)
    [ "$v" = 0 ] || { RNR=$((RNR + v)); echo "#   $d/$c = $v"; }
  done
done
MRNR=$(metric rrpc_nic_rcvd_rnr_err_total)
if [ "$RNR" = 0 ] && [ "$MRNR" = 0 ]; then ok "no RNR NAK sent or received on any device (kernel counters, and the metrics agree)"
else bad "no RNR NAK sent or received: the kernel counts $RNR, the metrics say '${MRNR}'"; fi

echo "$PASS passed, $FAIL failed"
[ $FAIL = 0 ]
