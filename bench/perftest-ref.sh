#!/bin/bash
# perftest-ref.sh DEVICE ADDR [PORT]
#
# Runs perftest beside rrpc-bench on this host (server and client of each
# tool on the same RDMA device, as rrpc-bench's local mode does) and prints
# the reference figures as rrpc-bench options:
#
#   --ref-send-lat US    ib_send_lat -s 64: t_typical (perftest reports RTT/2)
#   --ref-write-bw MIBS  ib_write_bw -s 1048576: BW average (MiB/s)
#
# Usage in the Soft-RoCE VM, for the verbs targets of docs/performance.md:
#   rrpc-bench local --transport all $(bench/perftest-ref.sh rxe0 10.0.2.15)
set -euo pipefail
DEV=${1:?usage: perftest-ref.sh DEVICE ADDR [PORT]}
ADDR=${2:?usage: perftest-ref.sh DEVICE ADDR [PORT]}
PORT=${3:-18515}
ITERS_LAT=${PERFTEST_LAT_ITERS:-20000}
ITERS_BW=${PERFTEST_BW_ITERS:-2000}

for t in ib_send_lat ib_write_bw; do
  command -v "$t" >/dev/null || { echo "perftest-ref: $t not found (apt-get install perftest)" >&2; exit 77; }
done

# run_pair TOOL ARGS...: the server in the background, the client here; prints
# the client's output.
run_pair() {
  local tool=$1; shift
  "$tool" -R -d "$DEV" -p "$PORT" "$@" >/dev/null 2>&1 &
  local spid=$!
  local out=""
  for _ in $(seq 1 50); do # the server needs a moment to listen
    sleep 0.2
    if out=$("$tool" -R -d "$DEV" -p "$PORT" "$@" "$ADDR" 2>&1); then
      break
    fi
    out=""
  done
  wait "$spid" 2>/dev/null || true
  [ -n "$out" ] || { echo "perftest-ref: $tool did not run on $DEV/$ADDR" >&2; return 1; }
  printf '%s\n' "$out"
}

lat_out=$(run_pair ib_send_lat -s 64 -n "$ITERS_LAT")
# Data row: #bytes #iterations t_min t_max t_typical t_avg t_stdev p99 p99.9
lat=$(printf '%s\n' "$lat_out" | awk '$1 == "64" && NF >= 5 { print $5; exit }')
bw_out=$(run_pair ib_write_bw -s 1048576 -n "$ITERS_BW")
# Data row: #bytes #iterations BW_peak BW_average MsgRate
bw=$(printf '%s\n' "$bw_out" | awk '$1 == "1048576" && NF >= 4 { print $4; exit }')
if [ -z "$lat" ] || [ -z "$bw" ]; then
  echo "perftest-ref: could not parse perftest's output:" >&2
  printf '%s\n%s\n' "$lat_out" "$bw_out" >&2
  exit 1
fi
echo "perftest-ref: ib_send_lat -s 64 t_typical $lat us; ib_write_bw -s 1M BW average $bw MiB/s" >&2
echo "--ref-send-lat $lat --ref-write-bw $bw"
