#!/bin/sh
# tests/tools-version.sh VERSION TOOL...: each TOOL --version exits 0 and names VERSION.
v=$1; shift
fail=0
for t in "$@"; do
  out=$("$t" --version 2>&1); rc=$?
  case "$out" in
    *"$v"*) [ $rc = 0 ] && echo "ok   - $out" || { echo "FAIL - $t --version exit $rc"; fail=1; } ;;
    *) echo "FAIL - $t --version said: $out"; fail=1 ;;
  esac
done
exit $fail
