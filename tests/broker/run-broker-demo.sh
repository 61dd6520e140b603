#!/bin/bash
# run-broker-demo.sh BUILDDIR
#   Makes development certificates (scripts/make-dev-certs.sh), starts rrpcd,
#   a server that registers "demo-kv" with it, and a client that finds the
#   server by name, gets a ticket and calls it.  Everything on 127.0.0.1/tcp.
set -euo pipefail
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(cd "${1:-$SRC/build}" && pwd)
WORK=$(mktemp -d /tmp/rrpc-broker-demo-XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

"$SRC/scripts/make-dev-certs.sh" "$WORK/certs" demo-server demo-client
cat > "$WORK/rrpcd.conf" <<CONF
listen = 127.0.0.1:0
port_file = $WORK/port
cert = $WORK/certs/rrpcd.crt
key = $WORK/certs/rrpcd.key
ca = $WORK/certs/ca.crt
allow = register demo-kv demo-server
allow = lookup demo-kv demo-client
CONF
"$BUILD/daemon/rrpcd" -c "$WORK/rrpcd.conf" &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$WORK/port" ] && break; sleep 0.05; done
[ -s "$WORK/port" ] || { echo "run-broker-demo: rrpcd did not start" >&2; exit 1; }
BROKER=127.0.0.1:$(cat "$WORK/port")
echo "run-broker-demo: rrpcd listens on $BROKER (TLS 1.3, mutual TLS)"

"$BUILD/tests/broker/broker-demo" server "$BROKER" "$WORK/certs" > "$WORK/server.out" &
PIDS+=($!)
for _ in $(seq 100); do grep -q serving "$WORK/server.out" 2>/dev/null && break; sleep 0.05; done
cat "$WORK/server.out"
"$BUILD/tests/broker/broker-demo" client "$BROKER" "$WORK/certs"
