#!/bin/bash
# run-demo.sh RRPC_DEMO [tcp|verbs|auto]
# Starts an rrpc-demo server and runs a client against it.  auto picks verbs
# when an RDMA device exists (and this build has the verbs transport),
# otherwise tcp, and says which and why.
set -euo pipefail
DEMO=$1
MODE=${2:-auto}
PORT=${RRPC_DEMO_PORT:-$((20000 + RANDOM % 20000))}
if [ "$MODE" = auto ]; then
  if ls /sys/class/infiniband/* >/dev/null 2>&1; then
    MODE=verbs
    echo "run-demo: RDMA device(s) found: $(ls /sys/class/infiniband | tr '\n' ' ')-> verbs transport"
  else
    MODE=tcp
    echo "run-demo: no RDMA device on this host (/sys/class/infiniband is empty) -> tcp transport"
    echo "run-demo: (for RoCEv2 without a RoCE NIC: rdma link add rxe0 type rxe netdev <if>; see docs/)"
  fi
fi
HOST=${RRPC_DEMO_HOST:-127.0.0.1}
case "$MODE" in
  tcp) URI="tcp://$HOST:$PORT" ;;
  verbs) URI="rdma://$HOST:$PORT" ;;
  *) echo "run-demo: unknown transport $MODE" >&2; exit 2 ;;
esac
"$DEMO" server "$URI" &
SPID=$!
trap 'kill $SPID 2>/dev/null; wait $SPID 2>/dev/null || true' EXIT
"$DEMO" client "$URI${RRPC_DEMO_CLIENT_QUERY:-}"
