#!/bin/sh
# tests/broker/rrpcd-version.sh RRPCD PROTO_H: rrpcd --version names the
# control protocol version the schema defines (CTL_VERSION in broker/proto.h).
want=$(sed -n 's/^#define CTL_VERSION \([0-9][0-9]*\).*/\1/p' "$2")
[ -n "$want" ] || { echo "FAIL - no CTL_VERSION in $2"; exit 1; }
out=$("$1" --version 2>&1) || { echo "FAIL - rrpcd --version exited $?: $out"; exit 1; }
case "$out" in
  *"(control protocol $want)"*) echo "ok   - $out" ;;
  *) echo "FAIL - rrpcd --version said '$out', not control protocol $want"; exit 1 ;;
esac
