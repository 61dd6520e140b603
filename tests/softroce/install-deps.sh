#!/bin/bash
# tests/softroce/install-deps.sh -- installs the host packages the Soft-RoCE test VM needs
# (Debian/Ubuntu, apt-get). Idempotent: prints nothing and exits 0 when all are installed.
# Not root and something missing: prints the command to run and exits 1.
# It does not fetch the guest kernel; the first run-in-vm.sh does (or run prepare.sh).
set -euo pipefail
PKGS=(qemu-system-x86 busybox-static cpio kmod ibverbs-providers ibverbs-utils rdmacm-utils
      rdma-core perftest libibverbs-dev librdmacm-dev iproute2 tcpdump)
me=install-deps

command -v dpkg-query >/dev/null && command -v apt-get >/dev/null ||
  { echo "$me: needs dpkg and apt-get (Debian or Ubuntu); install by hand: ${PKGS[*]}" >&2; exit 1; }
missing=()
for p in "${PKGS[@]}"; do
  [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" = installed ] || missing+=("$p")
done
[ ${#missing[@]} = 0 ] && exit 0

if [ "$(id -u)" != 0 ]; then
  echo "$me: missing packages: ${missing[*]}" >&2
  echo "$me: run as root:  apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
updated=0
# refresh the package lists only if one of the packages is unknown to them
for p in "${missing[@]}"; do
  cand=$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/{print $2}')
  if [ -z "$cand" ] || [ "$cand" = "(none)" ]; then apt-get update -q; updated=1; break; fi
done
echo "$me: installing ${missing[*]}" >&2
if ! apt-get install -y -q --no-install-recommends "${missing[@]}"; then
  [ $updated = 1 ] && exit 1
  echo "$me: retrying after apt-get update (stale package lists?)" >&2
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
