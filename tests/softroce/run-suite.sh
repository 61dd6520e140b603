#!/bin/bash
# run-suite.sh BUILD_DIR
# Runs the conformance suite over the verbs transport inside the Soft-RoCE VM:
# the server listens on rxe1 (10.77.0.2), the client binds 10.77.0.1 (rxe0),
# so every message crosses the veth as RoCEv2.  Prints "skipped: <reason>"
# and exits 77 when no VM can be made here or the build has no verbs.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
BUILD=$(cd "${1:?usage: run-suite.sh BUILD_DIR}" && pwd)
case "$BUILD/" in
  "$TOP"/*) ;;
  *) echo "run-suite: BUILD_DIR must be inside $TOP (the VM sees only that tree)" >&2; exit 2 ;;
esac
if ! grep -q "RRPC_HAVE_VERBS" "$BUILD/build.ninja" 2>/dev/null; then
  echo "skipped: $BUILD was configured without the verbs transport (install libibverbs-dev librdmacm-dev, meson setup --reconfigure)"
  exit 77
fi
SOFTROCE_ENV="export RRPC_TEST_TRANSPORT=verbs RRPC_TEST_SERVER=10.77.0.2 RRPC_TEST_CLIENT_SRC=10.77.0.1" \
  exec "$HERE/run-in-vm.sh" "$TOP" "$BUILD/tests/conformance"
