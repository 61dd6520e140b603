#!/bin/bash
# tests/softroce/ipsec.sh BUILD_DIR
#
# RoCEv2 and tcp under ESP (issue #30), in the Soft-RoCE VM: rrpc-xfrm (agent/, libnl-xfrm-3)
# installs the host pair 10.77.0.1 <-> 10.77.0.2 (AES-GCM, transport mode, random keys; both
# addresses are the VM's, so --loopback installs both hosts' policies), then checks:
#   - the states and policies are in the kernel (ip xfrm state / policy);
#   - dscp_traffic over rdma:// and over tcp:// (RPCs on low_latency, WRITE + READ on bulk) works
#     with ESP on, and a capture on "any" shows every packet sent between the two addresses as
#     ESP (none in clear: no RoCEv2 UDP 4791, no tcp), with the classes' DSCPs in the outer header
#     (transport mode); a decrypted packet is seen again "In" in clear on "any", and only so;
#   - the SAs counted the traffic (rrpc-xfrm stats), with no integrity or replay failure;
#   - the conformance suite over verbs passes with ESP on (but for two tests whose deadlines
#     ESP in software on a TCG guest cannot meet; RRPC_TEST_SKIP names them);
#   - rrpc-xfrm del removes all of it (no state or policy left), and a second del says what was
#     not there (exit 1);
#   - rrpc-agent: two agents (10.77.0.1 initiates, 10.77.0.2 answers) agree the keys over TLS 1.3
#     and pair; the responder refuses garbage and an agent whose certificate names another
#     address, and keeps serving; RPCs and WRITE + READ over rdma:// run for 30 s across at least
#     two rekeys (lifetime 8 s) and none fails: the calls the clients made, the calls the servers
#     handled and the WRITEs found in the servers' regions all agree; the initiator's /metrics
#     (promtool check metrics) counts the rekeys, the pair and the SAs' packets, no ESP error;
#     with netem corrupting 2 % of the pair's ESP packets (on lo and the veth's two ends: a prio
#     qdisc and a u32 filter on IP protocol 50), RPCs and WRITE + READ over rdma:// run on (rxe
#     retransmits) or fail cleanly, never with wrong data, the kernel counts the ICV failures,
#     and a run after it is clean;
#     stopped, the agents leave no state or policy;
#   - RRPC_REQUIRE_ESP: a server accepts a client whose host pair the agent confirms, refuses it
#     over tcp:// (with the reason) and rdma:// once there is no pair, and when no agent answers;
#   - two hosts for real (network namespaces joined by a veth, one agent in each, each installing
#     its own view): rrpc-bench over tcp:// runs and every packet on the veth is ESP; then with
#     netem corrupting 2 % of b's packets on the veth, a's inbound SA drops the tampered ones for
#     their ICV (counted by `ip -s xfrm state` and by a's /metrics alike), tcp retransmits, and
#     rrpc-bench still completes with its calls verified; with netem gone it runs clean again;
#     both agents report (--broker) the pair to an rrpcd in a, which takes both reports
#     (rrpcd_agents 2 at its /metrics, each agent's report naming the other), and drops b's when
#     b's agent stops.
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
  cp "$HERE/ipsec.sh" "$HERE/agent-certs.sh" "$HERE/../../scripts/make-dev-certs.sh" "$OUT/" || exit 2
  # ESP in software on a TCG guest is slow: the conformance suite alone takes minutes here.
  export SOFTROCE_TIMEOUT=${SOFTROCE_TIMEOUT:-1500}
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
# Policies of the pair: the agents' per-socket bypass policies ("socket in/out") do not count.
npol() { ip xfrm policy | grep -cE '^[[:space:]]+dir (in|out|fwd)'; }

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
NP=$(npol)
if [ "$NS" = 2 ] && [ "$NP" = 4 ] && [ "$(ip xfrm state | grep -c 'rfc4106(gcm(aes))')" = 2 ]; then
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
# Direction, protocol and TOS of every captured IPv4 packet.  On "any", a packet ESP decrypted is
# seen once more, "In", in clear, after the transform: what left ("Out") is what was on the wire.
tcpdump -nn -v -r "$W/x.pcap" 2>/dev/null |
  awk '/tos 0x/ { match($0, /tos 0x[0-9a-f]+/); tos = substr($0, RSTART + 6, RLENGTH - 6)
                  p = "?"; if ($0 ~ /proto ESP/) p = "esp"; else if ($0 ~ /proto UDP/) p = "udp"
                  else if ($0 ~ /proto TCP/) p = "tcp"; print $3, p, tos }' > "$W/pkts"
