#!/bin/bash
# tests/softroce/prepare.sh [CACHE_DIR]
#
# Builds (once) the guest assets that run-in-vm.sh boots, into CACHE_DIR
# (default: $SOFTROCE_CACHE, else ${XDG_CACHE_HOME:-$HOME/.cache}/roce-rpc/softroce):
#   linux-image-*.deb  Debian's own kernel package, fetched with `apt-get download`
#                      (or the file(s) named by SOFTROCE_KERNEL_DEB)
#   vmlinuz            the kernel image from that package
#   initramfs.gz       a static busybox, the kernel modules the VM needs (virtio/9p, the
#                      rdma_rxe stack, veth, af_packet) and ./init as PID 1
#   kver, stamp        kernel version; hash of the inputs (a changed init or prepare.sh rebuilds)
# The guest root file system is not in the initramfs: run-in-vm.sh exports the host's "/" to it.
# Running this by hand is a way to warm the cache (e.g. in a CI setup step).
#
# Exit status: 0 ready; 77 this host cannot build a VM (the one-line reason, "skipped: ...",
# goes to stdout); anything else is a failure.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
IPSEC_MODULES="xfrm_user esp4 authenc echainiv seqiv ctr gcm ghash_generic drbg jitterentropy_rng sch_netem sch_prio cls_u32"
CACHE=${1:-${SOFTROCE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/roce-rpc/softroce}}
skip() { echo "skipped: $*"; exit 77; }
note() { echo "softroce-prepare: $*" >&2; }

[ "$(uname -s)/$(uname -m)" = Linux/x86_64 ] || skip "Soft-RoCE VM needs a Linux x86-64 host (this is $(uname -s)/$(uname -m))"
mkdir -p "$CACHE" || { note "cannot create cache dir $CACHE"; exit 1; }
CACHE=$(cd "$CACHE" && pwd -P)
exec 9>"$CACHE/.lock"
flock 9                       # several first runs at once build only once

# Inputs of the initramfs; the kernel .deb already in the cache is reused (delete the cache to
# pick up a newer linux-image-amd64).
find_deb() { ls "$CACHE"/linux-image-*_amd64.deb 2>/dev/null | grep -v -- '-dbg_' | sort -V | tail -1 || true; }
inputs_hash() {
  { sha256sum "$HERE/init" "$HERE/prepare.sh" | cut -d' ' -f1; echo "${SOFTROCE_KERNEL_DEB:-$(basename "$(find_deb)")}"; } |
    sha256sum | cut -d' ' -f1
}
if [ -s "$CACHE/vmlinuz" ] && [ -s "$CACHE/initramfs.gz" ] && [ -s "$CACHE/kver" ] &&
   [ "$(cat "$CACHE/stamp" 2>/dev/null)" = "$(inputs_hash)" ]; then
  exit 0
fi

for c in dpkg-deb cpio gzip depmod modprobe sha256sum; do
  command -v "$c" >/dev/null || skip "Soft-RoCE VM: host command '$c' is missing (run tests/softroce/install-deps.sh)"
done
BUSYBOX=/bin/busybox
if [ ! -x "$BUSYBOX" ] || ldd "$BUSYBOX" >/dev/null 2>&1; then
  skip "Soft-RoCE VM: no static /bin/busybox (install busybox-static)"
fi

# 1. the kernel package
if [ -n "${SOFTROCE_KERNEL_DEB:-}" ]; then
  DEBS=$SOFTROCE_KERNEL_DEB
  for d in $DEBS; do [ -r "$d" ] || { note "SOFTROCE_KERNEL_DEB: cannot read $d"; exit 2; }; done
