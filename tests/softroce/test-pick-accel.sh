#!/bin/bash
# tests/softroce/test-pick-accel.sh: pick-accel.sh chooses KVM only when a guest boots under it.
#
# A host whose /dev/kvm is broken cannot be had on demand, so a stand-in qemu plays the three
# behaviours seen on real hosts: it aborts (the MSR assertion), hangs in early boot, or boots
# and prints init's probe marker on the serial console. A stand-in device file plays /dev/kvm.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
T=$(mktemp -d "${TMPDIR:-/tmp}/pick-accel-test.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
PASS=0 FAIL=0
check() {   # NAME EXPECTED_ACCEL EXPECTED_WORDS_IN_REASON
  local name=$1 want=$2 words=$3 got why
  got=$("$HERE/pick-accel.sh" "$T/cache" "$T/qemu" 2>"$T/err"); why=$(cat "$T/err")
  if [ "$got" = "$want" ] && grep -q -- "$words" <<<"$why"; then
    PASS=$((PASS + 1)); echo "ok   - $name: $got ($why)"
  else
    FAIL=$((FAIL + 1)); echo "FAIL - $name: got '$got' ($why), want $want and '$words'"
  fi
}
mkdir -p "$T/cache"; : > "$T/cache/vmlinuz"; : > "$T/cache/initramfs.gz"
echo one > "$T/cache/stamp"
cat > "$T/qemu" <<'EOF'
#!/bin/bash
# stand-in qemu: behaviour from $T/mode; the console file from "-serial file:PATH"
while [ $# -gt 0 ]; do [ "$1" = -serial ] && CON=${2#file:}; shift; done
case $(cat "$(dirname "$0")/mode") in
  abort) echo "qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69" >&2; kill -ABRT $$ ;;
  hang)  echo "Probing EDD (edd=off to disable)... ok" > "$CON"; exec sleep 60 ;;
  boot)  echo "softroce: probe guest booted" > "$CON"; exit 0 ;;
esac
EOF
chmod +x "$T/qemu"
export SOFTROCE_KVM_PROBE_TIMEOUT=2
unset SOFTROCE_ACCEL

SOFTROCE_KVM_DEV=$T/no-such-kvm check "no /dev/kvm" tcg "no $T/no-such-kvm"
export SOFTROCE_KVM_DEV=$T/kvm
: > "$T/kvm"
echo abort > "$T/mode"; check "qemu aborts under KVM" tcg "failed to set MSR"
echo two > "$T/cache/stamp"   # new guest assets: probe again
echo hang > "$T/mode";  check "the guest hangs under KVM" tcg "did not boot under KVM within 2s"
echo three > "$T/cache/stamp"
echo boot > "$T/mode";  check "the guest boots under KVM" kvm "booted under KVM"
echo abort > "$T/mode"; check "the verdict is kept for this boot" kvm "probed earlier this boot"
SOFTROCE_ACCEL=tcg check "SOFTROCE_ACCEL=tcg wins" tcg "SOFTROCE_ACCEL=tcg"
if [ "$(id -u)" != 0 ]; then
  chmod 0444 "$T/kvm"; check "an unwritable /dev/kvm" tcg "not writable"
fi
echo "$PASS passed, $FAIL failed"
[ $FAIL = 0 ]
