#!/bin/bash
# tests/agent/agent_metrics.sh BUILD_DIR
# rrpc-agent's GET /metrics (--metrics-listen), on the host (nothing pairs here: the kernel may
# have no ESP; the VM's ipsec step scrapes agents that pair). Checks:
#   - a recorded state (render_metrics: a pair mid-rekey, integrity and replay failures) renders
#     to text that `promtool check metrics` accepts, with the per-SA families and their labels;
#   - a malformed --metrics-listen is refused before the agent starts, with the reason;
#   - a live responder's text is accepted by promtool, counts no peer and no failure at first,
#     then a TLS failure for garbage at its port and a certificate failure for an agent whose
#     certificate names another address;
#   - a live initiator whose peer does not answer counts its configured peer, no pair up, and
#     "unreachable" failures.
# Exit 77 (skipped) without rrpc-agent, as non-root (the agent's IPsec bypass needs
# CAP_NET_ADMIN), or when the build has no libmicrohttpd. Without promtool (Debian's prometheus)
# the text is checked by the greps alone, and the output says so.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
RM=$BUILD/agent/render_metrics
[ -x "$RM" ] || { echo "skipped: no $RM (libnl-xfrm-3-dev and OpenSSL at build time)"; exit 77; }
HAVE_PROMTOOL=no; command -v promtool > /dev/null && HAVE_PROMTOOL=yes
# promcheck FILE WHAT: promtool accepts FILE (or, without promtool, says it was not run)
promcheck() {
  if [ $HAVE_PROMTOOL = no ]; then echo "# promtool: not installed (prometheus package), $2 not checked by it"; return 0; fi
  promtool check metrics < "$1" > "$1.promtool" 2>&1 && return 0
  sed 's/^/#   promtool: /' "$1.promtool"; return 1
}
# val FILE SERIES: the value of the series (exact name and labels) in FILE, or "none"
val() { awk -v s="$2" '$1 == s { print $2; f = 1 } END { if (!f) print "none" }' "$1"; }

# ---- a recorded state -----------------------------------------------------------------------
"$RM" > "$W/rec.txt" || bad "render_metrics ran"
E1=$(val "$W/rec.txt" 'rrpc_esp_sa_integrity_failures_total{peer="10.77.0.2",direction="in",spi="0x00001001",sa="current"}')
E2=$(val "$W/rec.txt" 'rrpc_esp_sa_packets_total{peer="10.77.0.2",direction="out",spi="0xabcdef01",sa="previous"}')
E3=$(grep -c 'spi="0x00002001"' "$W/rec.txt")
E4=$(val "$W/rec.txt" 'rrpc_esp_kernel_errors_total{counter="XfrmInStateProtoError"}')
E5=$(val "$W/rec.txt" 'rrpc_esp_kernel_errors_total{counter="XfrmOutPolBlock"}')
E6=$(grep -c 'XfrmTooBig\|Bad' "$W/rec.txt")
E7="$(val "$W/rec.txt" rrpc_agent_peers_configured) $(val "$W/rec.txt" rrpc_agent_pairs_up) $(val "$W/rec.txt" rrpc_agent_sas_installed) $(val "$W/rec.txt" rrpc_agent_rekeys_total)"
if promcheck "$W/rec.txt" "the recorded text" && [ "$E1" = 3 ] && [ "$E2" = 5 ] && [ "$E3" = 0 ] &&
   [ "$E4" = 7 ] && [ "$E5" = 18446744073709551615 ] && [ "$E6" = 0 ] && [ "$E7" = "1 1 4 3" ]; then
  ok "a recorded state renders to valid Prometheus text: per-SA counters with peer/direction/spi/sa labels, unread SAs left out, xfrm_stat parsed (a 2^64 overflow and a bad line dropped)"
else
  bad "the recorded state's text: integrity $E1, previous packets $E2, unread SA lines $E3, xfrm_stat $E4 $E5, bad lines $E6, peers/up/sas/rekeys $E7"
  sed 's/^/#   /' "$W/rec.txt" | head -60
fi

# ---- the option --------------------------------------------------------------------------------
bash "$HERE/../softroce/agent-certs.sh" "$W/c" 127.0.0.1 127.0.0.2 127.0.0.9 > /dev/null || { bad "test certificates"; exit 1; }
C=$W/c
"$AG" --local 127.0.0.2 --listen 127.0.0.2:0 --cert "$C/127.0.0.2.crt" --key "$C/127.0.0.2.key" \
  --ca "$C/ca.crt" --metrics-listen '*:9100' > "$W/opt.log" 2>&1; RC=$?
if grep -q "without libmicrohttpd" "$W/opt.log"; then
  echo "skipped: this rrpc-agent was built without libmicrohttpd: $(cat "$W/opt.log")"; exit 77
fi
if [ $RC = 2 ] && grep -q -- "--metrics-listen \*:9100: " "$W/opt.log"; then
  ok "a malformed --metrics-listen is refused with the reason: $(head -1 "$W/opt.log")"
else
  bad "a malformed --metrics-listen is refused: exit $RC"; cat "$W/opt.log"
fi

