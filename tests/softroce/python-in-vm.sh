#!/bin/bash
# tests/softroce/python-in-vm.sh [BUILD_DIR]
#
# The Python bindings over verbs in the Soft-RoCE VM:
#   1. bindings/python/run-tests.sh BUILD_DIR (builds the cffi extension into
#      BUILD_DIR/bindings/python, runs the pytest suite, then examples/python_tensor.py in one
#      process) with RRPC_TEST_TRANSPORT=verbs RRPC_TEST_SERVER=10.77.0.2
#      RRPC_TEST_CLIENT_SRC=10.77.0.1: the pytest client binds 10.77.0.1, so its traffic crosses
#      the veth (the example's one-process run connects without a source address: inside rxe1);
#   2. examples/python_tensor.py as two processes across the veth: --mode server on
#      rdma://10.77.0.2:7100, --mode client on rdma://10.77.0.2:7100?src=10.77.0.1.
# The VM's shared directory is the source tree (BUILD_DIR must be inside it; default: build).
# Extra arguments after BUILD_DIR go to pytest (e.g. -k memory, -x).
# Output: "ok - ..." / "FAIL - ..." per step, last line "N passed, N failed"; exit 0 only if nothing
# failed; 77 + "skipped: <reason>" when no VM can be made, the build has no verbs transport or
# Debian's python3-cffi/numpy/pytest are missing.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TOP=$(cd "$HERE/../.." && pwd -P)
BUILD=$(cd "${1:-$TOP/build}" 2>/dev/null && pwd -P) || { echo "python-in-vm: no such directory: ${1:-build}" >&2; exit 2; }
[ $# -gt 0 ] && shift

if [ "${SOFTROCE_IN_VM:-}" != 1 ]; then
  case $BUILD/ in "$TOP"/*) ;; *) echo "python-in-vm: BUILD_DIR must be inside $TOP (the VM's shared directory)" >&2; exit 2 ;; esac
  if ! grep -q RRPC_HAVE_VERBS "$BUILD/build.ninja" 2>/dev/null; then
    echo "skipped: $BUILD was configured without the verbs transport (install libibverbs-dev librdmacm-dev, meson setup --reconfigure)"
    exit 77
  fi
  /usr/bin/python3 -c 'import cffi, numpy, pytest' 2>/dev/null ||
    { echo "skipped: python3-cffi, python3-numpy or python3-pytest missing on the host (the VM uses the host's)"; exit 77; }
  export SOFTROCE_TIMEOUT=${SOFTROCE_TIMEOUT:-900}
  exec "$HERE/run-in-vm.sh" "$TOP" bash "$HERE/python-in-vm.sh" "$BUILD" "$@"
fi

# ---- in the VM -----------------------------------------------------------------------------
ulimit -l unlimited || echo "python-in-vm: cannot lift the memlock limit" >&2
PASS=0 FAIL=0
ok()  { PASS=$((PASS + 1)); echo "ok   - $*"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL - $*"; }
export RRPC_TEST_TRANSPORT=verbs RRPC_TEST_SERVER=$SOFTROCE_IP1 RRPC_TEST_CLIENT_SRC=$SOFTROCE_IP0
# torch is not loaded in the guest: under TCG its libraries take minutes to
# load, and what the torch tests check (DLPack in and out) does not depend on
# the transport; the host's run covers them.
export RRPC_TEST_NO_TORCH=1
LOG=$BUILD/softroce-python
mkdir -p "$LOG"

t0=$(date +%s)
timeout -k 5 600 sh "$TOP/bindings/python/run-tests.sh" "$BUILD" "$@" > "$LOG/run-tests.txt" 2>&1
rc=$?
cat "$LOG/run-tests.txt"
summary=$(grep -E '^[=]* *[0-9]+ (passed|failed|error)|(passed|failed|skipped|error).* in [0-9.]+s' "$LOG/run-tests.txt" | tail -1)
if [ $rc = 0 ]; then
  ok "bindings/python/run-tests.sh over verbs ($(( $(date +%s) - t0 )) s): pytest ${summary:-?}; python_tensor one process OK"
else
  bad "bindings/python/run-tests.sh over verbs: exit $rc; pytest ${summary:-?}"
fi

PY_OUT=$BUILD/bindings/python
URI=rdma://$SOFTROCE_IP1:7100
PYTHONPATH=$PY_OUT timeout 300 /usr/bin/python3 -u "$TOP/examples/python_tensor.py" --mode server --uri "$URI" > "$LOG/tensor-server.txt" 2>&1 &
SPID=$!
for _ in $(seq 1 300); do grep -q 'serving on' "$LOG/tensor-server.txt" && break; kill -0 $SPID 2>/dev/null || break; sleep 0.2; done
PYTHONPATH=$PY_OUT timeout 300 /usr/bin/python3 -u "$TOP/examples/python_tensor.py" --mode client --uri "$URI?src=$SOFTROCE_IP0" > "$LOG/tensor-client.txt" 2>&1
rc=$?
kill -INT $SPID 2>/dev/null; sleep 1; kill $SPID 2>/dev/null; wait $SPID 2>/dev/null
cat "$LOG/tensor-server.txt" "$LOG/tensor-client.txt"
if [ $rc = 0 ] && grep -q 'KV pages verified' "$LOG/tensor-client.txt"; then
  ok "python_tensor.py server $URI, client src $SOFTROCE_IP0 (across the veth): tensor and KV pages verified"
else
  bad "python_tensor.py across the veth: client exit $rc"
fi
echo "$PASS passed, $FAIL failed"
[ $FAIL = 0 ]
