#!/bin/sh
# bindings/python/run-tests.sh [BUILD_DIR] [pytest args...]
#   Runs the Python tests against the package ninja assembled in
#   BUILD_DIR/bindings/python/roce_rpc/ (default BUILD_DIR: build).
#   Transport from RRPC_TEST_TRANSPORT / RRPC_TEST_SERVER / RRPC_TEST_CLIENT_SRC.
#   Exit 77 (skipped) when Debian's python3-cffi, python3-numpy or
#   python3-pytest is missing.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=${1:-$HERE/../../build}
[ $# -gt 0 ] && shift
PY=/usr/bin/python3
if ! $PY -c 'import cffi, numpy, pytest' 2>/dev/null; then
  echo "python bindings: SKIPPED: install python3-cffi python3-numpy python3-pytest python3-dev" >&2
  exit 77
fi
OUT=$(cd "$BUILD" && pwd)/bindings/python
if ! ls "$OUT"/roce_rpc/_rrpc*.so >/dev/null 2>&1; then
  echo "python bindings: no extension in $OUT/roce_rpc: configure with python3-cffi" \
       "installed (meson setup --reconfigure $BUILD) and run ninja -C $BUILD" >&2
  exit 1
fi
cd "$OUT"  # not bindings/python: "python -m" would import the sources from there
PYTHONPATH="$OUT" $PY -m pytest -q -p no:cacheprovider "$@" "$HERE/tests"
# The Python example (64 MiB tensor + KV pages, verified), on the same transport.
URI=
if [ "${RRPC_TEST_TRANSPORT:-tcp}" = verbs ]; then
  URI="--uri rdma://${RRPC_TEST_SERVER:-127.0.0.1}:0"
fi
PYTHONPATH="$OUT" $PY "$HERE/../../examples/python_tensor.py" $URI
