#!/bin/bash
# tests/softroce/run-in-vm.sh HOST_DIR COMMAND [ARGS...]
#
# Boots Debian's kernel under qemu-system-x86_64 (TCG emulation; KVM when /dev/kvm is usable),
# brings up two Soft-RoCE (rdma_rxe) devices joined by a veth pair, and runs COMMAND as root
# with HOST_DIR as its working directory. COMMAND's stdout and stderr are streamed, merged, to
# this script's stdout. See tests/softroce/README.md.
#
# In the VM:  /         = this host's "/", read-only (host-installed tools and libraries work)
#             HOST_DIR  = HOST_DIR, read-write, at the same absolute path
#             /tmp /run /var/tmp /root /var/log are empty tmpfs (host files there are NOT visible)
#             rxe0 on va 10.77.0.1/24 <-veth-> rxe1 on vb 10.77.0.2/24; no link to the outside
#             env: SOFTROCE_IN_VM=1 SOFTROCE_SHARE SOFTROCE_MTU SOFTROCE_DEV0/1 SOFTROCE_NETDEV0/1
#                  SOFTROCE_IP0/1 SOFTROCE_GID_INDEX SOFTROCE_GID_INDEX_RXE0/RXE1
#
# Knobs (environment):
#   SOFTROCE_TIMEOUT    limit for the whole VM run in seconds, boot included (default 600)
#   SOFTROCE_MEM        guest RAM, MiB (default 1024)
#   SOFTROCE_SMP        guest CPUs (default 2; 1 makes busy-polling peers very slow)
#   SOFTROCE_MTU        netdev MTU of va/vb (default 1500 -> RoCE active_mtu 1024; 9000 -> 4096)
#   SOFTROCE_RAILS      1 (default) or 2: 2 adds a second veth pair vc/vd (10.78.0.1/.2) with rxe2/rxe3
#   SOFTROCE_CACHE      kernel + initramfs cache (default ${XDG_CACHE_HOME:-~/.cache}/roce-rpc/softroce)
#   SOFTROCE_ENV        shell lines sourced in the VM before COMMAND, e.g. "export FOO=1"
#   SOFTROCE_PASS_VARS  names of host variables to copy into the VM, e.g. "CC CFLAGS"
#   SOFTROCE_ACCEL      tcg | kvm (default: kvm if a probe guest boots under it, else tcg;
#                       see pick-accel.sh, which prints the choice and why on stderr)
#   SOFTROCE_KERNEL_DEB kernel .deb file(s) to use instead of `apt-get download linux-image-amd64`
#   SOFTROCE_VERBOSE=1  also print the guest console, the setup log and timings to stderr
#
# Exit status: COMMAND's own; 124 the run timed out; 125 harness/VM failure;
#              77 no VM can be made on this host -- then stdout's only line is "skipped: <reason>".
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ME=run-in-vm
if [ $# -lt 2 ]; then
  sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 125
fi
fail() { echo "$ME: $*" >&2; exit 125; }
skip() { echo "skipped: $*"; exit 77; }

SHARE=$(cd "$1" 2>/dev/null && pwd -P) || fail "HOST_DIR is not a directory: $1"
[ "$SHARE" = / ] && fail "HOST_DIR must not be /"
shift
TMO=${SOFTROCE_TIMEOUT:-600}
MEM=${SOFTROCE_MEM:-1024}
SMP=${SOFTROCE_SMP:-2}
MTU=${SOFTROCE_MTU:-1500}
RAILS=${SOFTROCE_RAILS:-1}
[[ $RAILS =~ ^[12]$ ]] || fail "SOFTROCE_RAILS must be 1 or 2, not '$RAILS'"
for v in TMO MEM SMP MTU; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || fail "not a positive integer: ${v/TMO/SOFTROCE_TIMEOUT}=${!v}"
done
CACHE=${SOFTROCE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/roce-rpc/softroce}

# Can this host make the VM at all? If not: 77 and one line on stdout.
[ "$(uname -s)/$(uname -m)" = Linux/x86_64 ] ||
  skip "Soft-RoCE VM needs a Linux x86-64 host (this is $(uname -s)/$(uname -m))"
QEMU=$(command -v qemu-system-x86_64) ||
  skip "Soft-RoCE VM: qemu-system-x86_64 not found (install qemu-system-x86; see tests/softroce/install-deps.sh)"
# The VM runs the host's own RDMA userland, so it needs it too.
PATH=$PATH:/usr/sbin:/sbin command -v rdma >/dev/null ||
  skip "Soft-RoCE VM: no 'rdma' tool on the host (install iproute2)"
compgen -G '/usr/lib*/libibverbs/librxe-rdmav*.so' >/dev/null ||
  compgen -G '/usr/lib*/*/libibverbs/librxe-rdmav*.so' >/dev/null ||
  skip "Soft-RoCE VM: no rxe verbs provider on the host (install ibverbs-providers)"

# Guest assets (first run: downloads the kernel .deb, ~70 MB, and builds the initramfs).
OUT=$("$HERE/prepare.sh" "$CACHE"); PRC=$?
if [ $PRC = 77 ]; then echo "$OUT" | tail -1; exit 77; fi
[ $PRC = 0 ] || fail "building the guest kernel/initramfs in $CACHE failed (prepare.sh exit $PRC)"
CACHE=$(cd "$CACHE" && pwd -P)

# KVM only where a probe guest really boots under it (pick-accel.sh says which, and why).
ACCEL=$("$HERE/pick-accel.sh" "$CACHE" "$QEMU") || fail "choosing the accelerator failed"
case $ACCEL in kvm) CPU=host ;; tcg) CPU=max ;; *) fail "pick-accel.sh printed '$ACCEL'" ;; esac

