#!/bin/bash
# scripts/bootstrap.sh demo|test
#   demo: install what is missing, build, run an rrpc-demo server and client
#         (verbs where an RDMA device exists, otherwise tcp; it says which)
#   test: install what is missing, build, run every test: unit + conformance
#         on tcp, the same under ASan/UBSan, then in the Soft-RoCE VM the
#         conformance suite over verbs and a packet capture that checks each
#         class's DSCP on the wire (reported as skipped where no VM can run)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
WHAT=${1:-}
case "$WHAT" in demo|test) ;; *) echo "usage: $0 demo|test" >&2; exit 2 ;; esac

PKGS="meson ninja-build pkg-config gcc scdoc man-db libev-dev libmsgpack-dev libssl-dev openssl libcmocka-dev libmicrohttpd-dev
      libcurl4-openssl-dev libjson-c-dev libinih-dev libsystemd-dev libnl-xfrm-3-dev etcd-server
      libibverbs-dev librdmacm-dev ibverbs-providers rdma-core
      python3 python3-dev python3-cffi python3-numpy python3-pytest python3-pytest-asyncio python3-mesonpy python3-venv python3-pip patchelf
      python3-msgpack mypy
      iperf3 sockperf qperf ucx-utils python3-matplotlib"  # the last line: the bench's peers and plots
# The test run also uses torch, where the Python suite checks DLPack with real torch tensors,
# Prometheus' own tools, which read the metrics text, and tshark, which reads captures
# through the project's Wireshark dissector.
[ "$WHAT" = test ] && PKGS="$PKGS python3-torch prometheus python3-prometheus-client tshark"
missing=$(for p in $PKGS; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || echo "$p"; done)
if [ -n "$missing" ]; then
  echo "bootstrap: installing:" $missing
  SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing
fi

# The test run builds (and so tests) the HTTP /metrics endpoint: a missing
# libmicrohttpd is an error there, not a feature quietly left out.
MESON_OPTS=; [ "$WHAT" = test ] && MESON_OPTS="-Dmetrics_http=enabled"
[ -d build ] || meson setup build $MESON_OPTS
[ -z "$MESON_OPTS" ] || meson configure build $MESON_OPTS
ninja -C build

if [ "$WHAT" = demo ]; then
  exec examples/run-demo.sh build auto
fi

PASSED=0 FAILED=0 SKIPPED=0
# Runs meson test and adds its counts to the totals.
meson_suites() {
  local log
  log=$(mktemp)
  set +e
  meson test "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  set -e
  PASSED=$((PASSED + $(awk '/^Ok:/{n=$2} END{print n+0}' "$log")))
  FAILED=$((FAILED + $(awk '/^Fail:/{n=$2} END{print n+0}' "$log") + $(awk '/^Timeout:/{n=$2} END{print n+0}' "$log")))
  SKIPPED=$((SKIPPED + $(awk '/^Skipped:/{n=$2} END{print n+0}' "$log")))
  rm -f "$log"
  if [ "$rc" != 0 ]; then
    echo "summary: $PASSED passed, $FAILED failed, $SKIPPED skipped"
    exit "$rc"
  fi
}

echo "== unit, broker, tensor, conformance, reliability, example and Python suites (tcp) =="
meson_suites -C build --no-suite soak --print-errorlogs
echo "== soak: many connections, mixed classes, exactly-once answers, flat memory (90 s) =="
meson_suites -C build --suite soak --print-errorlogs
echo "== the same under AddressSanitizer + UndefinedBehaviorSanitizer =="
[ -d build-asan ] || meson setup build-asan -Db_sanitize=address,undefined -Db_lundef=false $MESON_OPTS
ninja -C build-asan
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  meson_suites -C build-asan --no-suite soak --print-errorlogs
echo "== fuzzing: frame decoder, msgpack, broker protocol, tcp receive path, core dispatch, one-sided target, tickets, agent messages (clang libFuzzer, 30 s each) =="
set +e
tests/fuzz/run-fuzz.sh build 30
rc=$?
set -e
if [ $rc = 0 ]; then PASSED=$((PASSED + 1)); else FAILED=$((FAILED + 1));
  echo "summary: $PASSED passed, $FAILED failed, $SKIPPED skipped"; exit $rc; fi
