#!/bin/sh
# bench/broker-bench.sh BUILD_DIR [rrpc-broker-bench options]
#   rrpcd as a registry, measured in one run (docs/broker.md, "Figures"):
#   1. one rrpcd with its registry in memory;
#   2. two rrpcd on one etcd (Debian's etcd-server; skipped without it).
#   Each gets the same rrpc-broker-bench run (default: --services 1000).
#   Everything runs on loopback in a temporary directory, removed at the end.
set -eu
BUILD=${1:?usage: bench/broker-bench.sh BUILD_DIR [rrpc-broker-bench options]}
shift
SRC=$(cd "$(dirname "$0")/.." && pwd)
BENCH=$BUILD/bench/rrpc-broker-bench
RRPCD=$BUILD/daemon/rrpcd
ETCD=${ETCD:-/usr/bin/etcd}
T=$(mktemp -d /tmp/rrpc-broker-bench-XXXXXX)
PIDS=""
cleanup() {
  for p in $PIDS; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$T"
}
trap cleanup EXIT INT TERM
"$SRC/scripts/make-dev-certs.sh" "$T" kv-server kv-client >/dev/null

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# start_rrpcd NAME [extra settings...]: its port in $T/port-NAME
start_rrpcd() {
  name=$1; shift
  cat > "$T/rrpcd-$name.conf" <<CONF
cert = $T/rrpcd.crt
key = $T/rrpcd.key
ca = $T/ca.crt
ticket_key = $T/ticket.pem
listen = 127.0.0.1:0
port_file = $T/port-$name
log_level = warning
allow = register * kv-server
allow = lookup * kv-client
CONF
  "$RRPCD" -c "$T/rrpcd-$name.conf" "$@" 2>"$T/rrpcd-$name.log" &
  PIDS="$PIDS $!"
  for _ in $(seq 100); do [ -s "$T/port-$name" ] && break; sleep 0.1; done
  [ -s "$T/port-$name" ] || { echo "rrpcd $name did not start:" >&2; cat "$T/rrpcd-$name.log" >&2; exit 1; }
}

echo "== one rrpcd, registry in memory"
start_rrpcd mem
"$BENCH" --brokers "127.0.0.1:$(cat "$T/port-mem")" --certs "$T" "$@"

if [ ! -x "$ETCD" ]; then
  echo "== two rrpcd on etcd: SKIPPED (no etcd at $ETCD: apt-get install etcd-server)"
  exit 0
fi
echo "== two rrpcd on one etcd"
CP=$(free_port); PP=$(free_port)
"$ETCD" --name b --data-dir "$T/etcd" --listen-client-urls "http://127.0.0.1:$CP" \
  --advertise-client-urls "http://127.0.0.1:$CP" --listen-peer-urls "http://127.0.0.1:$PP" \
  --initial-advertise-peer-urls "http://127.0.0.1:$PP" --initial-cluster "b=http://127.0.0.1:$PP" \
  >"$T/etcd.log" 2>&1 &
PIDS="$PIDS $!"
start_rrpcd a -s "registry=etcd://127.0.0.1:$CP" -s etcd_prefix=/bench/
start_rrpcd b -s "registry=etcd://127.0.0.1:$CP" -s etcd_prefix=/bench/
"$BENCH" --brokers "127.0.0.1:$(cat "$T/port-a"),127.0.0.1:$(cat "$T/port-b")" --certs "$T" "$@"
