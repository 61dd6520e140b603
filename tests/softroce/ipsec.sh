#!/bin/bash
# tests/softroce/ipsec.sh BUILD_DIR
#
# RoCEv2 and tcp under ESP (issue #30), in the Soft-RoCE VM: rrpc-xfrm (agent/, libnl-xfrm-3)
# installs the host pair 10.77.0.1 <-> 10.77.0.2 (AES-GCM, transport mode, random keys; both
# addresses are the VM's, so --loopback installs both hosts' policies), then checks:
#   - the states and policies are in the kernel (ip xfrm state / policy);
#   - dscp_traffic over rdma:// and over tcp:// (RPCs on low_latency, WRITE + READ on bulk) works
#     with ESP on, and a capture on "any" holds ESP packets between the two addresses with the
#     classes' DSCPs in the outer header (transport mode), and no RoCEv2 (UDP 4791) or tcp
#     payload between them in clear;
#   - the SAs counted the traffic (rrpc-xfrm stats), with no integrity or replay failure;
#   - the conformance suite over verbs passes with ESP on;
#   - rrpc-xfrm del removes all of it (no state or policy left), and a second del says what was
#     not there (exit 1).
# With BENCH_ESP=1 it also runs rrpc-bench (rtt and 1 MiB large over verbs and tcp) in clear and
# under ESP in the same VM, for the cost of ESP (BUILD_DIR/ipsec/bench-{clear,esp}.txt).
# Skips (77) without libnl-xfrm-3 (no rrpc-xfrm), without a VM, or when the VM kernel has no
# ESP/GCM (the reason printed). Output: "ok - ..." / "not ok - ..." lines, then "N passed, N failed".
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ $# = 1 ] || { echo "usage: tests/softroce/ipsec.sh BUILD_DIR" >&2; exit 2; }
BUILD=$(cd "$1" 2>/dev/null && pwd) || { echo "ipsec: no such directory: $1" >&2; exit 2; }
OUT=$BUILD/ipsec

if [ "${SOFTROCE_IN_VM:-}" != 1 ]; then
  grep -q RRPC_HAVE_VERBS "$BUILD/build.ninja" 2>/dev/null ||
    { echo "skipped: $BUILD was configured without the verbs transport"; exit 77; }
  [ -x "$BUILD/agent/rrpc-xfrm" ] ||
    { echo "skipped: no $BUILD/agent/rrpc-xfrm (install libnl-xfrm-3-dev, meson setup --reconfigure)"; exit 77; }
  command -v tcpdump >/dev/null || PATH=$PATH:/usr/sbin:/sbin command -v tcpdump >/dev/null ||
    { echo "skipped: no tcpdump on the host (the VM uses the host's)"; exit 77; }
  mkdir -p "$OUT" || exit 2
  TOP=$(cd "$HERE/../.." && pwd)
  ${CC:-cc} -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -I"$TOP/include" \
      -o "$OUT/dscp_traffic" "$HERE/dscp_traffic.c" \
      -L"$BUILD/libroce_rpc" -Wl,-rpath,"$BUILD/libroce_rpc" -lroce_rpc -lpthread ||
    { echo "ipsec: compiling dscp_traffic failed" >&2; exit 2; }
  cp "$HERE/ipsec.sh" "$OUT/ipsec.sh" || exit 2
  SOFTROCE_PASS_VARS="${SOFTROCE_PASS_VARS:+$SOFTROCE_PASS_VARS }BENCH_ESP" \
    exec "$HERE/run-in-vm.sh" "$BUILD" bash "$OUT/ipsec.sh" "$BUILD"
fi

