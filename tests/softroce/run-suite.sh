#!/bin/bash
# [RRPC_TEST_MODE=driven] run-suite.sh BUILD_DIR [TEST_BINARY]
# Runs a test binary of BUILD_DIR (default: the conformance suite) over the
# verbs transport inside the Soft-RoCE VM: the server listens on rxe1
# (10.77.0.2), the client binds 10.77.0.1 (rxe0), so every message crosses
# the veth as RoCEv2.  Only BUILD_DIR is shared with the VM (its binaries
# find the library through their rpath).  Prints "skipped: <reason>" and
# exits 77 when no VM can be made here or the build has no verbs transport.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUILD=$(cd "${1:?usage: run-suite.sh BUILD_DIR [TEST_BINARY]}" && pwd)
TEST=${2:-tests/conformance}
if ! grep -q "RRPC_HAVE_VERBS" "$BUILD/build.ninja" 2>/dev/null; then
  echo "skipped: $BUILD was configured without the verbs transport" \
       "(install libibverbs-dev librdmacm-dev, then meson setup --reconfigure)"
  exit 77
fi
# The verbs transport is a module beside the library (BUILD/libroce_rpc/roce_rpc/), which the
# VM sees through the shared build directory; programs linking the library find it there.
if ! compgen -G "$BUILD/libroce_rpc/roce_rpc/roce_rpc-verbs-*.so" > /dev/null; then
  echo "run-suite: $BUILD/libroce_rpc/roce_rpc/roce_rpc-verbs-*.so missing; run: ninja -C $BUILD" >&2
  exit 2
fi
# Registration pins memory: lift the memlock limit for the test (root in the VM).
# RRPC_TEST_MODE=driven (the conformance suite drives both contexts itself) and
# RRPC_TEST_GRANT_CYCLES go along.
SOFTROCE_ENV="export RRPC_TEST_TRANSPORT=verbs RRPC_TEST_SERVER=10.77.0.2 RRPC_TEST_CLIENT_SRC=10.77.0.1${RRPC_TEST_MODE:+ RRPC_TEST_MODE=$RRPC_TEST_MODE}${RRPC_TEST_GRANT_CYCLES:+ RRPC_TEST_GRANT_CYCLES=$RRPC_TEST_GRANT_CYCLES}" \
  exec "$HERE/run-in-vm.sh" "$BUILD" bash -c 'ulimit -l unlimited && exec "$0"' "$BUILD/$TEST"
