#!/bin/bash
# tests/softroce/bench-in-vm.sh BUILD_DIR
#
# The verbs targets of docs/performance.md (issue #6), in ONE Soft-RoCE VM run:
#   1. perftest between the two rxe devices, across the veth: server on rxe1 (10.77.0.2), client
#      on rxe0, GID index of each device's ::ffff:<IPv4> GID (-x, normally 1; no -R, because
#      perftest's rdma_cm mode ignores the source address and would stay inside rxe1):
#        ib_send_lat -s 2 and -s 64      (t_typical: perftest reports RTT/2, "one-way")
#        ib_write_bw -s 65536 and -s 1048576 (BW average, MiB/s)
#   2. rrpc-bench server on 10.77.0.2, rrpc-bench client with --src 10.77.0.1 over verbs (and tcp,
#      raw-tcp over the same addresses, which the kernel routes through lo, for comparison), tests
#      rtt (rpc_rtt 64 B), write (write_lat 64 B, write_bw 1 MiB) and large (tcp bandwidth target),
#      with --ref-send-lat = ib_send_lat -s 64 t_typical and --ref-write-bw = ib_write_bw -s 1M BW
#      average, so rrpc-bench prints the target lines.
# Results: BUILD_DIR/softroce-bench/ (perftest outputs, rrpc-bench table, JSON, CSV).
#
# Knobs (host environment, passed into the VM):
#   BENCH_DURATION      rrpc-bench --duration (default 2)
#   BENCH_TESTS         rrpc-bench --tests (default rtt,write,large)
#   BENCH_TRANSPORTS    rrpc-bench --transport (default verbs,tcp,raw-tcp)
#   BENCH_BUSY_POLL     space-separated RRPC_VERBS_BUSY_POLL_US values; one verbs-only rrpc-bench
#                       run (BENCH_TESTS) per extra value after the first; "default" leaves the
#                       variable unset, so the library's defaults apply (default: "default")
#   BENCH_PERFTEST=0    skip perftest (no references, no target lines): for diagnosis runs
#   BENCH_CLIENT_TIMEOUT seconds before a hung rrpc-bench client is killed (default 240)
#   PERFTEST_LAT_ITERS  ib_send_lat -n (default 5000); PERFTEST_BW_ITERS ib_write_bw -n for 1 MiB
#                       (default 200; 64 KiB gets the same bytes)
#   SOFTROCE_*          as for run-in-vm.sh (SOFTROCE_TIMEOUT default raised to 900 here)
# Output: "ok - ..." / "FAIL - ..." per check (the tools ran and the targets were evaluated; a
# missed target is reported as "NOT MET", not as a failure), then the target lines, then
# "N passed, N failed". Exit 0 only if nothing failed; 77 + "skipped: <reason>" when no VM can be
# made, the build has no verbs transport or perftest is missing.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ $# = 1 ] || { echo "usage: tests/softroce/bench-in-vm.sh BUILD_DIR" >&2; exit 2; }
BUILD=$(cd "$1" 2>/dev/null && pwd) || { echo "bench-in-vm: no such directory: $1" >&2; exit 2; }
OUT=$BUILD/softroce-bench
BENCH=$BUILD/bench/rrpc-bench

# ---- on the host: checks, then the VM ------------------------------------------------------
if [ "${SOFTROCE_IN_VM:-}" != 1 ]; then
  if ! grep -q RRPC_HAVE_VERBS "$BUILD/build.ninja" 2>/dev/null; then
    echo "skipped: $BUILD was configured without the verbs transport (install libibverbs-dev librdmacm-dev, meson setup --reconfigure)"
    exit 77
  fi
  for t in ib_send_lat ib_write_bw; do
    command -v $t >/dev/null || { echo "skipped: perftest's $t not found on the host (apt-get install perftest)"; exit 77; }
  done
  [ -x "$BENCH" ] || { echo "bench-in-vm: $BENCH missing; run: ninja -C $BUILD" >&2; exit 2; }
  mkdir -p "$OUT" || exit 2
  export SOFTROCE_TIMEOUT=${SOFTROCE_TIMEOUT:-900}
  export SOFTROCE_PASS_VARS="${SOFTROCE_PASS_VARS:-} BENCH_DURATION BENCH_TESTS BENCH_TRANSPORTS BENCH_BUSY_POLL BENCH_PERFTEST BENCH_CLIENT_TIMEOUT PERFTEST_LAT_ITERS PERFTEST_BW_ITERS"
  # The VM sees BUILD (shared) and the host's "/" minus /tmp, /root, ...: run a copy kept in
  # BUILD, so a checkout the guest cannot see (one under /tmp, say) works too.
  cp "$HERE/bench-in-vm.sh" "$OUT/bench-in-vm.sh" || exit 2
  exec "$HERE/run-in-vm.sh" "$BUILD" bash "$OUT/bench-in-vm.sh" "$BUILD"
fi

