#!/bin/bash
# tests/softroce/idle-mem-in-vm.sh BUILD_DIR [N]
#
# Memory per idle connection over verbs (a measurement, not a test; docs/performance.md quotes
# it). tests/reliability/idle_mem only speaks tcp to a local rel_server, so this uses
# tests/softroce/idle_mem_verbs.c (same method: RSS growth over N connections, default 50, each
# made one 4-byte call per class then left idle; server and client in two processes): in the
# Soft-RoCE VM the server listens on rdma://10.77.0.2 (rxe1) and the client binds 10.77.0.1
# (rxe0). Three runs: keepalives off (RRPC_KEEPALIVE_MS=0: nothing is ever trimmed),
# RRPC_KEEPALIVE_MS=300 with 1.5 s idle (the core has called the transport's idle trim), and the
# same with one call on low_latency only (-r: an RPC-only client, one queue pair), plus, for
# comparison, the same program over tcp in the VM.
#
# On a host it compiles idle_mem_verbs against BUILD_DIR/libroce_rpc into BUILD_DIR/idle-mem/ and
# re-runs itself in a VM via run-in-vm.sh (BUILD_DIR shared). Exit 77 and "skipped: <reason>"
# when no VM can be made or BUILD_DIR has no verbs transport; otherwise 0 when every run worked.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: tests/softroce/idle-mem-in-vm.sh BUILD_DIR [N]" >&2; exit 2; }
BUILD=$(cd "$1" 2>/dev/null && pwd) || { echo "idle-mem-in-vm: no such directory: $1" >&2; exit 2; }
N=${2:-50}
OUT=$BUILD/idle-mem

# ---- on the host: build the program, then start a VM ------------------------------------------
if [ "${SOFTROCE_IN_VM:-}" != 1 ]; then
  if ! grep -q RRPC_HAVE_VERBS "$BUILD/build.ninja" 2>/dev/null; then
    echo "skipped: $BUILD was configured without the verbs transport (install libibverbs-dev librdmacm-dev, meson setup --reconfigure)"
    exit 77
  fi
  [ -e "$BUILD/libroce_rpc/libroce_rpc.so" ] ||
    { echo "idle-mem-in-vm: $BUILD/libroce_rpc/libroce_rpc.so missing; run: ninja -C $BUILD" >&2; exit 2; }
  mkdir -p "$OUT" || exit 2
  TOP=$(cd "$HERE/../.." && pwd)
  ${CC:-cc} -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -I"$TOP/include" \
      -o "$OUT/idle_mem_verbs" "$HERE/idle_mem_verbs.c" \
      -L"$BUILD/libroce_rpc" -Wl,-rpath,"$BUILD/libroce_rpc" -lroce_rpc -lpthread ||
    { echo "idle-mem-in-vm: compiling idle_mem_verbs failed" >&2; exit 2; }
  cp "$HERE/idle-mem-in-vm.sh" "$OUT/idle-mem-in-vm.sh" || exit 2
  exec "$HERE/run-in-vm.sh" "$BUILD" bash "$OUT/idle-mem-in-vm.sh" "$BUILD" "$N"
fi

# ---- in the VM --------------------------------------------------------------------------------
ulimit -l unlimited   # registration pins memory
ulimit -n 65536 2>/dev/null
IP0=${SOFTROCE_IP0:-10.77.0.1} IP1=${SOFTROCE_IP1:-10.77.0.2}
RC=0
run() {   # $1 = RRPC_KEEPALIVE_MS, rest = arguments
  local ka=$1; shift
  echo "== RRPC_KEEPALIVE_MS=$ka idle_mem_verbs $* =="
  RRPC_KEEPALIVE_MS=$ka timeout 600 "$OUT/idle_mem_verbs" "$@" 2>&1 || { echo "(exit $?)"; RC=1; }
}
echo "# $(grep MemTotal /proc/meminfo), $(nproc) CPUs, kernel $(uname -r)"
run 0   -x rdma -n "$N" -w 1500 -s "$IP1" -c "$IP0"
run 300 -x rdma -n "$N" -w 1500 -s "$IP1" -c "$IP0"
run 300 -x rdma -n "$N" -w 1500 -s "$IP1" -c "$IP0" -r
run 300 -x tcp  -n "$N" -w 1500 -s "$IP1" -c "$IP0"
exit $RC
