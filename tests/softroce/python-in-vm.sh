#!/bin/bash
# tests/softroce/python-in-vm.sh [BUILD_DIR]
#
# The Python bindings over verbs in the Soft-RoCE VM, as a user installs them:
#   0. on the host, `meson install --destdir BUILD_DIR/softroce-python/root` (the package and
#      libroce_rpc as installed; nothing is imported from the build or source tree);
#   1. in the VM, the pytest suite against that installed package (RRPC_TEST_PACKAGE_UNDER
#      fails any test that imports roce_rpc from elsewhere), rrpcd from BUILD_DIR for the broker
#      tests, then examples/python_tensor.py in one process, with RRPC_TEST_TRANSPORT=verbs
#      RRPC_TEST_SERVER=10.77.0.2 RRPC_TEST_CLIENT_SRC=10.77.0.1: the pytest client binds
#      10.77.0.1, so its traffic crosses the veth (the example's one-process run connects
#      without a source address: inside rxe1);
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
  ROOT=$BUILD/softroce-python/root
  rm -rf "$ROOT" && mkdir -p "$ROOT"
  meson install -C "$BUILD" --no-rebuild --destdir "$ROOT" > "$BUILD/softroce-python/install.log" 2>&1 ||
    { cat "$BUILD/softroce-python/install.log"; echo "python-in-vm: meson install -C $BUILD failed" >&2; exit 1; }
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

ROOT=$LOG/root
INIT=$(find "$ROOT" -path '*/roce_rpc/__init__.py' | head -n 1)
if [ -z "$INIT" ]; then
  bad "meson install put no roce_rpc package under $ROOT (python option disabled?)"
  echo "$PASS passed, $FAIL failed"
  exit 1
fi
PY_OUT=$(dirname "$(dirname "$INIT")")  # the installed site-packages
# The broker tests start rrpcd from the build and make certificates with the script.
[ -x "$BUILD/daemon/rrpcd" ] && export RRPCD=$BUILD/daemon/rrpcd MAKE_CERTS=$TOP/scripts/make-dev-certs.sh
t0=$(date +%s)
(cd "$LOG" && RRPC_TEST_PACKAGE_UNDER=$ROOT PYTHONPATH=$PY_OUT timeout -k 5 600 \
   /usr/bin/python3 -s -m pytest -q -p no:cacheprovider "$@" "$TOP/bindings/python/tests" &&
 PYTHONPATH=$PY_OUT timeout 300 /usr/bin/python3 -s "$TOP/examples/python_tensor.py" \
   --uri "rdma://$SOFTROCE_IP1:0") > "$LOG/run-tests.txt" 2>&1
rc=$?
cat "$LOG/run-tests.txt"
summary=$(grep -E '^[=]* *[0-9]+ (passed|failed|error)|(passed|failed|skipped|error).* in [0-9.]+s' "$LOG/run-tests.txt" | tail -1)
if [ $rc = 0 ]; then
  ok "the pytest suite over verbs against the installed package ($(( $(date +%s) - t0 )) s): ${summary:-?}; python_tensor one process OK"
else
  bad "the pytest suite over verbs against the installed package: exit $rc; ${summary:-?}"
fi

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
