#!/bin/bash
# run-demo.sh BUILD_DIR [tcp|verbs|auto]
# The main job: makes development certificates, starts rrpcd (the broker,
# TLS 1.3 with mutual authentication), an rrpc-demo server that registers the
# service "demo" with it, and a client that finds "demo" by name, connects
# with a ticket, makes an RPC and sends a 16 MiB float32 tensor.
# auto (the default) takes verbs when this host has an RDMA device and tcp
# otherwise, and says which and why.
set -euo pipefail
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "${1:?usage: run-demo.sh BUILD_DIR [tcp|verbs|auto]}" && pwd)
MODE=${2:-auto}
HOST=${RRPC_DEMO_HOST:-127.0.0.1}
if [ "$MODE" = auto ]; then
  if ls /sys/class/infiniband/* >/dev/null 2>&1; then
    MODE=verbs
    echo "run-demo: RDMA device(s) found: $(ls /sys/class/infiniband | tr '\n' ' ')-> verbs transport"
  else
    MODE=tcp
    echo "run-demo: no RDMA device on this host (/sys/class/infiniband is empty) -> tcp transport"
    echo "run-demo: (for RoCEv2 without a RoCE NIC: rdma link add rxe0 type rxe netdev <if>;" \
         "see docs/running-on-roce.md)"
  fi
fi
case "$MODE" in
  tcp) URI="tcp://$HOST:0" ;;
  verbs) URI="rdma://$HOST:0" ;;
  *) echo "run-demo: unknown transport $MODE (tcp, verbs or auto)" >&2; exit 2 ;;
esac

WORK=$(mktemp -d /tmp/rrpc-demo-XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

"$SRC/scripts/make-dev-certs.sh" "$WORK/certs" demo-server demo-client >/dev/null
cat > "$WORK/rrpcd.conf" <<CONF
listen = 127.0.0.1:0
port_file = $WORK/port
cert = $WORK/certs/rrpcd.crt
key = $WORK/certs/rrpcd.key
ca = $WORK/certs/ca.crt
ticket_key = $WORK/certs/ticket.pem
allow = register demo demo-server
allow = lookup demo demo-client
CONF
"$BUILD/daemon/rrpcd" -c "$WORK/rrpcd.conf" 2> "$WORK/rrpcd.log" &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$WORK/port" ] && break; sleep 0.05; done
[ -s "$WORK/port" ] || { echo "run-demo: rrpcd did not start:" >&2; cat "$WORK/rrpcd.log" >&2; exit 1; }
BROKER=127.0.0.1:$(cat "$WORK/port")
echo "run-demo: rrpcd listens on $BROKER (TLS 1.3, mutual TLS with development certificates; tickets signed with the development Ed25519 key)"

"$BUILD/examples/rrpc-demo" server "$URI" "$BROKER" "$WORK/certs" > "$WORK/server.out" &
PIDS+=($!)
for _ in $(seq 200); do grep -q "^demo-server: serving" "$WORK/server.out" && break; sleep 0.05; done
cat "$WORK/server.out"
grep -q "^demo-server: serving" "$WORK/server.out" || { echo "run-demo: the server did not start" >&2; exit 1; }
rc=0
"$BUILD/examples/rrpc-demo" client "$BROKER" "$WORK/certs" || rc=$?
sleep 0.1
grep -v "^demo-server: serving" "$WORK/server.out" || true
if [ $rc != 0 ]; then
  echo "run-demo: FAILED; rrpcd's log:" >&2
  cat "$WORK/rrpcd.log" >&2
fi
exit $rc