CTL=$(mktemp -d "${TMPDIR:-/tmp}/softroce-ctl.XXXXXX") || fail "mktemp failed"
QPID='' TPID=''
cleanup() {
  [ -n "$QPID" ] && kill "$QPID" 2>/dev/null && wait "$QPID" 2>/dev/null
  [ -n "$TPID" ] && kill "$TPID" 2>/dev/null
  rm -rf "$CTL"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

sq() { local s=${1//\'/\'\\\'\'}; printf "'%s'" "$s"; }   # quoting that busybox sh reads too
echo "SOFTROCE_SHARE=$(sq "$SHARE")" > "$CTL/boot.env"
{ printf 'SOFTROCE_SHARE=%q\n' "$SHARE"; echo "SOFTROCE_MTU=$MTU"; echo "SOFTROCE_RAILS=$RAILS"; } > "$CTL/setup.env"
{
  for n in ${SOFTROCE_PASS_VARS:-}; do
    [[ $n =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || fail "SOFTROCE_PASS_VARS: bad name '$n'"
    [ -n "${!n+set}" ] && printf 'export %s=%q\n' "$n" "${!n}"
  done
  printf '%s\n' "${SOFTROCE_ENV:-}"
} > "$CTL/user.env"
{ printf 'exec'; printf ' %q' "$@"; printf '\n'; } > "$CTL/cmd.sh"
cp "$HERE/guest-setup.sh" "$CTL/guest-setup.sh"
: > "$CTL/out"

esc() { printf '%s' "${1//,/,,}"; }   # in a qemu option value, a comma is written ",,"
T0=$(date +%s%N)
timeout -k 5 "$TMO" "$QEMU" \
  -nodefaults -no-user-config -display none -no-reboot \
  -machine q35 -accel "$ACCEL" -cpu "$CPU" -m "$MEM" -smp "$SMP" \
  -kernel "$CACHE/vmlinuz" -initrd "$CACHE/initramfs.gz" \
  -append "console=ttyS0 panic=-1 quiet loglevel=3 rdinit=/init${SOFTROCE_KERNEL_ARGS:+ $SOFTROCE_KERNEL_ARGS}" \
  -serial "file:$(esc "$CTL")/console.log" -monitor none -nic none \
  -fsdev "local,id=fsroot,path=/,security_model=none,readonly=on,multidevs=remap" \
  -device virtio-9p-pci,fsdev=fsroot,mount_tag=hostroot \
  -fsdev "local,id=fsshare,path=$(esc "$SHARE"),security_model=none,multidevs=remap" \
  -device virtio-9p-pci,fsdev=fsshare,mount_tag=share \
  -fsdev "local,id=fsctl,path=$(esc "$CTL"),security_model=none" \
  -device virtio-9p-pci,fsdev=fsctl,mount_tag=ctl \
  > "$CTL/qemu.log" 2>&1 &
QPID=$!
tail -n +1 -f --pid=$QPID "$CTL/out" 2>/dev/null &
TPID=$!
wait $QPID; QRC=$?; QPID=
wait $TPID 2>/dev/null; TPID=
T1=$(date +%s%N)

diag() {   # $1 = how many console lines
  echo "---- qemu ----" >&2; cat "$CTL/qemu.log" >&2
  echo "---- guest setup log ----" >&2; cat "$CTL/setup.log" >&2 2>/dev/null
  echo "---- guest console ----" >&2; tail -n "$1" "$CTL/console.log" >&2 2>/dev/null
}
if [ "${SOFTROCE_VERBOSE:-0}" = 1 ]; then
  diag 100000
  echo "---- $ME: VM run took $(( (T1 - T0) / 1000000 )) ms ($ACCEL, kernel $(cat "$CACHE/kver")) ----" >&2
fi
RC=$(cat "$CTL/rc" 2>/dev/null)
if [[ $RC =~ ^[0-9]+$ ]]; then
  if [ -e "$CTL/fatal" ]; then
    echo "$ME: VM setup failed: $(cat "$CTL/fatal")" >&2
    [ "${SOFTROCE_VERBOSE:-0}" = 1 ] || diag 40
  fi
  exit "$RC"
fi
if [ "$QRC" = 124 ] || [ "$QRC" = 137 ]; then
  echo "$ME: timed out after ${TMO}s (SOFTROCE_TIMEOUT)" >&2; RC=124
else
  echo "$ME: the VM ended without an exit status (qemu exit $QRC)" >&2; RC=125
fi
[ "${SOFTROCE_VERBOSE:-0}" = 1 ] || diag 40
exit $RC