NESP=$(awk '$1 == "Out" && $2 == "esp"' "$W/pkts" | wc -l)
NCLEAR=$(awk '$1 == "Out" && $2 != "esp"' "$W/pkts" | wc -l)
NDEC=$(awk '$1 == "In" && $2 != "esp"' "$W/pkts" | wc -l)
if [ "$NESP" -gt 0 ] && [ "$NCLEAR" = 0 ]; then
  ok "every packet sent between $IP0 and $IP1 is ESP: $NESP sent, none in clear ($NDEC seen again in clear after decryption)"
else
  bad "ESP only between $IP0 and $IP1: $NESP ESP sent, $NCLEAR sent in clear"
  sort "$W/pkts" | uniq -c | head | sed 's/^/#   /'
fi
# DSCP 46 (low_latency) = tos 0xb8, DSCP 10 (bulk) = tos 0x28, in the ESP packets' outer header
# (counted, not `| grep -q`: under pipefail an early grep exit fails the pipeline by SIGPIPE)
NLL=$(awk '$2 == "esp" && $3 == "b8"' "$W/pkts" | wc -l)
NBULK=$(awk '$2 == "esp" && $3 == "28"' "$W/pkts" | wc -l)
if [ "$NLL" -gt 0 ] && [ "$NBULK" -gt 0 ]; then
  ok "ESP packets carry the classes' DSCPs in the outer header (46 low_latency, 10 bulk)"
else
  bad "ESP packets carry the classes' DSCPs (tos b8 and 28)"
  awk '$2 == "esp" { print "tos 0x" $3 }' "$W/pkts" | sort | uniq -c | sed 's/^/#   /'
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

# Two tests move many 1-16 MiB borrowed calls within deadlines that ESP in software on a TCG
# guest cannot meet (they fail with RRPC_E_DEADLINE there, and pass without ESP): left out here.
export RRPC_TEST_SKIP=test_a_borrowed_buffer_arrives_bit_exact_whether_pieces_are_large_or_small,test_a_borrowed_buffer_is_not_read_after_its_completion_ran
export RRPC_TEST_TRANSPORT=verbs RRPC_TEST_SERVER=$IP1 RRPC_TEST_CLIENT_SRC=$IP0
if timeout 900 "$BUILD/tests/conformance" > "$OUT/conformance.txt" 2>&1; then
  ok "the conformance suite over verbs passes with ESP on ($(grep -c '^\[       OK \]' "$OUT/conformance.txt") tests OK)"
else
  bad "the conformance suite over verbs with ESP on (build/ipsec/conformance.txt)"
  grep -E -B3 'FAILED|Error' "$OUT/conformance.txt" | head -30 | sed 's/^/#   /'
fi
unset RRPC_TEST_TRANSPORT RRPC_TEST_SERVER RRPC_TEST_CLIENT_SRC RRPC_TEST_SKIP

if [ "${BENCH_ESP:-0}" = 1 ]; then
  B=$BUILD/bench/rrpc-bench
  for mode in esp clear; do
    [ $mode = clear ] && "$XF" del "${PAIR[@]}" > /dev/null 2>&1
    "$B" server --host "$IP1" --port 17600 > "$W/bs.$mode" 2>&1 &
    SP=$!
    for _ in $(seq 100); do grep -q running "$W/bs.$mode" && break; sleep 0.1; done
    timeout 300 "$B" client --host "$IP1" --port 17600 --src "$IP0" --transport verbs,tcp \
      --tests rtt,large --duration 1 --no-progress --no-peers > "$OUT/bench-$mode.txt" 2>&1
    kill $SP 2>/dev/null; wait $SP 2>/dev/null
    echo "# rrpc-bench with $mode: $OUT/bench-$mode.txt"
  done
  "$XF" add "${PAIR[@]}" --random-keys > /dev/null 2>&1   # for the del checks below
fi

"$XF" del "${PAIR[@]}" 2> "$W/del.err"; RC=$?
NS=$(ip xfrm state | grep -c '^src'); NP=$(npol)
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

# ---- rrpc-agent: the keys agreed over TLS, rekeyed, removed ---------------------------------
AG="$BUILD/agent/rrpc-agent"
if [ ! -x "$AG" ]; then
  echo "# no $AG (OpenSSL missing at build time): the agent checks are left out"