else
  DEBS=$(find_deb)
  if [ -z "$DEBS" ]; then
    command -v apt-get >/dev/null || skip "Soft-RoCE VM: no apt-get to download the Debian kernel (set SOFTROCE_KERNEL_DEB)"
    PKG=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
    [ -n "$PKG" ] || skip "Soft-RoCE VM: apt cannot resolve linux-image-amd64 (not Debian, or run apt-get update)"
    note "downloading $PKG (about 70 MB)"
    # as root apt drops to the _apt user, which may not write to $CACHE
    SANDBOX=(); [ "$(id -u)" = 0 ] && SANDBOX=(-o APT::Sandbox::User=root)
    (cd "$CACHE" && apt-get -q "${SANDBOX[@]}" download "$PKG" >&2) ||
      skip "Soft-RoCE VM: cannot download kernel package $PKG with apt-get"
    DEBS=$(find_deb)
    [ -n "$DEBS" ] || skip "Soft-RoCE VM: kernel package $PKG not found after download"
  fi
fi
KX=$(mktemp -d "$CACHE/kernel-x.XXXXXX")
ST=$(mktemp -d "$CACHE/initramfs-x.XXXXXX")
trap 'rm -rf "$KX" "$ST"' EXIT
for d in $DEBS; do dpkg-deb -x "$d" "$KX"; done
KVER=$(ls "$KX/lib/modules" | head -1)
[ -n "$KVER" ] && [ -s "$KX/boot/vmlinuz-$KVER" ] || { note "no kernel image/modules in $DEBS"; exit 1; }
depmod -b "$KX" "$KVER"

# 2. the initramfs
mkdir -p "$ST"/{bin,proc,sys,dev,run,newroot,ctl,lib/modules}
ln -s bin "$ST/sbin"; mkdir -p "$ST/usr"; ln -s ../bin "$ST/usr/bin"; ln -s ../bin "$ST/usr/sbin"
cp "$BUSYBOX" "$ST/bin/busybox"
for a in $("$BUSYBOX" --list); do [ -e "$ST/bin/$a" ] || ln -s busybox "$ST/bin/$a"; done
copy_mod() {   # copy a module and its dependencies (nothing for built-ins)
  local out
  out=$(modprobe -d "$KX" -S "$KVER" --show-depends "$1" 2>/dev/null) || return 1
  awk '$1=="insmod"{print $2}' <<<"$out" | while read -r ko; do
    rel=${ko#"$KX"}; mkdir -p "$ST$(dirname "$rel")"; cp "$ko" "$ST$rel"
  done
}
for m in virtio_pci 9pnet_virtio 9p rdma_rxe rdma_ucm ib_uverbs rdma_cm ib_umad veth; do
  copy_mod "$m" || { note "kernel $KVER has no module $m"; exit 1; }
done
for m in crc32_generic crc32-pclmul af_packet; do copy_mod "$m" || true; done   # optional
# Kernel IPsec for the encrypted-RoCE tests (../shared notes: ESP with AES-GCM needs these, and
# xfrm states need the default RNG: drbg + jitterentropy_rng); optional, a test skips without them.
for m in $IPSEC_MODULES; do copy_mod "$m" || true; done
cp "$KX/lib/modules/$KVER/modules.builtin" "$KX/lib/modules/$KVER/modules.order" "$ST/lib/modules/$KVER/"
[ -e "$KX/lib/modules/$KVER/modules.builtin.modinfo" ] && cp "$KX/lib/modules/$KVER/modules.builtin.modinfo" "$ST/lib/modules/$KVER/"
depmod -b "$ST" "$KVER"
install -m 755 "$HERE/init" "$ST/init"
(cd "$ST" && find . | cpio -o -H newc --quiet | gzip -1) > "$CACHE/initramfs.gz.tmp"
cp "$KX/boot/vmlinuz-$KVER" "$CACHE/vmlinuz.tmp"
mv "$CACHE/vmlinuz.tmp" "$CACHE/vmlinuz"
mv "$CACHE/initramfs.gz.tmp" "$CACHE/initramfs.gz"
echo "$KVER" > "$CACHE/kver"
inputs_hash > "$CACHE/stamp"
note "kernel $KVER, initramfs $(du -h "$CACHE/initramfs.gz" | cut -f1), in $CACHE"
