#!/bin/bash
# tools/doctor/test-in-vm.sh BUILD_DIR
# Runs BUILD_DIR/tools/doctor/rrpc-doctor in the Soft-RoCE VM (tests/softroce/run-in-vm.sh; only
# BUILD_DIR is shared, the binary finds its libraries through its rpath) and checks that it
#   - finds rxe0 and rxe1 and says they are software (Soft-RoCE), exit status 0 (no errors)
#   - finds the RoCE v2 GIDs of 10.77.0.1 (rxe0) and 10.77.0.2 (rxe1) at the harness's indexes
#   - says va and vb (veth) have no DCB, as a warning, and prints the class -> DSCP -> priority map
#   - reports active_mtu 1024 against netdev MTU 1500 with the "raise the netdev MTU" fix
#   - reports a port whose netdev is down as an error with "ip link set va up", exit status 1
#   - with the devices deleted, reports "no RDMA device" with the rdma link add fix
# Last line "N passed, N failed"; exits 77 with "skipped: <reason>" when no VM can be made here.
# Waits until no other qemu-system runs (one VM at a time).
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SELF="$HERE/$(basename "${BASH_SOURCE[0]}")"

if [ "${SOFTROCE_IN_VM:-}" != 1 ]; then
  BUILD=$(cd "${1:?usage: test-in-vm.sh BUILD_DIR}" && pwd) || exit 2
  if [ ! -x "$BUILD/tools/doctor/rrpc-doctor" ]; then
    echo "test-in-vm: $BUILD/tools/doctor/rrpc-doctor is missing (ninja -C $BUILD)" >&2
    exit 2
  fi
  # One VM at a time on this host: wait (up to SOFTROCE_WAIT seconds) for others to finish.
  waited=0
  while pgrep -f qemu-system >/dev/null; do
    [ "$waited" = 0 ] && echo "test-in-vm: waiting for the running VM to finish..." >&2
    if [ "$waited" -ge "${SOFTROCE_WAIT:-1800}" ]; then
      echo "skipped: another qemu-system VM kept running for ${SOFTROCE_WAIT:-1800} s"
      exit 77
    fi
    sleep 5; waited=$((waited + 5))
  done
  # The VM sees only BUILD_DIR and the host's "/" (with a fresh /tmp): run a
  # copy of this script from BUILD_DIR, so a source tree anywhere works.
  cp "$SELF" "$BUILD/tools/doctor/test-in-vm.sh" || exit 2
  exec "$HERE/../../tests/softroce/run-in-vm.sh" "$BUILD" bash "$BUILD/tools/doctor/test-in-vm.sh" "$BUILD"
fi

# ---- inside the VM -------------------------------------------------------------------------
BUILD=$1
DOCTOR=$BUILD/tools/doctor/rrpc-doctor
# The build tree's doctor links the core statically, so it is not beside the modules as
# libroce_rpc.so is: point it at the build's module directory (as meson test does on the host).
export RRPC_MODULE_DIR=$BUILD/libroce_rpc/roce_rpc
PY=/usr/bin/python3
OUT=$BUILD/doctor-vm.$$    # /tmp is an empty tmpfs in the VM; any place would do
mkdir -p "$OUT"
trap 'rm -rf "$OUT"' EXIT
PASS=0 FAIL=0
ok() { echo "ok - $*"; PASS=$((PASS + 1)); }
bad() { echo "FAIL - $*"; FAIL=$((FAIL + 1)); }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
MTU=${SOFTROCE_MTU:-1500}

"$DOCTOR" > "$OUT/text" 2>&1; rc=$?
cat "$OUT/text"
check "text: exit status 0 (no errors)" [ "$rc" = 0 ]
check "text: kernel IPsec ready (the VM loads XFRM, ESP, GCM and the RNG)" \
  grep -q "^\[ OK  \] ipsec    kernel IPsec for encrypted RoCE" "$OUT/text"
check "text: va has no DCB (a warning)" grep -Eq "^\[WARN \] dcb      (va has no DCB|PFC, ETS and DSCP trust of va not checked|dcb pfc show dev va failed)" "$OUT/text"
for d in rxe0 rxe1; do
  check "text: $d is Soft-RoCE" grep -q "^\[INFO \] device   $d is Soft-RoCE (rdma_rxe): a software RoCE v2 device" "$OUT/text"
  check "text: $d port 1 ACTIVE" grep -q "^\[ OK  \] port     port 1 of $d is ACTIVE" "$OUT/text"
done
check "text: RoCE v2 GID for 10.77.0.1 on rxe0" \
  grep -q "^\[ OK  \] gid      RoCE v2 GID for 10.77.0.1 (va) on rxe0/1: index $SOFTROCE_GID_INDEX_RXE0 " "$OUT/text"