else
  bash "$OUT/agent-certs.sh" "$W/certs" "$IP0" "$IP1" 10.77.0.9 || bad "making the test certificates"
  C=$W/certs
  Q=$W/query.sock
  # the agents' /metrics (built with libmicrohttpd), read by promtool
  METRICS_A= HAVE_MHTTP=no
  grep -q "without libmicrohttpd" <("$AG" --local 1.2.3.4 --listen 1.2.3.4:0 --cert x --key x --ca x \
    --metrics-listen 1.2.3.4:0 2>&1) || { HAVE_MHTTP=yes; METRICS_A="--metrics-listen $IP0:0"; }
  # scrape LOG OUT [NETNS]: GET /metrics of the agent that wrote LOG into OUT, then promtool
  scrape() {
    local port host
    port=$(sed -n 's/.*serving \/metrics on .* (port \([0-9]*\)).*/\1/p' "$1")
    host=$(sed -n 's/.*serving \/metrics on \(.*\):[0-9]* (port.*/\1/p' "$1")
    [ -n "$port" ] || { echo "no /metrics in $1" > "$2"; return 1; }
    ${3:+ip netns exec $3} curl -sf --max-time 20 "http://$host:$port/metrics" > "$2" || return 1
    command -v promtool > /dev/null || { echo "# promtool not installed: $2 not checked by it"; return 0; }
    promtool check metrics < "$2" > "$2.promtool" 2>&1 || { sed 's/^/#   promtool: /' "$2.promtool"; return 1; }
  }
  # mval FILE SERIES-PREFIX: the sum of the series whose name{labels} starts with the prefix
  mval() { awk -v p="$2" 'index($1, p) == 1 { s += $2; f = 1 } END { print f ? s : "none" }' "$1"; }
  "$AG" --local "$IP1" --listen "$IP1:0" --port-file "$W/pb" --cert "$C/$IP1.crt" --key "$C/$IP1.key" \
    --ca "$C/ca.crt" --query-socket "$Q" > "$W/agent-b.log" 2>&1 &
  AB=$!
  for _ in $(seq 100); do [ -s "$W/pb" ] && break; sleep 0.1; done
  PB=$(cat "$W/pb" 2>/dev/null)
  "$AG" --local "$IP0" --listen "$IP0:0" --cert "$C/$IP0.crt" --key "$C/$IP0.key" --ca "$C/ca.crt" \
    --peer "$IP1@$IP1:$PB" --lifetime 8 $METRICS_A > "$W/agent-a.log" 2>&1 &
  AA=$!
  for _ in $(seq 200); do grep -q "paired with $IP1" "$W/agent-a.log" && break; sleep 0.1; done
  NS=$(ip xfrm state | grep -c '^src'); NP=$(npol)
  SPI0=$(ip xfrm state | grep -o 'spi 0x[0-9a-f]*' | sort | tr '\n' ' ')
  if grep -q "paired with $IP1 as initiator" "$W/agent-a.log" && [ "$NS" = 2 ] && [ "$NP" = 4 ]; then
    ok "two agents paired over TLS (keys from the TLS exporter): 2 states, 4 policies"
  else
    bad "two agents paired: $NS states, $NP policies"; sed 's/^/#   A: /' "$W/agent-a.log"; sed 's/^/#   B: /' "$W/agent-b.log"
  fi
  # a hostile peer at B's port: garbage, then an agent whose certificate names another address
  exec 3<>"/dev/tcp/$IP1/$PB" && printf 'GARBAGE %.0s' $(seq 64) >&3 && exec 3>&- 3<&-
  timeout 6 "$AG" --local "$IP0" --listen "$IP0:0" --cert "$C/10.77.0.9.crt" --key "$C/10.77.0.9.key" \
    --ca "$C/ca.crt" --peer "$IP1@$IP1:$PB" > "$W/agent-w.log" 2>&1
  if grep -q "refused to pair: the initiator's certificate does not name its address" "$W/agent-w.log" &&
     grep -q "refused .*TLS handshake" "$W/agent-b.log"; then
    ok "the agent refuses garbage and a peer whose certificate names another address, and keeps serving"
  else
    bad "the agent refuses garbage and a wrong certificate"; sed 's/^/#   W: /' "$W/agent-w.log" | head -3
    sed 's/^/#   B: /' "$W/agent-b.log" | tail -4
  fi
  # RRPC_REQUIRE_ESP: the server asks its host's agent (B, the one of 10.77.0.2) about the client
  # (B is the loopback responder: it says yes only once it finds A's SAs in the kernel)
  if RRPC_REQUIRE_ESP=$Q timeout 120 "$OUT/dscp_traffic" -t tcp -s "$IP1" -c "$IP0" -n 5 -k 16 > "$W/req.ok" 2>&1; then
    ok "a server with RRPC_REQUIRE_ESP accepts a client whose host pair has ESP (the agent says yes)"
  else
    bad "a server with RRPC_REQUIRE_ESP accepts a paired client"; sed 's/^/#   /' "$W/req.ok" | tail -4
  fi
  # traffic across rekeys (lifetime 8 s: a rekey every 6.4 s; 30 s cross 4), counted on both sides
  R0=$(grep -c "rekeyed with $IP1" "$W/agent-a.log")
  T0=$(date +%s); RUNS=0; RFAIL=0
  while [ $(( $(date +%s) - T0 )) -lt 30 ]; do
    RUNS=$((RUNS + 1))
    timeout 120 "$OUT/dscp_traffic" -t rdma -s "$IP1" -c "$IP0" -n 20 -k 64 > "$W/rk.$RUNS" 2>&1 || RFAIL=$((RFAIL + 1))
  done
  SECS=$(( $(date +%s) - T0 ))
  REKEYS=$(( $(grep -c "rekeyed with $IP1" "$W/agent-a.log") - R0 ))
  SPI1=$(ip xfrm state | grep -o 'spi 0x[0-9a-f]*' | sort | tr '\n' ' ')
  CCALLS=$(cat "$W"/rk.* | awk '/^rpc: [0-9]+ echo calls on low_latency ok/ { s += $2 } END { print s + 0 }')
  SCALLS=$(cat "$W"/rk.* | awk '/^server: [0-9]+ echo calls handled/ { s += $2 } END { print s + 0 }')
  WRITES=$(cat "$W"/rk.* | grep -c "WRITE's 64 KiB found in its region")
  if [ "$RFAIL" = 0 ] && [ "$SECS" -ge 30 ] && [ "$REKEYS" -ge 2 ] && [ "$SPI1" != "$SPI0" ] &&
     [ "$CCALLS" = $((RUNS * 20)) ] && [ "$SCALLS" = "$CCALLS" ] && [ "$WRITES" = "$RUNS" ]; then
    ok "$SECS s of RPCs and WRITE + READ over rdma:// across $REKEYS rekeys, nothing lost: $CCALLS calls made = $SCALLS handled, $WRITES WRITEs of 64 KiB in the server's region = $RUNS runs (SPIs $SPI0-> $SPI1)"
  else
    bad "traffic across rekeys for $SECS s: $RFAIL of $RUNS runs failed, $REKEYS rekeys, calls $CCALLS made / $SCALLS handled, $WRITES of $RUNS WRITEs, SPIs $SPI0-> $SPI1"
    for f in "$W"/rk.*; do grep -q done "$f" || sed 's/^/#   /' "$f" | tail -3; done
    grep -v paired "$W/agent-a.log" | tail -5 | sed 's/^/#   A: /'
  fi
  if [ $HAVE_MHTTP = yes ]; then
    # Read right after some traffic: a rekey (every 6.4 s) starts SAs that have seen none yet, and
    # the previous ones expire 1.6 s later (lifetime 8 s), so a few tries.
    for _ in 1 2 3 4 5; do
      R_LO=$(grep -c "rekeyed with $IP1" "$W/agent-a.log")
      timeout 60 "$OUT/dscp_traffic" -t rdma -s "$IP1" -c "$IP0" -n 5 -k 16 > /dev/null 2>&1
      scrape "$W/agent-a.log" "$W/metrics-a.txt"; SRC=$?
      R_HI=$(grep -c "rekeyed with $IP1" "$W/agent-a.log")
      MPK=$(mval "$W/metrics-a.txt" 'rrpc_esp_sa_packets_total{peer="'$IP1'",direction="in"')
      [ $SRC = 0 ] && [ "$MPK" != none ] && [ "$MPK" -gt 0 ] && break
    done
    cp "$W/metrics-a.txt" "$OUT/" 2>/dev/null
    MRK=$(mval "$W/metrics-a.txt" rrpc_agent_rekeys_total); MUP=$(mval "$W/metrics-a.txt" rrpc_agent_pairs_up)
    MSA=$(mval "$W/metrics-a.txt" rrpc_agent_sas_installed)
    MERR=$(awk '/^rrpc_esp_sa_(integrity|replay|replay_window)_failures_total/ { s += $2 } END { print s + 0 }' "$W/metrics-a.txt")
    if [ $SRC = 0 ] && [ "$MRK" != none ] && [ "$MRK" -ge "$R_LO" ] && [ "$MRK" -le "$R_HI" ] && [ "$MUP" = 1 ] &&
       { [ "$MSA" = 2 ] || [ "$MSA" = 4 ]; } && [ "$MPK" != none ] && [ "$MPK" -gt 0 ] && [ "$MERR" = 0 ]; then
      ok "the initiator's /metrics is valid Prometheus text: $MRK rekeys, 1 pair up, $MSA SAs, $MPK packets in, no ESP error"
    else
      bad "the initiator's /metrics: scrape $SRC, rekeys $MRK (log: $R_LO..$R_HI), up $MUP, SAs $MSA, packets in $MPK, ESP errors $MERR"
      grep -E '^rrpc_(agent|esp_sa)' "$W/metrics-a.txt" | head -30 | sed 's/^/#   /'
    fi
  else
    echo "# rrpc-agent built without libmicrohttpd: its /metrics are not checked"
  fi
  # Tampering over rdma://: the pair's ESP leaves through the rxe devices' netdevs (or lo: a
  # first try with netem on lo alone saw none of it); only ESP goes through netem.
  # XfrmInStateProtoError counts the ICV failures of every SA (rekeys remove SAs and their
  # own counters with them).
  protoerr() { awk '$1 == "XfrmInStateProtoError" { print $2 }' /proc/net/xfrm_stat; }
  TDEVS="lo ${SOFTROCE_NETDEV0:-va} ${SOFTROCE_NETDEV1:-vb}"
  tamper_on() {
    local d
    for d in $TDEVS; do
      tc qdisc add dev $d root handle 1: prio bands 4 priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1 &&
        tc qdisc add dev $d parent 1:4 handle 40: netem corrupt 2% &&
        tc filter add dev $d parent 1: protocol ip prio 1 u32 match ip protocol 50 0xff flowid 1:4 || return 1
    done
  }
  tamper_off() { local d; for d in $TDEVS; do tc qdisc del dev $d root 2> /dev/null; done; }
  P0=$(protoerr)
  if tamper_on 2> "$W/tc.err"; then
    timeout 300 "$OUT/dscp_traffic" -t rdma -s "$IP1" -c "$IP0" -n 100 -k 512 > "$W/tamper.rdma" 2>&1; TR=$?
    for d in $TDEVS; do echo "== $d"; tc -s qdisc show dev $d; done > "$W/lo.stats" 2>&1
    tamper_off
    P1=$(protoerr)
    timeout 120 "$OUT/dscp_traffic" -t rdma -s "$IP1" -c "$IP0" -n 20 -k 64 > "$W/tamper.after" 2>&1; AR=$?
    cp "$W/tamper.rdma" "$W/lo.stats" "$OUT/" 2>/dev/null
    HANDLED=$(sed -n 's/^server: \([0-9]*\) echo calls handled.*/\1/p' "$W/tamper.rdma")
    if [ $TR = 0 ] && [ "$HANDLED" = 100 ] && grep -q "WRITE + READ of 512 KiB on bulk ok" "$W/tamper.rdma"; then
      HOW="completed: 100 calls made = $HANDLED handled, the 512 KiB WRITE + READ checked"
    elif [ $TR = 1 ] && grep -q "^dscp_traffic: .*: " "$W/tamper.rdma" && ! grep -q "differ\|came back different" "$W/tamper.rdma"; then
      HOW="failed cleanly: $(grep -m1 '^dscp_traffic: ' "$W/tamper.rdma")"
    else
      HOW=
    fi
    if [ $((P1 - P0)) -gt 0 ] && [ -n "$HOW" ] && [ $AR = 0 ]; then
      ok "tampered ESP over rdma:// (netem on $TDEVS, 2 % of ESP): $((P1 - P0)) ICV failures counted (XfrmInStateProtoError), the run $HOW; the next run is clean"
    else
      bad "tampered ESP over rdma://: $((P1 - P0)) ICV failures, run exit $TR, the next run exit $AR"
      tail -4 "$W/tamper.rdma" | sed 's/^/#   /'; grep -E "^==|qdisc netem|Sent" "$W/lo.stats" | head -12 | sed 's/^/#   /'
    fi
  else
    tamper_off
    echo "# no prio/netem/u32 qdisc on $TDEVS ($(head -1 "$W/tc.err")): the rdma:// tampering check is left out"
  fi
  kill -TERM $AA $AB 2>/dev/null; wait $AA $AB 2>/dev/null
  NS=$(ip xfrm state | grep -c '^src'); NP=$(npol)
  if [ "$NS" = 0 ] && [ "$NP" = 0 ] && grep -q "removed 1 host pair" "$W/agent-a.log"; then
    ok "stopped agents leave no state or policy"
  else
    bad "stopped agents leave nothing: $NS states, $NP policies"; tail -2 "$W/agent-a.log" | sed 's/^/#   A: /'
  fi
  cp "$W"/agent-*.log "$OUT/" 2>/dev/null
  # ... and refuses, saying why, once the pair is gone (B alone again: it has no pair), or when
  # no agent answers
  "$AG" --local "$IP1" --listen "$IP1:0" --cert "$C/$IP1.crt" --key "$C/$IP1.key" --ca "$C/ca.crt" \
    --query-socket "$Q" > "$W/agent-b2.log" 2>&1 &
  AB=$!
  for _ in $(seq 100); do [ -S "$Q" ] && break; sleep 0.1; done
  RRPC_REQUIRE_ESP=$Q timeout 60 "$OUT/dscp_traffic" -t tcp -s "$IP1" -c "$IP0" -n 5 -k 16 > "$W/req.no" 2>&1; R1=$?
  RRPC_REQUIRE_ESP=$Q timeout 60 "$OUT/dscp_traffic" -t rdma -s "$IP1" -c "$IP0" -n 5 -k 16 > "$W/req.no.rdma" 2>&1; R2=$?
  kill -TERM $AB; wait $AB 2>/dev/null
  RRPC_REQUIRE_ESP=$Q timeout 60 "$OUT/dscp_traffic" -t tcp -s "$IP1" -c "$IP0" -n 5 -k 16 > "$W/req.none" 2>&1; R3=$?
  if [ $R1 != 0 ] && grep -q "requires ESP with the client's host (RRPC_REQUIRE_ESP): this host's rrpc-agent has no ESP pair with $IP0" "$W/req.no" &&
     [ $R2 != 0 ] && [ $R3 != 0 ] && grep -q "cannot ask its rrpc-agent at $Q" "$W/req.none"; then
    ok "without a pair the server refuses the client over tcp:// (saying why) and rdma://, and refuses when no agent answers"
  else
    bad "RRPC_REQUIRE_ESP refuses an unpaired client: exits $R1 $R2 $R3"
    for f in req.no req.no.rdma req.none; do tail -3 "$W/$f" | sed "s/^/#   $f: /"; done
  fi

  # Two hosts for real: network namespaces a and b joined by a veth pair, one agent in each,
  # each installing its own view (the key of each direction must agree across the two kernels).
  # rxe does not work across namespaces on this kernel: tcp:// carries the traffic here.
  NA=10.88.0.1 NB=10.88.0.2
  if ip netns add rrpc-a 2>/dev/null && ip netns add rrpc-b 2>/dev/null &&
     ip link add rrpc-va netns rrpc-a type veth peer rrpc-vb netns rrpc-b 2>/dev/null; then
    ip -n rrpc-a addr add $NA/24 dev rrpc-va; ip -n rrpc-a link set rrpc-va up; ip -n rrpc-a link set lo up
    ip -n rrpc-b addr add $NB/24 dev rrpc-vb; ip -n rrpc-b link set rrpc-vb up; ip -n rrpc-b link set lo up
    bash "$OUT/agent-certs.sh" "$W/c2" $NA $NB || bad "making the namespace certificates"
    C=$W/c2
    # rrpcd in a, whose agents' principals are the agents' CNs (their addresses); its own
    # certificate from make-dev-certs.sh names NA.
    RRPCD_SANS="IP:$NA" bash "$OUT/make-dev-certs.sh" "$W/c3" >/dev/null || bad "making rrpcd's certificate"
    printf '%s\n' "listen = $NA:0" "port_file = $W/rrpcd-ns.port" "cert = $W/c3/rrpcd.crt" \
      "key = $W/c3/rrpcd.key" "ca = $C/ca.crt" "log_level = debug" "agents = $NA, $NB" \
      "metrics_listen = $NA:0" "metrics_port_file = $W/rrpcd-ns.mport" > "$W/rrpcd-ns.conf"
    ip netns exec rrpc-a "$BUILD/daemon/rrpcd" -c "$W/rrpcd-ns.conf" 2> "$W/rrpcd-ns.log" &
    RDP=$!
    for _ in $(seq 200); do [ -s "$W/rrpcd-ns.mport" ] && break; sleep 0.1; done
    BRK=(--broker "$NA:$(cat "$W/rrpcd-ns.port" 2>/dev/null)" --broker-ca "$W/c3/ca.crt")
    ip netns exec rrpc-b "$AG" --local $NB --listen $NB:7445 --cert "$C/$NB.crt" --key "$C/$NB.key" \
      --ca "$C/ca.crt" "${BRK[@]}" > "$W/ns-b.log" 2>&1 &
    NBP=$!
    sleep 0.5
    ip netns exec rrpc-a "$AG" --local $NA --listen $NA:7445 --cert "$C/$NA.crt" --key "$C/$NA.key" \
      --ca "$C/ca.crt" --peer $NB@$NB:7445 --lifetime 600 ${METRICS_A:+--metrics-listen $NA:0} \
      "${BRK[@]}" > "$W/ns-a.log" 2>&1 &
    NAP=$!
    for _ in $(seq 200); do grep -q "paired with $NB" "$W/ns-a.log" && break; sleep 0.1; done
    ip netns exec rrpc-a tcpdump -i rrpc-va --immediate-mode -nn -w "$W/ns.pcap" "host $NA and host $NB" \
      2> "$W/ns-td.err" &
    TD=$!
    for _ in $(seq 100); do grep -q 'listening on' "$W/ns-td.err" && break; sleep 0.1; done
    B=$BUILD/bench/rrpc-bench
    ip netns exec rrpc-b "$B" server --host $NB --port 17700 > "$W/ns-srv.txt" 2>&1 &
    SP=$!
    for _ in $(seq 100); do grep -q running "$W/ns-srv.txt" && break; sleep 0.1; done
    ip netns exec rrpc-a timeout 120 "$B" client --host $NB --port 17700 --transport tcp --tests rtt,large \
      --duration 0.5 --no-progress --no-peers > "$OUT/ns-bench.txt" 2>&1
    BRC=$?
    kill $SP 2>/dev/null; wait $SP 2>/dev/null
    sleep 0.2; kill -INT $TD 2>/dev/null; wait $TD 2>/dev/null; TD=
    NSA=$(ip -n rrpc-a xfrm state | grep -c '^src'); NSB=$(ip -n rrpc-b xfrm state | grep -c '^src')
    ALL=$(tcpdump -nn -r "$W/ns.pcap" 2>/dev/null | wc -l)
    CLEAR=$(tcpdump -nn -r "$W/ns.pcap" 2>/dev/null | grep -vc ' ESP(')
    if grep -q "paired with $NB as initiator" "$W/ns-a.log" && grep -q "paired with $NA as responder" "$W/ns-b.log" &&
       [ "$NSA" = 2 ] && [ "$NSB" = 2 ] && [ $BRC = 0 ] && ! grep -q FAILED "$OUT/ns-bench.txt" &&
       [ "$ALL" -gt 0 ] && [ "$CLEAR" = 0 ]; then
      ok "two hosts (namespaces), one agent each: each kernel holds its own 2 SAs, rrpc-bench over tcp:// runs, and all $ALL packets on the wire are ESP"
    else
      bad "two hosts, one agent each: states $NSA/$NSB, bench exit $BRC, $CLEAR of $ALL packets in clear"
      tail -3 "$W/ns-a.log" | sed 's/^/#   a: /'; tail -3 "$W/ns-b.log" | sed 's/^/#   b: /'
      grep -E "FAILED|error" "$OUT/ns-bench.txt" | head -3 | sed 's/^/#   /'
    fi
    # Tampering: netem flips a bit in 2 % of b's packets on the veth (after ESP: the ciphertext,
    # ICV, SPI or headers). a's inbound SA must drop those it gets for their ICV and count them;
    # tcp retransmits, so the bench still completes with verified calls.
    integ() {   # the integrity failures of the SA NB -> NA, from `ip -s xfrm state` in a
      ip -n rrpc-a -s xfrm state | awk -v d=$NA '/^src/ { cur = $4 }
        /replay-window/ && cur == d { for (i = 1; i < NF; i++) if ($i == "failed") s += $(i + 1) }
        END { print s + 0 }'
    }
    I0=$(integ)
    if ip netns exec rrpc-b tc qdisc add dev rrpc-vb root netem corrupt 2% 2> "$W/netem.err"; then
      ip netns exec rrpc-b "$B" server --host $NB --port 17701 > "$W/ns-srv2.txt" 2>&1 &
      SP=$!
      for _ in $(seq 100); do grep -q running "$W/ns-srv2.txt" && break; sleep 0.1; done
      ip netns exec rrpc-a timeout 300 "$B" client --host $NB --port 17701 --transport tcp --tests rtt,large \
        --duration 2 --no-progress --no-peers > "$OUT/ns-bench-tampered.txt" 2>&1
      TRC=$?
      ip netns exec rrpc-b tc -s qdisc show dev rrpc-vb > "$W/netem.stats" 2>&1
      ip netns exec rrpc-b tc qdisc del dev rrpc-vb root
      I1=$(integ)
      XS=$(ip -n rrpc-a -s xfrm state)
      MI=none
      if [ -n "$METRICS_A" ] && scrape "$W/ns-a.log" "$W/metrics-ns-a.txt" rrpc-a; then
        MI=$(mval "$W/metrics-ns-a.txt" 'rrpc_esp_sa_integrity_failures_total{peer="'$NB'",direction="in"')
        cp "$W/metrics-ns-a.txt" "$OUT/" 2>/dev/null
      fi
      RETR=$(ip netns exec rrpc-a nstat -az TcpRetransSegs 2>/dev/null | awk '$1 == "TcpRetransSegs" { print $2 }')
      ip netns exec rrpc-a timeout 120 "$B" client --host $NB --port 17701 --transport tcp --tests rtt \
        --duration 0.5 --no-progress --no-peers > "$OUT/ns-bench-after.txt" 2>&1
      ARC=$?
      kill $SP 2>/dev/null; wait $SP 2>/dev/null
      NSA=$(ip -n rrpc-a xfrm state | grep -c '^src')
      if [ $((I1 - I0)) -gt 0 ] && { [ -z "$METRICS_A" ] || [ "$MI" = "$I1" ]; } && [ $TRC = 0 ] &&
         ! grep -qE "FAILED|mismatch" "$OUT/ns-bench-tampered.txt" && [ $ARC = 0 ] &&
         ! grep -q FAILED "$OUT/ns-bench-after.txt" && [ "$NSA" = 2 ]; then
        ok "tampered ESP packets are dropped and counted: $((I1 - I0)) integrity failures on a's inbound SA (ip -s xfrm state; /metrics says $MI), $RETR tcp segments retransmitted, rrpc-bench over tcp:// completed verified, and ran clean after"
      else
        bad "tampered ESP: integrity failures $I0 -> $I1 (/metrics $MI), bench exit $TRC, after $ARC, $NSA states in a"
        sed 's/^/#   netem: /' "$W/netem.stats" | head -4
        grep -E "FAILED|error|mismatch" "$OUT/ns-bench-tampered.txt" | head -5 | sed 's/^/#   /'
        printf '%s\n' "$XS" | grep -E '^src|replay-window' | sed 's/^/#   /'
      fi
    else
      echo "# tc netem is unavailable here ($(cat "$W/netem.err")): the tampering check is left out"
    fi
    # --broker: both reports taken, each naming the other (the pair is up since the bench).
    rmetric() {
      ip netns exec rrpc-a bash -c "exec 3<>/dev/tcp/$NA/$(cat "$W/rrpcd-ns.mport" 2>/dev/null) &&
        printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && cat <&3" 2>/dev/null | awk -v s="$1" '$1 == s { print $2 }'
    }
    for _ in $(seq 150); do grep -q "'$NA' reported 1 pairs for $NA" "$W/rrpcd-ns.log" &&
      grep -q "'$NB' reported 1 pairs for $NB" "$W/rrpcd-ns.log" && break; sleep 0.1; done
    RA=$(rmetric rrpcd_agents)
    if [ "$RA" = 2 ] && grep -q "'$NA' reported 1 pairs for $NA" "$W/rrpcd-ns.log" &&
       grep -q "'$NB' reported 1 pairs for $NB" "$W/rrpcd-ns.log"; then
      ok "both agents report the pair to rrpcd (--broker): rrpcd holds 2 agents, each reporting 1 pair"
    else
      bad "agents report to rrpcd: rrpcd_agents $RA"
      grep -E "reported|pairs|denied" "$W/rrpcd-ns.log" | tail -4 | sed 's/^/#   rrpcd: /'
      grep -hE "broker|rrpcd" "$W/ns-a.log" "$W/ns-b.log" | tail -4 | sed 's/^/#   /'
    fi
    kill -TERM $NBP 2>/dev/null; wait $NBP 2>/dev/null
    for _ in $(seq 100); do [ "$(rmetric rrpcd_agents)" = 1 ] && break; sleep 0.1; done
    RA=$(rmetric rrpcd_agents)
    if [ "$RA" = 1 ]; then ok "b's agent stopped: rrpcd dropped its report (1 agent left)"
    else bad "b's agent stopped: rrpcd_agents $RA"; fi
    kill -TERM $NAP 2>/dev/null; wait $NAP 2>/dev/null
    kill -TERM $RDP 2>/dev/null; wait $RDP 2>/dev/null
    ip netns del rrpc-a; ip netns del rrpc-b
  else
    echo "# no network namespaces here (ip netns add failed): the two-host agent check is left out"
  fi
fi

echo "$PASS passed, $FAIL failed"
[ $FAIL = 0 ]