# ---- in the VM --------------------------------------------------------------------------------
PASS=0 FAIL=0
ok()  { PASS=$((PASS + 1)); echo "ok - $*"; }
bad() { FAIL=$((FAIL + 1)); echo "not ok - $*"; }
W=$(mktemp -d)
TD=
XF="$BUILD/agent/rrpc-xfrm"
IP0=${SOFTROCE_IP0:-10.77.0.1} IP1=${SOFTROCE_IP1:-10.77.0.2}
PAIR=("$IP0" "$IP1" --spi-out 0x1001 --spi-in 0x1002 --loopback)
cleanup() { [ -n "$TD" ] && kill -INT $TD 2>/dev/null; "$XF" del "${PAIR[@]}" >/dev/null 2>&1; rm -rf "$W"; }
trap cleanup EXIT
ulimit -l unlimited

if ! "$XF" add "${PAIR[@]}" --random-keys --lifetime 3600 2> "$W/add.err"; then
  if grep -q "the kernel needs" "$W/add.err"; then
    echo "skipped: the VM kernel cannot make the ESP states: $(cat "$W/add.err")"
    echo "  (tests/softroce/prepare.sh puts the IPsec modules in the initramfs; is it rebuilt?)"
    exit 77
  fi
  bad "rrpc-xfrm add: $(cat "$W/add.err")"
  echo "$PASS passed, $FAIL failed"; exit 1
fi
NS=$(ip xfrm state | grep -c '^src')
NP=$(ip xfrm policy | grep -c '^src')
if [ "$NS" = 2 ] && [ "$NP" = 4 ] && ip xfrm state | grep -q 'rfc4106(gcm(aes))'; then
  ok "rrpc-xfrm add installed 2 AES-GCM states and 4 policies (both hosts' in and out)"
else
  bad "rrpc-xfrm add installed 2 states and 4 policies: $NS states, $NP policies"
  ip xfrm state | sed 's/^/#   /'; ip xfrm policy | sed 's/^/#   /'
fi

tcpdump -i any --immediate-mode -B 16384 -nn -w "$W/x.pcap" "host $IP0 and host $IP1" 2> "$W/tcpdump.err" &
TD=$!
for _ in $(seq 100); do grep -q 'listening on' "$W/tcpdump.err" && break; sleep 0.1; done
for t in rdma tcp; do
  if timeout 300 "$OUT/dscp_traffic" -t $t -s "$IP1" -c "$IP0" -n 50 -k 256 > "$W/traffic.$t" 2>&1; then
    ok "dscp_traffic over $t:// with ESP on: 50 RPCs, a 256 KiB WRITE + READ checked"
  else
    bad "dscp_traffic over $t:// with ESP on"; sed 's/^/#   /' "$W/traffic.$t"
  fi
done
sleep 0.3
kill -INT $TD 2>/dev/null; wait $TD; TD=
cp "$W/x.pcap" "$OUT/capture.pcap" 2>/dev/null
# proto, and for UDP the destination port, and the DSCP of every captured IPv4 packet
tcpdump -nn -v -r "$W/x.pcap" 2>/dev/null |
  awk '/ tos 0x/ { match($0, /tos 0x[0-9a-f]+/); tos = substr($0, RSTART + 6, RLENGTH - 6)
                   p = "?"; if ($0 ~ /proto ESP/) p = "esp"; else if ($0 ~ /proto UDP/) p = "udp"
                   else if ($0 ~ /proto TCP/) p = "tcp"; print p, tos }' > "$W/pkts"
NESP=$(awk '$1 == "esp"' "$W/pkts" | wc -l)
NCLEAR=$(awk '$1 == "udp" || $1 == "tcp"' "$W/pkts" | wc -l)
if [ "$NESP" -gt 0 ] && [ "$NCLEAR" = 0 ]; then
  ok "the capture between $IP0 and $IP1 holds $NESP ESP packets and no UDP or tcp packet in clear"
else
  bad "ESP only between $IP0 and $IP1: $NESP ESP, $NCLEAR UDP/tcp in clear"
  sort "$W/pkts" | uniq -c | head | sed 's/^/#   /'