check "text: RoCE v2 GID for 10.77.0.2 on rxe1" \
  grep -q "^\[ OK  \] gid      RoCE v2 GID for 10.77.0.2 (vb) on rxe1/1: index $SOFTROCE_GID_INDEX_RXE1 " "$OUT/text"
if [ "$MTU" = 1500 ]; then
  check "text: active_mtu 1024 vs netdev MTU 1500 (va)" \
    grep -q "^\[WARN \] mtu      active_mtu 1024 on rxe0/1: limited by netdev va MTU 1500" "$OUT/text"
  check "text: ... with the fix" grep -q "fix: for active_mtu 4096 raise the netdev MTU .*ip link set va mtu 4200" "$OUT/text"
fi

"$DOCTOR" --json > "$OUT/json" 2>"$OUT/err"; rc=$?
check "json: exit status 0" [ "$rc" = 0 ]
if $PY - "$OUT/json" "$MTU" "$SOFTROCE_GID_INDEX_RXE0" "$SOFTROCE_GID_INDEX_RXE1" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1])); mtu = int(sys.argv[2]); gi = {"rxe0": int(sys.argv[3]), "rxe1": int(sys.argv[4])}
f = d["findings"]
def one(**kw):
    m = [x for x in f if all((x.get(k) if k in ("check", "subject", "severity") else x["details"].get(k)) == v for k, v in kw.items())]
    assert len(m) == 1, (kw, m)
    return m[0]
assert one(check="devices")["details"]["devices"] == 2
for dev, ndev, ip in (("rxe0", "va", "10.77.0.1"), ("rxe1", "vb", "10.77.0.2")):
    x = one(check="device", subject=dev)
    assert x["details"]["software"] is True and x["details"]["kind"] == "soft-roce", x
    assert x["details"]["parent"] == ndev, x
    g = one(check="gid", subject=ip)
    assert g["severity"] == "ok" and g["details"]["gid_index"] == gi[dev] and g["details"]["device"] == dev, g
    m = one(check="mtu", subject=dev + "/1")
    assert m["details"]["netdev_mtu"] == mtu, m
    if mtu == 1500:
        assert m["severity"] == "warn" and m["details"]["active_mtu"] == 1024, m
        assert "ip link set %s mtu 4200" % ndev in m["fix"], m
    elif mtu >= 4192:
        assert m["severity"] == "ok" and m["details"]["active_mtu"] == 4096, m
    e = one(check="ecn", subject=ndev)
    assert "not exposed by this driver" in e["message"], e
    # veth has no DCB: a warning that says so (not an error), and no PFC/ETS/trust findings.
    b = one(check="dcb", subject=ndev)
    assert b["severity"] == "warn" and b["details"]["dcb"] in ("not supported", "not installed", "failed"), b
    assert not [x for x in f if x["check"] in ("pfc", "ets", "trust") and x["subject"] == ndev], f
c = one(check="classes")
assert c["details"] == {"control": 48, "low_latency": 46, "bulk": 10, "background": 8}, c
assert d["summary"]["error"] == 0 and d["summary"]["exit_code"] == 0, d["summary"]
PYEOF
then ok "json: 2 Soft-RoCE devices, their RoCE v2 GID indexes, the MTU finding, ECN not exposed, no DCB on veth (warn), the class map"
else bad "json: content (see the assertion above)"; fi

# A port whose netdev is down.
ip link set va down
for _ in $(seq 50); do grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state || break; sleep 0.1; done
"$DOCTOR" > "$OUT/down" 2>&1; rc=$?
grep -A1 "rxe0 is" "$OUT/down" | grep -v "^\[INFO"
check "netdev down: exit status 1" [ "$rc" = 1 ]
check "netdev down: port error with 'ip link set va up'" \
  grep -Eq "^\[ERROR\] port +port 1 of rxe0 is (DOWN|INIT)" "$OUT/down"
check "netdev down: ... and the fix" grep -q "fix: bring the netdev up and check its carrier: ip link set va up" "$OUT/down"
ip link set va up
for _ in $(seq 50); do grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state && break; sleep 0.1; done

# No device at all (the module is loaded: the fix is just the two commands).
rdma link delete rxe0; rdma link delete rxe1
for _ in $(seq 50); do [ -z "$(ls /sys/class/infiniband 2>/dev/null)" ] && break; sleep 0.1; done
"$DOCTOR" > "$OUT/none" 2>&1; rc=$?
cat "$OUT/none"
check "no device: exit status 1" [ "$rc" = 1 ]
check "no device: says so" grep -q "^\[ERROR\] devices  no RDMA device found" "$OUT/none"
check "no device: fix creates rxe0 on a netdev with an address" \
  grep -Eq "fix: create a Soft-RoCE device: modprobe rdma_rxe && rdma link add rxe0 type rxe netdev (va|vb) " "$OUT/none"
check "no device: no 'missing module' note (rdma_rxe is loaded)" bash -c "! grep -q 'Note:' '$OUT/none'"

echo "$PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
