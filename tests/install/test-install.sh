#!/bin/bash
# tests/install/test-install.sh SRC_ROOT: installs roce-rpc as a new user
# would (meson setup --prefix=<a temporary directory>, meson install) and
# checks the installed tree works where it was put, without LD_LIBRARY_PATH:
#   - rrpcd, rrpc-doctor, rrpc-bench --version; rrpc-make-dev-certs makes
#     certificates the installed rrpcd --check accepts;
#   - an out-of-tree C program built with `pkg-config roce_rpc` (the
#     minimal_rpc example) runs, and one with `pkg-config roce_rpc_broker`;
#   - each man page renders with `man -l` (skipped, with the reason, when
#     scdoc is not installed), the docs are under share/doc/roce-rpc;
#   - the generated systemd unit names the installed rrpcd and config, and
#     `systemd-analyze verify` accepts it (where the command exists).
# Builds a separate tree (tests and Python off): about 30 s on 2 cores.
set -uo pipefail
SRC=$(cd "$1" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
PREFIX=$WORK/prefix
unset LD_LIBRARY_PATH
fail=0
ok()   { echo "ok   - $*"; }
bad()  { echo "FAIL - $*"; fail=1; }
skip() { echo "skip - $*"; }

echo "# meson setup --prefix=$PREFIX; ninja; meson install"
if ! meson setup "$WORK/build" "$SRC" --prefix="$PREFIX" -Dtests=disabled -Dpython=disabled \
       --buildtype=plain > "$WORK/setup.log" 2>&1; then
  cat "$WORK/setup.log"; echo "FAIL - meson setup"; exit 1
fi
if ! ninja -C "$WORK/build" > "$WORK/build.log" 2>&1 ||
   ! meson install -C "$WORK/build" --quiet > "$WORK/install.log" 2>&1; then
  tail -40 "$WORK/build.log" "$WORK/install.log"; echo "FAIL - build or install"; exit 1
fi
# Where meson put things (libdir is lib/<multiarch> on Debian).
libdir=$(meson introspect --buildoptions "$WORK/build" |
         python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="libdir"))')