tests/softroce/install-deps.sh
# In the VM: exit 77 means no VM can be made here (the reason is printed).
# A failed step does not stop the later ones (each says what it found); the
# run fails at the end, naming every failed step.
VM_FAILED=() VM_RC=0
vm_step() {
  local what=$1; shift
  echo "== $what (RoCEv2 over Soft-RoCE in a VM) =="
  set +e
  "$@"
  local rc=$?
  set -e
  if [ $rc = 77 ]; then
    echo "bootstrap: $what was SKIPPED (see the reason above)"
    SKIPPED=$((SKIPPED + 1))
  elif [ $rc != 0 ]; then
    echo "bootstrap: $what FAILED (exit $rc); going on with the next step" >&2
    FAILED=$((FAILED + 1))
    VM_FAILED+=("$what (exit $rc)")
    [ "$VM_RC" != 0 ] || VM_RC=$rc
  else
    PASSED=$((PASSED + 1))
  fi
}
vm_step "conformance over verbs" tests/softroce/run-suite.sh build
vm_step "conformance over verbs, both contexts driven through their fds" \
  env RRPC_TEST_MODE=driven tests/softroce/run-suite.sh build
vm_step "tensors and KV pages over verbs" tests/softroce/run-suite.sh build tests/xfer/test_tensor
vm_step "keepalives and kill -9 fault tests over verbs" \
  tests/softroce/run-suite.sh build tests/reliability/reliability
vm_step "the verbs pools: registered receive buffers reused, send buffers shared by connections" \
  tests/softroce/run-suite.sh build tests/unit/test_verbs_pools
vm_step "verbs queue pairs connected on a class's first use, from either side, refused to strangers" \
  tests/softroce/run-suite.sh build tests/unit/test_verbs_classes
vm_step "an idle verbs context with its default polling sleeps" \
  tests/softroce/run-suite.sh build tests/reliability/busy_poll
vm_step "conformance over verbs under AddressSanitizer + UndefinedBehaviorSanitizer" \
  tests/softroce/run-suite.sh build-asan
vm_step "Python bindings and the Python example over verbs" tests/softroce/python-in-vm.sh build
vm_step "DSCP of every class on the wire; NIC counters in the metrics, no RNR NAK" tests/softroce/dscp-capture.sh build
vm_step "RoCEv2 and tcp under ESP between two hosts (rrpc-xfrm, AES-GCM)" tests/softroce/ipsec.sh build
vm_step "the Wireshark dissector decodes that RoCEv2 capture" \
  tests/wireshark/dissector_test.py --roce build/dscp-capture/capture.pcap
vm_step "rrpc-doctor finds the Soft-RoCE devices" tools/doctor/test-in-vm.sh build
vm_step "an rxe link taken down and up under a live connection" tests/softroce/link-flap.sh build
vm_step "two rails per side (SOFTROCE_RAILS=2): each rail's rxe counters move with its own traffic" \
  tests/softroce/rails-smoke.sh
vm_step "the main job (rrpcd, server, client, tensor) over verbs" \
  tests/softroce/run-in-vm.sh "$PWD" bash -c \
  'ulimit -l unlimited && RRPC_DEMO_HOST=10.77.0.2 examples/run-demo.sh build verbs'
echo "(meson suites count one each, and each VM step counts one)"
for f in "${VM_FAILED[@]}"; do echo "bootstrap: FAILED: $f" >&2; done
echo "summary: $PASSED passed, $FAILED failed, $SKIPPED skipped"
exit "$VM_RC"
