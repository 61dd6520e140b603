#!/bin/bash
# tests/softroce/grant-cost-in-vm.sh BUILD_DIR [ROUNDS [CYCLES]]
#
# What a grant (rrpc_region_grant + rrpc_grant_revoke) costs against registering the same range
# (rrpc_mem_reg + rrpc_region_token + rrpc_mem_dereg), over verbs in the Soft-RoCE VM and over tcp
# beside it, and whether CYCLES grant/revoke rounds (default 100000) leave anything behind: the
# process's RSS, VmPin and fds (grant_cost prints them) and the device's MRs and MWs (`rdma
# resource`, before and after).  A measurement, not a test (docs/performance.md quotes it).
#
# On a host it compiles tests/softroce/grant_cost.c against BUILD_DIR/libroce_rpc into
# BUILD_DIR/grant-cost/ and re-runs itself in a VM via run-in-vm.sh.  Exit 77 and "skipped: ..."
# when BUILD_DIR has no verbs transport; otherwise 0 when every run worked.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ $# -ge 1 ] && [ $# -le 3 ] ||
  { echo "usage: tests/softroce/grant-cost-in-vm.sh BUILD_DIR [ROUNDS [CYCLES]]" >&2; exit 2; }
BUILD=$(cd "$1" 2>/dev/null && pwd) || { echo "grant-cost-in-vm: no such directory: $1" >&2; exit 2; }
ROUNDS=${2:-2000} CYCLES=${3:-100000}
OUT=$BUILD/grant-cost

if [ "${SOFTROCE_IN_VM:-}" != 1 ]; then
  if ! grep -q RRPC_HAVE_VERBS "$BUILD/build.ninja" 2>/dev/null; then
    echo "skipped: $BUILD was configured without the verbs transport (install libibverbs-dev librdmacm-dev, meson setup --reconfigure)"
    exit 77
  fi
  [ -e "$BUILD/libroce_rpc/libroce_rpc.so" ] ||
    { echo "grant-cost-in-vm: $BUILD/libroce_rpc/libroce_rpc.so missing; run: ninja -C $BUILD" >&2; exit 2; }
  mkdir -p "$OUT" || exit 2
  TOP=$(cd "$HERE/../.." && pwd)
  ${CC:-cc} -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -I"$TOP/include" \
      -o "$OUT/grant_cost" "$HERE/grant_cost.c" \
      -L"$BUILD/libroce_rpc" -Wl,-rpath,"$BUILD/libroce_rpc" -lroce_rpc -lpthread ||
    { echo "grant-cost-in-vm: compiling grant_cost failed" >&2; exit 2; }
  cp "$HERE/grant-cost-in-vm.sh" "$OUT/grant-cost-in-vm.sh" || exit 2
  exec "$HERE/run-in-vm.sh" "$BUILD" bash "$OUT/grant-cost-in-vm.sh" "$BUILD" "$ROUNDS" "$CYCLES"
fi

# ---- in the VM --------------------------------------------------------------------------------
ulimit -l unlimited
IP0=${SOFTROCE_IP0:-10.77.0.1} IP1=${SOFTROCE_IP1:-10.77.0.2}
RC=0
res() { echo "# rdma resource ($1): $(rdma resource show 2>/dev/null | tr '\n' ' ')"; }
echo "# $(grep MemTotal /proc/meminfo), $(nproc) CPUs, kernel $(uname -r)"
res before
timeout 1800 "$OUT/grant_cost" -x rdma -s "$IP1" -c "$IP0" -n "$ROUNDS" -k "$CYCLES" ||
  { echo "(exit $?)"; RC=1; }
res after
timeout 900 "$OUT/grant_cost" -x tcp -s "$IP1" -c "$IP0" -n "$ROUNDS" -k "$CYCLES" ||
  { echo "(exit $?)"; RC=1; }
exit $RC
