#!/bin/bash
# tools/doctor/test-host.sh RRPC_DOCTOR [RRPCD]
# On a host with no RDMA device: rrpc-doctor must say so, give the "rdma link add" fix and exit 1,
# in text and in --json, never call tcp a "fallback", and still show the memlock check; with
# --transport tcp it checks what tcp needs and exits 0; usage errors exit 2; --broker on a closed
# port is an error.  With RRPCD
# (the rrpcd binary), also checks --broker against a live rrpcd with development certificates:
# verified with the right CA, "not trusted" without it.  Last line: "N passed, N failed".
# Exits 77 ("skipped: ...") on a host that has RDMA devices.
set -u
DOCTOR=${1:?usage: test-host.sh RRPC_DOCTOR [RRPCD]}
RRPCD=${2:-}
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY=/usr/bin/python3
if [ -n "$(ls -A /sys/class/infiniband 2>/dev/null)" ]; then
  echo "skipped: this host has RDMA devices ($(ls /sys/class/infiniband | tr '\n' ' ')); the no-device test needs none"
  exit 77
fi
PASS=0 FAIL=0
ok() { echo "ok - $*"; PASS=$((PASS + 1)); }
bad() { echo "FAIL - $*"; FAIL=$((FAIL + 1)); }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
WORK=$(mktemp -d)
RRPCD_PID=
cleanup() { [ -n "$RRPCD_PID" ] && kill "$RRPCD_PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

# Text.
"$DOCTOR" > "$WORK/out" 2>&1; rc=$?
cat "$WORK/out"
check "text: exit status 1 (an error)" [ "$rc" = 1 ]
check "text: says no RDMA device" grep -q "^\[ERROR\] devices  no RDMA device found" "$WORK/out"
check "text: gives the Soft-RoCE fix" \
  grep -Eq "fix: create a Soft-RoCE device: modprobe rdma_rxe && rdma link add rxe0 type rxe netdev [^ ]+" "$WORK/out"
check "text: summary line" grep -Eq "^rrpc-doctor: [1-9][0-9]* errors?, " "$WORK/out"
check "text: says it checks for the verbs transport and how to check for tcp" \
  grep -q "^\[INFO \] transport checking for the verbs transport .*--transport tcp" "$WORK/out"
check "text: the memlock check is shown without devices" grep -Eq "^\[[A-Z ]+\] memlock " "$WORK/out"
check "text: tcp is never called a fallback" eval '! grep -qi "fall *back" "$WORK/out"'
# The verbs transport's module (issue #32): found and loaded; with RRPC_MODULE_DIR at an
# empty directory, an error that names the module and says what to do.
if [ -n "${RRPC_TEST_HAVE_VERBS:-}" ]; then
  check "text: the verbs module loads" \
    grep -Eq "^\[ OK  \] module +the verbs transport's module loads" "$WORK/out"
  mkdir "$WORK/no-modules"
  RRPC_MODULE_DIR=$WORK/no-modules "$DOCTOR" > "$WORK/nomod" 2>&1
  grep "module" "$WORK/nomod"
  check "text: a missing verbs module is an error naming it" \
    grep -Eq "^\[ERROR\] module +rdma:// needs the module $WORK/no-modules/roce_rpc-verbs-" "$WORK/nomod"
fi

# --transport tcp: what tcp needs; no RDMA device is not an error.
"$DOCTOR" --transport tcp > "$WORK/tcp" 2>&1; rc=$?
cat "$WORK/tcp"
check "tcp: exit status 0 without RDMA devices" [ "$rc" = 0 ]
check "tcp: says it checks for the tcp transport" \
  grep -q "^\[INFO \] transport checking for the tcp transport" "$WORK/tcp"
check "tcp: no RDMA device is info, not an error" \
  grep -q "^\[INFO \] devices  0 RDMA devices (not needed for tcp://" "$WORK/tcp"
check "tcp: the network, open-files and memlock checks are shown" \
  eval 'grep -Eq "^\[[A-Z ]+\] network " "$WORK/tcp" && grep -Eq "^\[[A-Z ]+\] fds " "$WORK/tcp" &&
        grep -Eq "^\[[A-Z ]+\] memlock .*" "$WORK/tcp"'
"$DOCTOR" --transport tcp --json > "$WORK/tcpjson" 2>&1; rc=$?
if [ "$rc" = 0 ] && $PY - "$WORK/tcpjson" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
f = d["findings"]
t = [x for x in f if x["check"] == "transport"]
assert len(t) == 1 and t[0]["details"]["transport"] == "tcp", t
assert not [x for x in f if x["severity"] == "error"], f
assert d["summary"]["exit_code"] == 0, d["summary"]
assert [x for x in f if x["check"] == "memlock"], f
PYEOF
then ok "tcp --json: transport tcp, no error, memlock listed, exit 0"
else bad "tcp --json: exit $rc, content (see above)"; fi

# JSON.
"$DOCTOR" --json > "$WORK/json" 2>"$WORK/err"; rc=$?
check "json: exit status 1" [ "$rc" = 1 ]
check "json: nothing on stderr" [ ! -s "$WORK/err" ]
if $PY - "$WORK/json" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
f = d["findings"]
dev = [x for x in f if x["check"] == "devices"]
assert len(dev) == 1, dev
dev = dev[0]
assert dev["severity"] == "error", dev
assert "no RDMA device" in dev["message"], dev
assert "modprobe rdma_rxe && rdma link add rxe0 type rxe netdev " in dev["fix"], dev
assert dev["details"]["devices"] == 0, dev
s = d["summary"]
assert s["error"] == sum(1 for x in f if x["severity"] == "error") >= 1, s
assert s["exit_code"] == 1, s
for x in f:
    assert x["severity"] in ("ok", "info", "warn", "error"), x
    assert set(x) == {"severity", "check", "subject", "message", "fix", "details"}, x
    assert x["severity"] != "error" or x["fix"], x      # every error comes with its fix
PYEOF
then ok "json: parses; one 'devices' error with the rdma link add fix; summary matches"
else bad "json: content (see the assertion above)"; fi

# Usage.
"$DOCTOR" --bogus >/dev/null 2>&1; check "usage: unknown option exits 2" [ $? = 2 ]
"$DOCTOR" extra >/dev/null 2>&1; check "usage: stray argument exits 2" [ $? = 2 ]
"$DOCTOR" --ca x >/dev/null 2>&1; check "usage: --ca without --broker exits 2" [ $? = 2 ]
"$DOCTOR" --transport carrier-pigeon >/dev/null 2>&1
check "usage: an unknown --transport exits 2" [ $? = 2 ]
"$DOCTOR" --help > "$WORK/help"; rc=$?
check "--help exits 0 and documents --json" eval '[ $rc = 0 ] && grep -q -- "--json" "$WORK/help"'

# Broker: a closed port.
PORT=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$DOCTOR" --json --broker 127.0.0.1:$PORT --timeout 2000 > "$WORK/b0" 2>&1
if $PY - "$WORK/b0" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
b = [x for x in d["findings"] if x["check"] == "broker"][0]
assert b["severity"] == "error" and "does not answer" in b["message"], b
assert "start the broker" in b["fix"] and b["details"]["reachable"] is False, b
PYEOF
then ok "broker: a closed port is an error with the fix"; else bad "broker: closed port"; fi

# Broker: a live rrpcd (when its binary and the openssl command exist).
if [ -n "$RRPCD" ] && [ -x "$RRPCD" ] && command -v openssl >/dev/null; then
  "$SRC/scripts/make-dev-certs.sh" "$WORK/certs" doctor-client >/dev/null 2>&1
  cat > "$WORK/rrpcd.conf" <<CONF
listen = 127.0.0.1:0
port_file = $WORK/port
cert = $WORK/certs/rrpcd.crt
key = $WORK/certs/rrpcd.key
ca = $WORK/certs/ca.crt
CONF
  "$RRPCD" -c "$WORK/rrpcd.conf" 2> "$WORK/rrpcd.log" &
  RRPCD_PID=$!
  for _ in $(seq 100); do [ -s "$WORK/port" ] && break; sleep 0.05; done
  if [ -s "$WORK/port" ]; then
    B=127.0.0.1:$(cat "$WORK/port")
    "$DOCTOR" --broker "$B" --ca "$WORK/certs/ca.crt" > "$WORK/b1" 2>&1
    cat "$WORK/b1" | grep broker
    check "broker: live rrpcd verified with --ca" grep -Eq "^\[ OK  \] broker +broker $B answers: TLSv1.3, .* verified against" "$WORK/b1"
    "$DOCTOR" --broker "$B" --timeout 2000 > "$WORK/b2" 2>&1
    grep broker "$WORK/b2"
    check "broker: without the CA it is reachable but not trusted" \
      grep -q "^\[ERROR\] broker   broker $B answers (TLSv1.3) but its certificate .* is not trusted" "$WORK/b2"
    check "broker: ... and the fix names --ca" grep -q "fix: pass the CA that signed rrpcd's certificate: --ca FILE" "$WORK/b2"
  else
    bad "rrpcd did not start: $(cat "$WORK/rrpcd.log")"
  fi
fi

# DCB (--dcb-netdev): the class mapping is printed; lo has no DCB (a warning, not an error); dcb
# missing; a stand-in dcb replaying the man pages' outputs; output that does not parse.
"$DOCTOR" --json --dcb-netdev lo > "$WORK/dcb0" 2>&1
RRPC_DOCTOR_DCB=/nonexistent/dcb "$DOCTOR" --json --dcb-netdev lo > "$WORK/dcb1" 2>&1
RRPC_DOCTOR_DCB="$SRC/tools/doctor/fake-dcb.sh" "$DOCTOR" --json --dcb-netdev lo > "$WORK/dcb2" 2>&1
RRPC_DOCTOR_DCB="$SRC/tools/doctor/fake-dcb.sh" FAKE_DCB_PFC=garbage "$DOCTOR" --json --dcb-netdev lo \
  > "$WORK/dcb3" 2>&1
if $PY - "$WORK" <<'PYEOF'
import json, sys
w = sys.argv[1]
def load(n):
    return json.load(open(w + "/" + n))["findings"]
def only(f, check):
    m = [x for x in f if x["check"] == check]
    assert len(m) == 1, (check, m)
    return m[0]
c = only(load("dcb0"), "classes")
assert c["details"] == {"control": 48, "low_latency": 46, "bulk": 10, "background": 8}, c
assert "control DSCP 48 -> priority 6" in c["message"] and "DSCP >> 3" in c["message"], c
f = load("dcb0")
if [x for x in f if x["check"] == "dcb"]:   # dcb installed: lo has no DCB
    d = only(f, "dcb")
    assert d["severity"] == "warn" and "lo has no DCB" in d["message"], d
    assert d["details"]["dcb"] == "not supported", d
    assert not [x for x in f if x["check"] in ("pfc", "ets", "trust")], f
d = only(load("dcb1"), "dcb")
assert d["severity"] == "warn" and "not installed" in d["message"] and "iproute2" in d["fix"], d
f = load("dcb2")
p = only(f, "pfc")
assert p["severity"] == "warn" and "dcb pfc set dev lo prio-pfc 1:on 5:on" in p["fix"], p
t = only(f, "trust")
assert t["severity"] == "warn" and "dcb app add dev lo dscp-prio 46:5 10:1 8:1" in t["fix"], t
e = only(f, "ets")
assert e["severity"] == "ok" and "prio 1 -> tc 1 ets 33%" in e["message"], e
p = only(load("dcb3"), "pfc")
assert p["severity"] == "warn" and "cannot parse" in p["message"] and "sometimes" in p["message"], p
for n in ("dcb0", "dcb1", "dcb2", "dcb3"):
    for x in load(n):
        assert x["check"] not in ("dcb", "pfc", "ets", "trust") or x["severity"] != "error", x
PYEOF
then ok "dcb: class map printed; no DCB / no dcb / unparsable output are warnings; PFC and trust fixes"
else bad "dcb: content (see the assertion above)"; fi
"$DOCTOR" --dcb-netdev a/b >/dev/null 2>&1; check "usage: a bad --dcb-netdev exits 2" [ $? = 2 ]

echo "$PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
