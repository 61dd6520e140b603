#!/bin/sh
# tests/metrics/check-prometheus.sh STATS_TRAFFIC [GRAFANA_DASHBOARD_JSON]
#   The metrics text of a client and a server that exchanged traffic in two
#   classes, read by Prometheus' own tools: `promtool check metrics` (Debian's
#   prometheus package) must accept it, and the parser of python3-prometheus-client
#   must find the counters moved in each class.  Exit 77 when neither tool is
#   installed (the reason is printed).
set -eu
BIN=$1
PY=/usr/bin/python3
HAVE_PROMTOOL=no; command -v promtool >/dev/null 2>&1 && HAVE_PROMTOOL=yes
HAVE_PARSER=no; $PY -c 'import prometheus_client.parser' 2>/dev/null && HAVE_PARSER=yes
if [ $HAVE_PROMTOOL = no ] && [ $HAVE_PARSER = no ]; then
  echo "check-prometheus: SKIPPED: install prometheus (promtool) and python3-prometheus-client" >&2
  exit 77
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$BIN" --dump > "$T/all"
sed '/^# server$/,$d' "$T/all" > "$T/client"
sed '1,/^# server$/d' "$T/all" > "$T/server"
for side in client server; do
  if [ $HAVE_PROMTOOL = yes ]; then
    if ! promtool check metrics < "$T/$side" > "$T/$side.promtool" 2>&1; then
      echo "promtool check metrics refused the $side's text:" >&2
      cat "$T/$side.promtool" >&2
      exit 1
    fi
    echo "promtool check metrics: the $side's text is accepted"
  else
    echo "promtool: not installed (prometheus package), not checked"
  fi
done
if [ $HAVE_PARSER = no ]; then
  echo "python3-prometheus-client: not installed, not checked"
else
$PY - "$T/client" "$T/server" <<'PYEOF'
import sys
from prometheus_client.parser import text_string_to_metric_families

def samples(path):
    out = {}
    for fam in text_string_to_metric_families(open(path).read()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out

c, s = samples(sys.argv[1]), samples(sys.argv[2])
def val(d, name, **labels):
    return d[(name, tuple(sorted(labels.items())))]

checks = [
    (val(c, "rrpc_calls_total", **{"class": "low_latency"}), 11),
    (val(c, "rrpc_calls_total", **{"class": "bulk"}), 5),
    (val(c, "rrpc_calls_total", **{"class": "background"}), 0),
    (val(c, "rrpc_calls_failed_total", **{"class": "low_latency"}), 1),
    (val(c, "rrpc_call_sent_bytes_total", **{"class": "bulk"}), 5000),
    (val(c, "rrpc_onesided_bytes_total", **{"class": "bulk"}), 4096),
    (val(c, "rrpc_call_duration_seconds_count", **{"class": "low_latency"}), 11),
    (val(c, "rrpc_call_duration_seconds_bucket", **{"class": "bulk", "le": "+Inf"}), 5),
    (val(s, "rrpc_requests_total", **{"class": "low_latency"}), 11),
    (val(s, "rrpc_requests_total", **{"class": "bulk"}), 5),
    (val(c, "rrpc_connections_up_total"), 1),
    (val(c, "rrpc_call_errors_total", **{"class": "low_latency", "code": "RRPC_E_NO_METHOD"}), 1),
    (val(c, "rrpc_call_errors_total", **{"class": "bulk", "code": "RRPC_E_DEADLINE"}), 0),
    (val(c, "rrpc_onesided_duration_seconds_count", **{"class": "bulk"}), 1),
    (val(c, "rrpc_send_queue_frames", **{"class": "bulk"}), 0),
    (val(c, "rrpc_credit_wait_seconds_total", **{"class": "low_latency"}), 0),
    (val(c, "rrpc_peer_calls_total", peer="127.0.0.1"), 16),
    (val(c, "rrpc_peer_connections", peer="127.0.0.1"), 1),
    (val(c, "rrpc_peer_onesided_bytes_total", peer="127.0.0.1"), 4096),
    (val(s, "rrpc_peer_requests_total", peer="127.0.0.1"), 16),
]
bad = [(i, got, want) for i, (got, want) in enumerate(checks) if got != want]
assert not bad, "prometheus_client read other values: %r" % bad
print("prometheus_client: %d samples of the client, %d of the server; %d checks hold"
      % (len(c), len(s), len(checks)))
PYEOF
fi
# The Grafana dashboard's queries are PromQL that Prometheus parses: promtool
# checks them as the expressions of recording rules.
DASH=${2:-}
if [ -n "$DASH" ] && [ $HAVE_PROMTOOL = yes ]; then
  $PY - "$DASH" > "$T/rules.yml" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
exprs = [t["expr"].replace("$job", ".*") for p in d["panels"] for t in p["targets"]]
assert exprs, "no queries in the dashboard"
print("groups:\n  - name: dashboard\n    rules:")
for i, e in enumerate(exprs):
    print("      - record: dashboard_query_%d\n        expr: %s" % (i, json.dumps(e)))
PYEOF
  if ! promtool check rules "$T/rules.yml" > "$T/rules.out" 2>&1; then
    echo "promtool check rules refused a query of $DASH:" >&2
    cat "$T/rules.out" >&2
    exit 1
  fi
  echo "promtool check rules: the $(grep -c record "$T/rules.yml") queries of the dashboard parse"
fi
