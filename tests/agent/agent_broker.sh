#!/bin/bash
# tests/agent/agent_broker.sh BUILD_DIR
# rrpc-agent --broker against the real rrpcd on the host (no pairing: no --peer, so nothing
# touches the kernel's XFRM; the pairs' logic at rrpcd is tests/broker/test_esp_pairs.c,
# the pairs themselves the VM's ipsec step). Checks, from rrpcd's /metrics and the logs:
#   - two agents (certificates naming --local as IP SAN, principals in agents) each have their
#     report taken at start: rrpcd holds 2 agents;
#   - an agent whose certificate does not name its --local is refused (and says why);
#   - an agent that stops ends its session, and rrpcd drops its report at once;
#   - an agent given two --broker reports to both rrpcd (each holds its own reports);
#   - --broker-ca without --broker, and a malformed --broker, are usage errors.
# Exit 77 (skipped) without rrpc-agent, rrpcd or metrics_http, or as non-root (the agent's
# sockets' IPsec bypass needs CAP_NET_ADMIN).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
D=$BUILD/daemon/rrpcd
[ -x "$D" ] || { echo "skipped: no $D"; exit 77; }
"$AG" --broker 127.0.0.1:1 2>&1 | grep -q "built without the broker client" && { echo "skipped: rrpc-agent without --broker"; exit 77; }
bash "$HERE/../../scripts/make-dev-certs.sh" "$W/c" agent-a:127.0.0.2 agent-b:127.0.0.3 > /dev/null ||
  { bad "test certificates"; exit 1; }
C=$W/c
# An rrpcd whose files end in $1 ("" or 2): its port in $W/port$1, /metrics in $W/mport$1.
rrpcd() {
  cat > "$W/rrpcd$1.conf" <<EOF
listen = 127.0.0.1:0
port_file = $W/port$1
cert = $C/rrpcd.crt
key = $C/rrpcd.key
ca = $C/ca.crt
log_level = debug
agents = agent-a, agent-b
metrics_listen = 127.0.0.1:0
metrics_port_file = $W/mport$1
EOF
  "$D" -c "$W/rrpcd$1.conf" 2> "$W/rrpcd$1.log" &
  PIDS+=($!)
  for _ in $(seq 100); do [ -s "$W/port$1" ] && [ -s "$W/mport$1" ] && break; sleep 0.1; done
  [ -s "$W/mport$1" ] || { grep -q "without libmicrohttpd" "$W/rrpcd$1.log" && { echo "skipped: rrpcd without metrics_http"; exit 77; }; bad "rrpcd started"; cat "$W/rrpcd$1.log"; exit 1; }
}
rrpcd ""
P=$(cat "$W/port") MP=$(cat "$W/mport")

# The value of the series $1 at rrpcd's /metrics (at port $2, default the first rrpcd's).
metric() {
  exec 3<>/dev/tcp/127.0.0.1/"${2:-$MP}" || return 1
  printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3
  awk -v s="$1" '$1 == s { print $2 }' <&3
  exec 3<&-
}
# Waits (10 s at most) until the series $1 is $2 (at port $3).
wait_metric() {
  for _ in $(seq 100); do [ "$(metric "$1" "${3:-}")" = "$2" ] && return 0; sleep 0.1; done
  return 1
}

agent() { # NAME LOCAL [more options]
  local name=$1 local=$2; shift 2
  "$AG" --local "$local" --listen "$local:0" --cert "$C/$name.crt" --key "$C/$name.key" \
    --ca "$C/ca.crt" --broker "127.0.0.1:$P" "$@" 2>> "$W/$name-$local.log" &
  PIDS+=($!)
}

agent agent-a 127.0.0.2
A=$!
agent agent-b 127.0.0.3
if wait_metric rrpcd_agents 2 && [ "$(metric 'rrpcd_agent_reports_total{result="accepted"}')" -ge 2 ]; then
  ok "both agents' reports are taken at start: rrpcd holds 2 agents"
else
  bad "both agents' reports are taken: rrpcd_agents $(metric rrpcd_agents)"; tail -5 "$W"/*.log
fi
grep -q "'agent-a' reported 0 pairs for 127.0.0.2" "$W/rrpcd.log" &&
  grep -q "reporting this host's ESP pairs to rrpcd 127.0.0.1:$P" "$W/agent-a-127.0.0.2.log" &&
  ok "rrpcd logs agent-a's report, the agent says it reports" || bad "the logs of agent-a's report"

# agent-b's certificate names 127.0.0.3, not 127.0.0.4.
agent agent-b 127.0.0.4
if wait_metric 'rrpcd_agent_reports_total{result="address_not_in_certificate"}' 1 &&
   sleep 0.5 && grep -q "rrpcd refused the pairs report: denied: local 127.0.0.4 is not an IP SAN" "$W/agent-b-127.0.0.4.log"; then
  ok "an agent whose certificate does not name its --local is refused, and says why"
else
  bad "the agent of an address its certificate does not name is refused"; tail -3 "$W/agent-b-127.0.0.4.log"
fi

kill "$A"
if wait_metric rrpcd_agents 1; then
  ok "an agent that stops takes its report with it (rrpcd holds 1 agent)"
else
  bad "a stopped agent's report is dropped: rrpcd_agents $(metric rrpcd_agents)"
fi

# Several rrpcd (on one etcd, or standing by) hold their own reports: an agent reports to each
# --broker it is given.
rrpcd 2
P2=$(cat "$W/port2") MP2=$(cat "$W/mport2")
agent agent-a 127.0.0.2 --broker "127.0.0.1:$P2"
if wait_metric rrpcd_agents 2 && wait_metric rrpcd_agents 1 "$MP2" &&
   grep -q "reporting this host's ESP pairs to rrpcd 127.0.0.1:$P2" "$W/agent-a-127.0.0.2.log"; then
  ok "an agent with two --broker reports to both rrpcd (2 agents at the first, 1 at the second)"
else
  bad "two --broker: rrpcd_agents $(metric rrpcd_agents) and $(metric rrpcd_agents "$MP2")"
  tail -5 "$W/agent-a-127.0.0.2.log"
fi

"$AG" --local 127.0.0.2 --listen 127.0.0.2:0 --cert "$C/agent-a.crt" --key "$C/agent-a.key" \
  --ca "$C/ca.crt" --broker-ca "$C/ca.crt" > /dev/null 2>&1; R1=$?
"$AG" --local 127.0.0.2 --listen 127.0.0.2:0 --cert "$C/agent-a.crt" --key "$C/agent-a.key" \
  --ca "$C/ca.crt" --broker "no-port" 2> "$W/bad.log"; R2=$?
if [ $R1 = 2 ] && [ $R2 != 0 ] && grep -q "want HOST:PORT" "$W/bad.log"; then
  ok "--broker-ca without --broker and a malformed --broker are refused"
else
  bad "usage errors: exits $R1 $R2"; cat "$W/bad.log"
fi

finish
