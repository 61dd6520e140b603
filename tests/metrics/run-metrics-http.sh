#!/bin/sh
# tests/metrics/run-metrics-http.sh BUILD_DIR
#   GET /metrics over real HTTP (test_metrics_http.py): a context's
#   metrics_listen and rrpcd's, read by python3-prometheus-client and
#   promtool, and hostile requests.  Uses the Python package of BUILD_DIR.
#   Exit 77 when a tool it needs is missing (the reason is printed).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "$1" && pwd)
PY=/usr/bin/python3
if ! $PY -c 'import cffi, pytest, prometheus_client.parser' 2>/dev/null; then
  echo "metrics over HTTP: SKIPPED: install python3-cffi python3-pytest python3-prometheus-client" >&2
  exit 77
fi
if ! command -v promtool >/dev/null 2>&1; then
  echo "metrics over HTTP: SKIPPED: install prometheus (promtool checks every scrape)" >&2
  exit 77
fi
cd "$BUILD/bindings/python"
PYTHONPATH="$BUILD/bindings/python" exec $PY -m pytest -q -p no:cacheprovider "$HERE/test_metrics_http.py"
