#!/bin/bash
# tests/agent/agent_bounds.sh BUILD_DIR
# rrpc-agent against hostile and confused peers on the host (no ESP needed: nothing pairs here,
# the kernel may lack ESP). Checks:
#   - a peer trickling one byte a second is cut off within the exchange's 5 s, whatever it sends;
#   - garbage instead of TLS is refused, and so is an agent whose certificate names another address;
#   - an initiator without any certificate is refused at the TLS handshake;
#   - after all of that the responder still answers an exchange (refused for the cert, promptly);
#   - the query socket answers "no ..." for an unknown peer and for a malformed request.
# Exit 77 (skipped) without rrpc-agent or as non-root (its sockets' IPsec bypass needs
# CAP_NET_ADMIN). Output: "ok"/"not ok" lines; exit 0 only if nothing failed.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
bash "$HERE/../softroce/agent-certs.sh" "$W/c" 127.0.0.1 127.0.0.2 127.0.0.9 || { bad "test certificates"; exit 1; }
C=$W/c
"$AG" --local 127.0.0.2 --listen 127.0.0.2:0 --port-file "$W/port" --cert "$C/127.0.0.2.crt" \
  --key "$C/127.0.0.2.key" --ca "$C/ca.crt" --query-socket "$W/q.sock" > "$W/b.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$W/port" ] && [ -S "$W/q.sock" ] && break; sleep 0.1; done
P=$(cat "$W/port" 2>/dev/null)
[ -n "$P" ] || { bad "the agent started"; cat "$W/b.log"; exit 1; }

# A slowloris: a valid TLS record header announcing 512 bytes, then one byte a second for 15 s.
# The agent must give up on it at its 5 s deadline for the whole exchange.
T0=$(date +%s%N)
( exec 3<>"/dev/tcp/127.0.0.2/$P" || exit 0
  printf '\026\003\001\002\000' >&3 || exit 0
  for _ in $(seq 15); do sleep 1; printf '\001' >&3 || exit 0; done ) 2>/dev/null &
SL=$!
for _ in $(seq 150); do grep -q "refused 127.0.0.1: " "$W/b.log" && break; sleep 0.1; done
T1=$(date +%s%N)
MS=$(( (T1 - T0) / 1000000 ))
if grep -q "refused 127.0.0.1: " "$W/b.log" && [ $MS -ge 4500 ] && [ $MS -le 7500 ]; then
  ok "a peer trickling a byte a second is cut off after ${MS} ms (deadline 5 s)"
else
  bad "a trickling peer is cut off within the deadline: ${MS} ms"; cat "$W/b.log"
fi
kill $SL 2>/dev/null; wait $SL 2>/dev/null

# Garbage instead of a TLS ClientHello.
N0=$(grep -c "refused" "$W/b.log")
( exec 3<>"/dev/tcp/127.0.0.2/$P" && printf 'GET / HTTP/1.0\r\n\r\n%.0s' $(seq 50) >&3 ) 2>/dev/null
for _ in $(seq 60); do [ "$(grep -c refused "$W/b.log")" -gt "$N0" ] && break; sleep 0.1; done
grep "refused" "$W/b.log" | tail -n +$((N0 + 1)) | grep -q "TLS handshake" &&
  ok "garbage instead of TLS is refused at the handshake" || { bad "garbage is refused"; tail -3 "$W/b.log"; }

# An initiator with no certificate: the TLS handshake fails (the agent requires one).
if command -v openssl > /dev/null; then
  N0=$(grep -c "refused" "$W/b.log")
  timeout 10 openssl s_client -connect "127.0.0.2:$P" -tls1_3 < /dev/null > /dev/null 2>&1
  for _ in $(seq 60); do [ "$(grep -c refused "$W/b.log")" -gt "$N0" ] && break; sleep 0.1; done
  [ "$(grep -c refused "$W/b.log")" -gt "$N0" ] &&
    ok "a peer without a certificate is refused at the TLS handshake" ||
    { bad "a peer without a certificate is refused"; tail -3 "$W/b.log"; }
fi

# Still serving: an agent whose certificate names another address gets its refusal, promptly.
T0=$(date +%s%N)
timeout 6 "$AG" --local 127.0.0.1 --listen 127.0.0.1:0 --cert "$C/127.0.0.9.crt" --key "$C/127.0.0.9.key" \
  --ca "$C/ca.crt" --peer "127.0.0.2@127.0.0.2:$P" > "$W/w.log" 2>&1
if grep -q "refused to pair: the initiator's certificate does not name its address" "$W/w.log"; then
  ok "after the hostile peers, an agent with a certificate for another address is refused, with the reason"
else
  bad "the responder still answers"; cat "$W/w.log"; tail -3 "$W/b.log"
fi

# The query socket: unknown peer, malformed request (python3: bash has no seqpacket sockets).
Q=$(/usr/bin/python3 - "$W/q.sock" <<'PY'
import socket, sys
out = []
for req in (b"PAIR? 127.0.0.1", b"HELLO", b"PAIR? not-an-address"):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(sys.argv[1]); s.send(req); out.append(s.recv(200).decode()); s.close()
print("|".join(out))
PY
)
case "$Q" in
  "no this host's rrpc-agent has no ESP pair with 127.0.0.1|no bad request"*"|no bad request"*)
    ok "the query socket says no for a host without a pair and for malformed requests ($Q)" ;;
  *) bad "the query socket's answers: $Q" ;;
esac

kill -TERM "${PIDS[@]}" 2>/dev/null; wait "${PIDS[@]}" 2>/dev/null; PIDS=()
grep -q "stopping: removed 0 host pairs" "$W/b.log" && ok "SIGTERM stops the agent cleanly" ||
  { bad "SIGTERM stops the agent"; tail -2 "$W/b.log"; }
finish