case "$libdir" in /*) ;; *) libdir=$PREFIX/$libdir ;; esac
export PKG_CONFIG_PATH=$libdir/pkgconfig
version=$(meson introspect --projectinfo "$WORK/build" |
          python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')

# The installed tools start as they are.
have_broker=no
[ -x "$PREFIX/sbin/rrpcd" ] && have_broker=yes
tools="$PREFIX/bin/rrpc-bench $PREFIX/bin/rrpc-doctor"
[ $have_broker = yes ] && tools="$tools $PREFIX/sbin/rrpcd"
for t in $tools; do
  if out=$("$t" --version 2>&1) && [[ $out == *"$version"* ]]; then
    ok "installed $(basename "$t") --version: $out"
  else
    bad "installed $(basename "$t") --version: $out"
  fi
done

if [ $have_broker = yes ]; then
  if [ -x "$PREFIX/bin/rrpc-make-dev-certs" ] &&
     "$PREFIX/bin/rrpc-make-dev-certs" "$WORK/certs" kv-server > "$WORK/certs.log" 2>&1; then
    ok "installed rrpc-make-dev-certs made a CA and certificates"
    help=$("$PREFIX/bin/rrpc-make-dev-certs" --help 2>&1)
    case $help in
      "usage: rrpc-make-dev-certs DIR "*) case $help in
          *"set -"*|*scripts/*) bad "rrpc-make-dev-certs --help shows its source: $help" ;;
          *) ok "rrpc-make-dev-certs --help names it as installed and shows only its usage" ;;
        esac ;;
      *) bad "rrpc-make-dev-certs --help does not start with its usage: $(echo "$help" | head -2)" ;;
    esac
    printf 'listen = 127.0.0.1:0\ncert = %s\nkey = %s\nca = %s\n' \
      "$WORK/certs/rrpcd.crt" "$WORK/certs/rrpcd.key" "$WORK/certs/ca.crt" > "$WORK/rrpcd.conf"
    if out=$("$PREFIX/sbin/rrpcd" -c "$WORK/rrpcd.conf" --check 2>&1); then
      ok "installed rrpcd --check accepts them: $out"
    else
      bad "installed rrpcd --check refused the made certificates: $out"
    fi
  else
    bad "bin/rrpc-make-dev-certs is not installed or failed: $(cat "$WORK/certs.log" 2>/dev/null)"
  fi
fi

# Out-of-tree programs, built as the docs say: pkg-config, plus an rpath to
# the library directory (or ldconfig, when the prefix is a system one).
CC=${CC:-cc}
# The public headers include no dependency's header: --cflags must work with
# the project's own .pc files alone (PKG_CONFIG_LIBDIR: no other directory is
# searched, as on a machine without the -dev packages of the dependencies).
if command -v pkg-config > /dev/null; then
  pcs=roce_rpc; [ $have_broker = yes ] && pcs="roce_rpc roce_rpc_broker"
  if out=$(PKG_CONFIG_LIBDIR=$libdir/pkgconfig pkg-config --cflags $pcs 2>&1); then
    ok "pkg-config --cflags $pcs needs no other package's .pc file"
  else
    bad "pkg-config --cflags $pcs with only the project's .pc files: $out"
  fi
fi
if ! command -v pkg-config > /dev/null; then
  bad "pkg-config is missing (apt-get install pkg-config)"
elif "$CC" -o "$WORK/minimal_rpc" "$SRC/examples/minimal_rpc.c" \
       $(pkg-config --cflags --libs roce_rpc) \
       -Wl,-rpath,"$(pkg-config --variable=libdir roce_rpc)" > "$WORK/cc.log" 2>&1; then
  if out=$("$WORK/minimal_rpc" 2>&1); then
    ok "an out-of-tree program built with pkg-config roce_rpc runs"
  else
    bad "the out-of-tree program (examples/minimal_rpc.c) failed: $out"
  fi
else
  bad "building examples/minimal_rpc.c with pkg-config roce_rpc: $(cat "$WORK/cc.log")"
fi
if [ $have_broker = yes ]; then
  cat > "$WORK/ticket.c" <<'C'
#include <stdio.h>
#include <roce_rpc/broker.h>
int main(void)
{
    rrpc_ticket_verifier *v = NULL;
    int r = rrpc_ticket_verifier_create("kv-store", 1000, &v);
    rrpc_ticket_verifier_destroy(v);
    printf("verifier: %d\n", r);
    return r != 0;
}
C
  # --as-needed: only libroce_rpc_broker is a direct dependency, so it must
  # find libroce_rpc by its own rpath.
  if "$CC" -o "$WORK/ticket" "$WORK/ticket.c" -Wl,--as-needed \
       $(pkg-config --cflags --libs roce_rpc_broker) \
       -Wl,-rpath,"$(pkg-config --variable=libdir roce_rpc_broker)" > "$WORK/cc.log" 2>&1 &&
     out=$("$WORK/ticket" 2>&1); then
    ok "an out-of-tree program built with pkg-config roce_rpc_broker runs"
  else
    bad "the out-of-tree broker program: $(cat "$WORK/cc.log") $out"
  fi
fi

# Man pages and docs.
if grep -q "scdoc *: *YES\|scdoc.*: YES" "$WORK/setup.log" || command -v scdoc > /dev/null; then
  pages="man8/rrpcd.8 man1/rrpc-bench.1 man8/rrpc-doctor.8 man7/roce_rpc.7"
  for p in $pages; do
    f=$PREFIX/share/man/$p
    if [ ! -f "$f" ]; then
      bad "share/man/$p is not installed"
    elif ! command -v man > /dev/null; then
      skip "share/man/$p: man (man-db) is not installed, cannot render it"
    elif out=$(MANWIDTH=80 MANPAGER=cat man -l "$f" 2> "$WORK/man.err") && [ -n "$out" ] &&
         [ ! -s "$WORK/man.err" ]; then
      ok "man -l share/man/$p renders ($(printf '%s\n' "$out" | wc -l) lines)"
    else
      bad "man -l share/man/$p: $(cat "$WORK/man.err")"
    fi
  done
  # Every option a tool's --help lists is in its page (and rrpcd's settings in rrpcd(8)).
  for tp in "bin/rrpc-bench man1/rrpc-bench.1" "bin/rrpc-doctor man8/rrpc-doctor.8" \
            "sbin/rrpcd man8/rrpcd.8"; do
    set -- $tp
    [ -x "$PREFIX/$1" ] && [ -f "$PREFIX/share/man/$2" ] || continue
    page=$(MANWIDTH=200 MANPAGER=cat man -l "$PREFIX/share/man/$2" 2>/dev/null)
    opts=$("$PREFIX/$1" --help 2>&1 | grep -oE -- '--[a-z][a-z-]+' | sort -u)
    [ "$1" = sbin/rrpcd ] &&
      opts="$opts $("$PREFIX/$1" --help 2>&1 | sed -n 's/^  \([a-z_]*\) *default .*/\1/p')"
    missing=
    for o in $opts; do grep -q -- "$o" <<< "$page" || missing="$missing $o"; done
    [ -z "$missing" ] && ok "$2 documents every option of $(basename "$1") --help" ||
      bad "$2 does not document:$missing"
  done
else
  skip "man pages: scdoc is not installed (apt-get install scdoc), none were generated"
fi
for d in README.md LICENSE docs/README.md docs/deployment.md docs/doctor.md; do
  [ -f "$PREFIX/share/doc/roce-rpc/$d" ] && ok "share/doc/roce-rpc/$d installed" ||
    bad "share/doc/roce-rpc/$d is not installed"
