#!/bin/sh
# tests/bench/server-binds-loopback.sh RRPC_BENCH
#
# `rrpc-bench server` without --host listens on 127.0.0.1 only: it is
# unauthenticated and exposes a writable region, so it must not be reachable
# from other hosts unless asked (--host ADDR).  Reads the kernel's table of
# listening sockets (/proc/net/tcp, /proc/net/tcp6) for the server's ports.
bench=${1:?usage: server-binds-loopback.sh RRPC_BENCH}
out=$(mktemp) || exit 1
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -f "$out"; }
trap cleanup EXIT

# A free block of ports: the server takes P (tcp), P+1 (rdma), P+2 (raw-tcp), P+3, P+4,
# P+5 (the scale test's tcp), P+6 (its rdma).
# Below the kernel's ephemeral range (ip_local_port_range, from 32768 by
# default), where the other tests' client sockets do not land; several tries.
started=
for try in $(seq 1 20); do
  port=$(( 20000 + ($$ * 7 + try * 1009) % 12000 ))
  "$bench" server --port "$port" > "$out" 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do
    grep -q running "$out" && { started=1; break; }
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$started" ] && break
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; pid=
done
[ -n "$started" ] || { echo "FAIL - rrpc-bench server did not start:"; cat "$out"; exit 1; }

# listening sockets (state 0A) on our ports: "ADDR PORT" per line, ADDR in the kernel's hex
listeners() {
  awk -v lo="$port" 'NR > 1 && $4 == "0A" {
      split($2, a, ":"); p = 0
      for (i = 1; i <= length(a[2]); i++) p = p * 16 + index("0123456789ABCDEF", substr(a[2], i, 1)) - 1
      if (p >= lo && p <= lo + 6) print a[1], p }' "$@" 2>/dev/null
}
v4=$(listeners /proc/net/tcp)
v6=$(listeners /proc/net/tcp6)
fail=0
[ -n "$v4" ] || { echo "FAIL - no listening socket of the server found in /proc/net/tcp"; fail=1; }
echo "$v4" | while read -r addr p; do
  [ -z "$addr" ] && continue
  if [ "$addr" = 0100007F ]; then echo "ok   - port $p listens on 127.0.0.1"
  else echo "FAIL - port $p listens on $addr (hex), not 127.0.0.1 (0100007F)"; echo bad >> "$out.bad"; fi
done
[ -s "$out.bad" ] && fail=1
rm -f "$out.bad"
[ -n "$v6" ] && { echo "FAIL - the server listens on IPv6: $v6"; fail=1; }
exit $fail