# ---- in the VM -----------------------------------------------------------------------------
ulimit -l unlimited || echo "bench-in-vm: cannot lift the memlock limit" >&2
PASS=0 FAIL=0
ok()  { PASS=$((PASS + 1)); echo "ok   - $*"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL - $*"; }
SRV_IP=$SOFTROCE_IP1 CLI_IP=$SOFTROCE_IP0
SRV_DEV=$SOFTROCE_DEV1 CLI_DEV=$SOFTROCE_DEV0
SRV_GID=${SOFTROCE_GID_INDEX_RXE1:-1} CLI_GID=${SOFTROCE_GID_INDEX_RXE0:-1}
LAT_N=${PERFTEST_LAT_ITERS:-5000}
BW_N=${PERFTEST_BW_ITERS:-200}
DUR=${BENCH_DURATION:-2}
TESTS=${BENCH_TESTS:-rtt,write,large}
TRANSPORTS=${BENCH_TRANSPORTS:-verbs,tcp,raw-tcp}
read -r -a POLLS <<< "${BENCH_BUSY_POLL:-default}"
mkdir -p "$OUT"
rm -f "$OUT"/rrpc-bench* "$OUT"/ib_*.txt   # this run's files only
SPID=
trap '[ -n "$SPID" ] && kill $SPID 2>/dev/null' EXIT
echo "# VM: $(nproc) vCPU, kernel $(uname -r), $(ibv_devinfo -d "$CLI_DEV" | awk '/active_mtu/{print "active_mtu " $2; exit}'), netdev MTU $SOFTROCE_MTU, GID index $CLI_GID/$SRV_GID"

# pair NAME TOOL ARGS...: the server on rxe1, the client on rxe0 towards 10.77.0.2; the client's
# output goes to OUT/NAME.txt (the server's to OUT/NAME.server.txt)
PORT=18515
pair() {
  local name=$1 tool=$2; shift 2
  PORT=$((PORT + 1))
  timeout 300 "$tool" -d "$SRV_DEV" -x "$SRV_GID" -p $PORT -F "$@" > "$OUT/$name.server.txt" 2>&1 &
  local spid=$! rc=1 t0 t1
  t0=$(date +%s%N)
  for _ in $(seq 1 50); do   # the server needs a moment to listen on its TCP port
    sleep 0.2
    timeout 300 "$tool" -d "$CLI_DEV" -x "$CLI_GID" -p $PORT -F "$@" "$SRV_IP" > "$OUT/$name.txt" 2>&1
    rc=$?
    [ $rc = 0 ] && break
    grep -q "Couldn't connect\|Unable to open file descriptor\|Failed to connect" "$OUT/$name.txt" || break
  done
  wait $spid 2>/dev/null
  t1=$(date +%s%N)
  echo "# $tool $* : rc $rc, $(( (t1 - t0) / 1000000 )) ms"
  return $rc
}
# warn FILE: perftest's own doubts about its clock (it converts TSC cycles with a measured MHz)
warn() { grep -ho 'Correlation coefficient.*\|Conflicting CPU frequency.*' "$1" "${1%.txt}.server.txt" | head -1; }
# col FILE SIZE N: column N of perftest's data row for SIZE
col() { awk -v s="$2" -v n="$3" '$1 == s && NF >= n && $2 ~ /^[0-9]+$/ { print $n; exit }' "$1"; }

declare -A LAT BW
# num V: V is a finite positive number (perftest prints inf when its TSC-to-us estimate fails)
num() { awk -v v="$1" 'BEGIN { exit !(v ~ /^[0-9]+(\.[0-9]+)?$/ && v + 0 > 0) }'; }
# lat SIZE: ib_send_lat, up to 3 tries while the figure is not a number
lat() {
  local try
  for try in 1 2 3; do
    pair "ib_send_lat_$1" ib_send_lat -s "$1" -n "$LAT_N" || return 1
    v=$(col "$OUT/ib_send_lat_$1.txt" "$1" 5)
    num "$v" && return 0
    echo "# ib_send_lat -s $1: t_typical '$v' ($(warn "$OUT/ib_send_lat_$1.txt")), try $try of 3"
  done
  return 1
}
[ "${BENCH_PERFTEST:-1}" = 0 ] && echo "# BENCH_PERFTEST=0: perftest not run, no target lines"
for s in $([ "${BENCH_PERFTEST:-1}" = 0 ] || echo 2 64); do
  if lat $s; then
    LAT[$s]=$v
    ok "ib_send_lat -s $s -n $LAT_N rxe0->rxe1: t_typical $v us (one-way = RTT/2), t_avg $(col "$OUT/ib_send_lat_$s.txt" $s 6) us, p99 $(col "$OUT/ib_send_lat_$s.txt" $s 8) us $(warn "$OUT/ib_send_lat_$s.txt")"
  else
    bad "ib_send_lat -s $s:"; sed 's/^/     /' "$OUT/ib_send_lat_$s.txt"
  fi
done
for s in $([ "${BENCH_PERFTEST:-1}" = 0 ] || echo 65536 1048576); do
  n=$(( BW_N * 1048576 / s ))   # the same bytes per size
  if pair "ib_write_bw_$s" ib_write_bw -s $s -n "$n" && v=$(col "$OUT/ib_write_bw_$s.txt" $s 4) && num "$v"; then
    BW[$s]=$v
    ok "ib_write_bw -s $s -n $n rxe0->rxe1: BW average $v MiB/s (peak $(col "$OUT/ib_write_bw_$s.txt" $s 3)) $(warn "$OUT/ib_write_bw_$s.txt")"
  else
    bad "ib_write_bw -s $s:"; sed 's/^/     /' "$OUT/ib_write_bw_$s.txt"
  fi
done

REFS=()
[ -n "${LAT[64]:-}" ] && REFS+=(--ref-send-lat "${LAT[64]}")
[ -n "${BW[1048576]:-}" ] && REFS+=(--ref-write-bw "${BW[1048576]}")

# bench NAME BUSY_POLL_US TRANSPORTS TESTS: one rrpc-bench server + client pair
BPORT=17500
bench() {
  local name=$1 bp=$2 tr=$3 tests=$4 rc pe=()
  BPORT=$((BPORT + 10))
  [ "$bp" = default ] || pe=("RRPC_VERBS_BUSY_POLL_US=$bp")
  env "${pe[@]}" "$BENCH" server --host "$SRV_IP" --port $BPORT > "$OUT/$name.server.txt" 2>&1 &
  SPID=$!
  for _ in $(seq 1 100); do grep -q running "$OUT/$name.server.txt" && break; sleep 0.1; done
  if ! grep -q "rdma://" "$OUT/$name.server.txt"; then
    bad "rrpc-bench server on $SRV_IP has rdma://"; sed 's/^/     /' "$OUT/$name.server.txt"
  fi
  env "${pe[@]}" timeout -k 5 "${BENCH_CLIENT_TIMEOUT:-240}" "$BENCH" client --host "$SRV_IP" --port $BPORT --src "$CLI_IP" \
      --transport "$tr" --tests "$tests" --duration "$DUR" --no-progress "${REFS[@]}" \
      --json "$OUT/$name.json" --csv "$OUT/$name.csv" > "$OUT/$name.txt" 2>&1
  rc=$?
  [ $rc = 124 ] || [ $rc = 137 ] && echo "# rrpc-bench client hung: killed after ${BENCH_CLIENT_TIMEOUT:-240} s" >> "$OUT/$name.txt"
  kill $SPID 2>/dev/null; wait $SPID 2>/dev/null; SPID=
  echo "# rrpc-bench client --transport $tr --tests $tests --duration $DUR (RRPC_VERBS_BUSY_POLL_US=$([ "$bp" = default ] && echo "unset: library defaults" || echo "$bp")): rc $rc"
  cat "$OUT/$name.txt"
  if [ $rc = 0 ]; then ok "rrpc-bench $name ran"; else bad "rrpc-bench $name: exit $rc"; fi
  # a test that failed (deadline, lost connection) is a row "FAILED: ..."; rrpc-bench still exits 0
  local rows; rows=$(grep 'FAILED:' "$OUT/$name.txt")   # (no /dev/fd in the VM: no <(...))
  while IFS= read -r row; do
    [ -n "$row" ] && bad "rrpc-bench $name (busy poll $bp us): $(echo "$row" | tr -s ' ')"
  done <<< "$rows"
  return $rc
}

bench rrpc-bench "${POLLS[0]}" "$TRANSPORTS" "$TESTS"
for t in $([ "${BENCH_PERFTEST:-1}" = 0 ] || echo rtt bw); do
  case $t in rtt) t="verbs 64 B RTT" ;; bw) t="verbs 1 MiB WRITE" ;; esac  # as report.c names them
  line=$(grep "^target $t" "$OUT/rrpc-bench.txt")
  case $line in
    *"not evaluated"*|"") bad "target evaluated: ${line:-no line for $t}" ;;
    *) ok "target evaluated: ${line#target }" ;;
  esac