# ---- a live responder --------------------------------------------------------------------------
"$AG" --local 127.0.0.2 --listen 127.0.0.2:0 --port-file "$W/port" --cert "$C/127.0.0.2.crt" \
  --key "$C/127.0.0.2.key" --ca "$C/ca.crt" --metrics-listen 127.0.0.2:0 > "$W/b.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$W/port" ] && grep -q "serving /metrics" "$W/b.log" && break; sleep 0.1; done
P=$(cat "$W/port" 2>/dev/null)
MP=$(sed -n 's/.*serving \/metrics on .* (port \([0-9]*\)).*/\1/p' "$W/b.log")
[ -n "$P" ] && [ -n "$MP" ] || { bad "the agent started with /metrics"; cat "$W/b.log"; exit 1; }
scrape() { curl -sf --max-time 10 "http://127.0.0.2:$MP/metrics" > "$1"; }
scrape "$W/m0.txt"; RC=$?
F0=$(awk '/^rrpc_agent_pairing_failures_total/ { s += $2 } END { print s + 0 }' "$W/m0.txt")
if [ $RC = 0 ] && promcheck "$W/m0.txt" "the live text" && [ "$(val "$W/m0.txt" rrpc_agent_peers_configured)" = 0 ] &&
   [ "$(val "$W/m0.txt" rrpc_agent_sas_installed)" = 0 ] && [ "$F0" = 0 ] &&
   [ "$(grep -c '^rrpc_agent_pairing_failures_total{reason=' "$W/m0.txt")" = 8 ] &&
   grep -q '^rrpc_agent_info{local="127.0.0.2"} 1$' "$W/m0.txt"; then
  ok "a live responder's /metrics is valid Prometheus text: no peer, no SA, 8 failure reasons at 0"
else
  bad "a live responder's /metrics: curl exit $RC, failures $F0"; sed 's/^/#   /' "$W/m0.txt" | head -30
fi
( exec 3<>"/dev/tcp/127.0.0.2/$P" && printf 'GET / HTTP/1.0\r\n\r\n%.0s' $(seq 50) >&3 ) 2>/dev/null
for _ in $(seq 60); do grep -q "refused .*TLS handshake" "$W/b.log" && break; sleep 0.1; done
timeout 6 "$AG" --local 127.0.0.1 --listen 127.0.0.1:0 --cert "$C/127.0.0.9.crt" --key "$C/127.0.0.9.key" \
  --ca "$C/ca.crt" --peer "127.0.0.2@127.0.0.2:$P" > "$W/w.log" 2>&1
sleep 0.3   # the responder publishes its counters before it waits again
scrape "$W/m1.txt"
T=$(val "$W/m1.txt" 'rrpc_agent_pairing_failures_total{reason="tls"}')
CE=$(val "$W/m1.txt" 'rrpc_agent_pairing_failures_total{reason="certificate"}')
PT=$(val "$W/m1.txt" rrpc_agent_pairings_total)
NCE=$(grep -c "certificate does not name its address" "$W/b.log")   # it retries every 2 s
if promcheck "$W/m1.txt" "the text after failures" && [ "$T" = 1 ] && [ "$NCE" -ge 1 ] && [ "$CE" = "$NCE" ] && [ "$PT" = 0 ]; then
  ok "garbage at the port counts a tls failure and each try of a wrong certificate a certificate failure ($CE); no pairing"
else
  bad "the responder's failure counters: tls $T, certificate $CE (refused $NCE times), pairings $PT"
  grep '^rrpc_agent_pair' "$W/m1.txt" | sed 's/^/#   /'; tail -4 "$W/b.log" | sed 's/^/#   B: /'
fi

# ---- a live initiator whose peer does not answer -------------------------------------------------
"$AG" --local 127.0.0.1 --listen 127.0.0.1:0 --cert "$C/127.0.0.1.crt" --key "$C/127.0.0.1.key" \
  --ca "$C/ca.crt" --peer "127.0.0.2@127.0.0.2:1" --metrics-listen 127.0.0.1:0 > "$W/a.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do grep -q "cannot reach" "$W/a.log" && break; sleep 0.1; done
sleep 0.3
AMP=$(sed -n 's/.*serving \/metrics on .* (port \([0-9]*\)).*/\1/p' "$W/a.log")
curl -sf --max-time 10 "http://127.0.0.1:$AMP/metrics" > "$W/a.txt"
U=$(val "$W/a.txt" 'rrpc_agent_pairing_failures_total{reason="unreachable"}')
if promcheck "$W/a.txt" "the initiator's text" && [ "$(val "$W/a.txt" rrpc_agent_peers_configured)" = 1 ] &&
   [ "$(val "$W/a.txt" rrpc_agent_pairs_up)" = 0 ] && [ "$(val "$W/a.txt" rrpc_agent_peers_paired)" = 0 ] &&
   [ "${U:-0}" != none ] && [ "${U:-0}" -ge 1 ]; then
  ok "an initiator whose peer does not answer: 1 peer configured, none paired or up, $U unreachable failures"
else
  bad "the initiator's /metrics: unreachable $U"; grep '^rrpc_agent' "$W/a.txt" | sed 's/^/#   /'; tail -3 "$W/a.log"
fi

finish