done

# The systemd unit: generated from the real paths.
if [ $have_broker = yes ]; then
  unit=$(find "$PREFIX" -name rrpcd.service | head -1)
  if [ -z "$unit" ]; then
    bad "rrpcd.service is not installed"
  else
    exec_line=$(grep '^ExecStart=' "$unit")
    [[ $exec_line == "ExecStart=$PREFIX/sbin/rrpcd -c $PREFIX/etc/rrpcd/rrpcd.conf"* ]] &&
      ok "the unit runs the installed rrpcd with $PREFIX/etc/rrpcd/rrpcd.conf" ||
      bad "the unit's $exec_line does not name $PREFIX/sbin/rrpcd -c $PREFIX/etc/rrpcd/rrpcd.conf"
    for docurl in $(sed -n 's/^Documentation=//p' "$unit"); do
      case "$docurl" in
        file:*) [ -f "${docurl#file:}" ] && ok "the unit's Documentation $docurl exists" ||
                  bad "the unit's Documentation $docurl is not installed" ;;
        man:*)  f=$(find "$PREFIX/share/man" -name "$(echo "${docurl#man:}" | sed 's/(\(.*\))/.\1/')" 2>/dev/null)
                [ -n "$f" ] && ok "the unit's Documentation $docurl is installed" ||
                  bad "the unit's Documentation $docurl is not installed" ;;
      esac
    done
    if command -v systemd-analyze > /dev/null; then
      # It runs `man rrpcd(8)` for the Documentation= line: look in the prefix.
      if out=$(MANPATH=$PREFIX/share/man: systemd-analyze verify "$unit" 2>&1); then
        ok "systemd-analyze verify accepts the installed unit"
      else
        bad "systemd-analyze verify: $out"
      fi
    else
      skip "systemd-analyze verify: systemd-analyze is not installed on this host"
    fi
    # Issue #32: readiness and reload through sd_notify, SIGHUP reloads, and the
    # hardening kept (systemd-analyze security <= 2.0; the unit says what is left).
    grep -qx 'Type=notify' "$unit" && grep -qx 'ExecReload=/bin/kill -HUP $MAINPID' "$unit" &&
      ok "the unit is Type=notify and reloads with SIGHUP" ||
      bad "the unit is not Type=notify with ExecReload=/bin/kill -HUP \$MAINPID"
    if command -v systemd-analyze > /dev/null &&
       score=$(MANPATH=$PREFIX/share/man: systemd-analyze security --offline=true "$unit" 2>/dev/null |
               sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p') && [ -n "$score" ]; then
      awk -v s="$score" 'BEGIN { exit !(s <= 2.0) }' &&
        ok "systemd-analyze security rates the unit $score (<= 2.0)" ||
        bad "systemd-analyze security rates the unit $score, above 2.0: harden it again"
    else
      skip "systemd-analyze security --offline: not available on this host"
    fi
  fi
  [ -f "$PREFIX/etc/rrpcd/rrpcd.conf.example" ] && ok "etc/rrpcd/rrpcd.conf.example installed" ||
    bad "etc/rrpcd/rrpcd.conf.example is not installed"
fi
# The host agent of encrypted RoCE (issue #30), built with libnl-xfrm-3 and OpenSSL.
if [ -x "$PREFIX/sbin/rrpc-agent" ]; then
  [ -x "$PREFIX/sbin/rrpc-xfrm" ] && ok "sbin/rrpc-xfrm installed beside rrpc-agent" ||
    bad "sbin/rrpc-xfrm is not installed"
  unit=$(find "$PREFIX" -name rrpc-agent.service | head -1)
  if [ -z "$unit" ]; then
    bad "rrpc-agent.service is not installed"
  else
    grep -q "^ExecStart=$PREFIX/sbin/rrpc-agent --key " "$unit" &&
      grep -qx 'CapabilityBoundingSet=CAP_NET_ADMIN' "$unit" &&
      ok "rrpc-agent.service runs the installed agent with CAP_NET_ADMIN alone" ||
      bad "rrpc-agent.service: $(grep '^ExecStart=' "$unit")"
    if command -v systemd-analyze > /dev/null; then
      if out=$(MANPATH=$PREFIX/share/man: systemd-analyze verify "$unit" 2>&1); then
        ok "systemd-analyze verify accepts rrpc-agent.service"
      else
        bad "systemd-analyze verify rrpc-agent.service: $out"
      fi
      score=$(MANPATH=$PREFIX/share/man: systemd-analyze security --offline=true "$unit" 2>/dev/null |
              sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
      [ -n "$score" ] && echo "# systemd-analyze security rates rrpc-agent.service $score"
    fi
  fi
fi
exit $fail