done
for bp in "${POLLS[@]:1}"; do
  bench "rrpc-bench-busy$bp" "$bp" verbs "$TESTS"
done

echo
echo "# summary (Soft-RoCE, TCG-emulated guest: only the ratios mean anything)"
[ -n "${LAT[2]:-}" ] && echo "# ib_send_lat -s 2  t_typical ${LAT[2]} us one-way -> RTT $(awk -v v="${LAT[2]}" 'BEGIN{printf "%.2f", 2*v}') us"
[ -n "${LAT[64]:-}" ] && echo "# ib_send_lat -s 64 t_typical ${LAT[64]} us one-way -> RTT $(awk -v v="${LAT[64]}" 'BEGIN{printf "%.2f", 2*v}') us"
[ -n "${BW[65536]:-}" ] && echo "# ib_write_bw -s 64K BW average ${BW[65536]} MiB/s"
[ -n "${BW[1048576]:-}" ] && echo "# ib_write_bw -s 1M  BW average ${BW[1048576]} MiB/s"
for f in "$OUT"/rrpc-bench*.txt; do
  case $f in *.server.txt) continue ;; esac
  grep -H '^target verbs' "$f" | sed "s|^$OUT/||"
done
echo "$PASS passed, $FAIL failed"
[ $FAIL = 0 ]
