#!/bin/bash
# tests/softroce/pick-accel.sh CACHE_DIR QEMU
#
# Chooses qemu's accelerator for the Soft-RoCE VM and prints it on stdout: "kvm" or "tcg".
# One line on stderr says which and why. KVM is chosen only when a probe guest (the cached
# kernel and initramfs, booted with "softroce_probe" so that init prints a marker and powers
# off at once) really boots under it within SOFTROCE_KVM_PROBE_TIMEOUT seconds: a writable
# /dev/kvm is not enough, since some hosts expose one on which qemu aborts ("failed to set
# MSR ...") or the guest hangs in early boot.
#
# The verdict is kept in CACHE_DIR for this host boot, this qemu binary and these guest
# assets, so only the first VM of a test run pays for the probe.
#
# Knobs: SOFTROCE_ACCEL=kvm|tcg       no probe, use that (kvm still needs a writable /dev/kvm)
#        SOFTROCE_KVM_PROBE_TIMEOUT   seconds (default 20)
#        SOFTROCE_KVM_DEV             the device to check (default /dev/kvm; for the harness test)
# Exit status: 0 (a choice was printed); 2 bad arguments or knobs.
set -uo pipefail
[ $# = 2 ] || { echo "usage: $0 CACHE_DIR QEMU" >&2; exit 2; }
CACHE=$1 QEMU=$2
KVM=${SOFTROCE_KVM_DEV:-/dev/kvm}
PTMO=${SOFTROCE_KVM_PROBE_TIMEOUT:-20}
[[ $PTMO =~ ^[1-9][0-9]*$ ]] || { echo "pick-accel: SOFTROCE_KVM_PROBE_TIMEOUT must be a positive integer, not '$PTMO'" >&2; exit 2; }
say() { echo "softroce: accelerator $1: $2" >&2; echo "$1"; exit 0; }

case ${SOFTROCE_ACCEL:-} in
  '') ;;
  tcg) say tcg "SOFTROCE_ACCEL=tcg" ;;
  kvm) [ -w "$KVM" ] || { echo "pick-accel: SOFTROCE_ACCEL=kvm but $KVM is not writable by $(id -un)" >&2; exit 2; }
       say kvm "SOFTROCE_ACCEL=kvm (not probed)" ;;
  *) echo "pick-accel: SOFTROCE_ACCEL must be tcg or kvm, not '$SOFTROCE_ACCEL'" >&2; exit 2 ;;
esac
[ -e "$KVM" ] || say tcg "no $KVM on this host (emulation is 7-20x slower than KVM)"
[ -w "$KVM" ] || say tcg "$KVM is not writable by $(id -un) (add the user to group kvm for speed)"

# One verdict per host boot, qemu binary and guest assets.
KEY=$({ cat /proc/sys/kernel/random/boot_id 2>/dev/null; stat -Lc '%n %s %Y' "$QEMU" "$KVM";
        cat "$CACHE/stamp" 2>/dev/null; } | sha256sum | cut -c1-16)
VERDICT=$CACHE/accel-$KEY
if [ -s "$VERDICT" ]; then
  read -r A WHY < "$VERDICT"
  say "$A" "$WHY (probed earlier this boot)"
fi

P=$(mktemp -d "${TMPDIR:-/tmp}/softroce-probe.XXXXXX") || { echo "pick-accel: mktemp failed" >&2; exit 2; }
trap 'rm -rf "$P"' EXIT
T0=$(date +%s%N)
( timeout -k 2 "$PTMO" "$QEMU" -nodefaults -no-user-config -display none -no-reboot \
  -machine q35 -accel kvm -cpu host -m 256 -smp 1 \
  -kernel "$CACHE/vmlinuz" -initrd "$CACHE/initramfs.gz" \
  -append "console=ttyS0 panic=-1 quiet loglevel=3 rdinit=/init softroce_probe" \
  -serial "file:${P//,/,,}/console.log" -monitor none -nic none > "$P/qemu.log" 2>&1; exit $? ) 2>/dev/null   # no "Aborted" from bash
QRC=$?
MS=$(( ($(date +%s%N) - T0) / 1000000 ))
if grep -q 'softroce: probe guest booted' "$P/console.log" 2>/dev/null; then
  A=kvm WHY="a probe guest booted under KVM in $MS ms"
elif [ $QRC = 124 ] || [ $QRC = 137 ]; then
  A=tcg WHY="$KVM exists but a probe guest did not boot under KVM within ${PTMO}s (nested virtualisation not working?)"
else
  A=tcg WHY="$KVM exists but qemu failed under KVM (exit $QRC: $(grep -m1 -v '^\s*$' "$P/qemu.log" | cut -c1-160))"
fi
echo "$A $WHY" > "$VERDICT.tmp" 2>/dev/null && mv "$VERDICT.tmp" "$VERDICT"
say "$A" "$WHY"