fi
# DSCP 46 (low_latency) = tos 0xb8, DSCP 10 (bulk) = tos 0x28, in the ESP packets' outer header
if awk '$1 == "esp" && $2 == "b8"' "$W/pkts" | grep -q . && awk '$1 == "esp" && $2 == "28"' "$W/pkts" | grep -q .; then
  ok "ESP packets carry the classes' DSCPs in the outer header (46 low_latency, 10 bulk)"
else
  bad "ESP packets carry the classes' DSCPs (tos b8 and 28)"
  awk '$1 == "esp" { print "tos 0x" $2 }' "$W/pkts" | sort | uniq -c | sed 's/^/#   /'
fi
"$XF" stats "${PAIR[@]:0:6}" > "$W/stats" 2>&1
OUTP=$(awk '$1 == "out" { sub("packets=", "", $3); print $3 }' "$W/stats")
INP=$(awk '$1 == "in" { sub("packets=", "", $3); print $3 }' "$W/stats")
FAILS=$(grep -o '_fails=[0-9]*' "$W/stats" | cut -d= -f2 | paste -sd+ | bc 2>/dev/null || echo "?")
if [ "${OUTP:-0}" -gt 0 ] && [ "${INP:-0}" -gt 0 ] && [ "$FAILS" = 0 ]; then
  ok "the SAs counted the traffic: $OUTP packets out, $INP in, no integrity or replay failure"
else
  bad "the SAs counted the traffic with no failure"; sed 's/^/#   /' "$W/stats"
fi

export RRPC_TEST_TRANSPORT=verbs RRPC_TEST_SERVER=$IP1 RRPC_TEST_CLIENT_SRC=$IP0
if timeout 900 "$BUILD/tests/conformance" > "$W/conf" 2>&1; then
  ok "the conformance suite over verbs passes with ESP on ($(grep -c '^\[       OK \]' "$W/conf") tests OK)"
else
  bad "the conformance suite over verbs with ESP on"; grep -E 'FAILED|Error' "$W/conf" | head | sed 's/^/#   /'
fi
unset RRPC_TEST_TRANSPORT RRPC_TEST_SERVER RRPC_TEST_CLIENT_SRC

if [ "${BENCH_ESP:-0}" = 1 ]; then
  B=$BUILD/bench/rrpc-bench
  for mode in esp clear; do
    [ $mode = clear ] && "$XF" del "${PAIR[@]}" > /dev/null 2>&1
    "$B" server --host "$IP1" --port 17600 > "$W/bs.$mode" 2>&1 &
    SP=$!
    for _ in $(seq 100); do grep -q running "$W/bs.$mode" && break; sleep 0.1; done
    timeout 300 "$B" client --host "$IP1" --port 17600 --src "$IP0" --transport verbs,tcp \
      --tests rtt,large --duration 1 --no-progress > "$OUT/bench-$mode.txt" 2>&1
    kill $SP 2>/dev/null; wait $SP 2>/dev/null
    echo "# rrpc-bench with $mode: $OUT/bench-$mode.txt"
  done
  "$XF" add "${PAIR[@]}" --random-keys > /dev/null 2>&1   # for the del checks below
fi

"$XF" del "${PAIR[@]}" 2> "$W/del.err"; RC=$?
NS=$(ip xfrm state | grep -c '^src'); NP=$(ip xfrm policy | grep -c '^src')
if [ $RC = 0 ] && [ "$NS" = 0 ] && [ "$NP" = 0 ]; then
  ok "rrpc-xfrm del removed every state and policy"
else
  bad "rrpc-xfrm del removed everything: exit $RC, $NS states and $NP policies left: $(cat "$W/del.err")"
fi
"$XF" del "${PAIR[@]}" 2> "$W/del2.err"; RC=$?
if [ $RC = 1 ] && grep -q "were not installed" "$W/del2.err"; then
  ok "a second del fails and says what was not there: $(cat "$W/del2.err")"
else
  bad "a second del fails (exit 1) and says so: exit $RC, $(cat "$W/del2.err")"
fi

echo "$PASS passed, $FAIL failed"
[ $FAIL = 0 ]
