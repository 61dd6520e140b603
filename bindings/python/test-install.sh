#!/bin/sh
# bindings/python/test-install.sh BUILD_DIR prefix|pip
#   prefix: `meson install --destdir` BUILD_DIR into a temporary directory,
#           then, from outside the source and build trees with only the
#           installed site-packages on PYTHONPATH (no LD_LIBRARY_PATH),
#           check-installed.py (the package and libroce_rpc come from the
#           install; one echo over tcp) and the pytest suite.
#   pip:    copy the source tree (no build directories), make a venv with
#           /usr/bin/python3 -m venv --system-site-packages, run
#           `pip install --no-build-isolation` on the copy; check what the
#           wheel installed (the package and rrpc-make-dev-certs, nothing
#           else) and what pip says in a venv without meson-python; delete
#           the copy, then the same checks with the venv's python.
# Exit 77 (skipped) with the reason when a Debian package is missing.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
BUILD=$(cd "$1" && pwd)
MODE=$2
PY=/usr/bin/python3
skip() { echo "python install test: SKIPPED: $*" >&2; exit 77; }
$PY -c 'import cffi, numpy, pytest' 2>/dev/null ||
  skip "install python3-cffi python3-numpy python3-pytest python3-dev"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/rrpc-pyinstall.XXXXXX")
trap 'rm -rf "$TMP"' EXIT INT TERM
unset LD_LIBRARY_PATH PYTHONPATH

case $MODE in
prefix)
  ROOT=$TMP/root
  meson install -C "$BUILD" --no-rebuild --destdir "$ROOT" > "$TMP/install.log" 2>&1 ||
    { cat "$TMP/install.log"; echo "python install test: meson install failed" >&2; exit 1; }
  INIT=$(find "$ROOT" -path '*/roce_rpc/__init__.py' | head -n 1)
  [ -n "$INIT" ] || { echo "python install test: meson install installed no roce_rpc package" \
                           "(is the python option disabled, python3-cffi missing?)" >&2; exit 1; }
  SITE=$(dirname "$(dirname "$INIT")")
  RUN="env PYTHONPATH=$SITE $PY -s"
  ;;
pip)
  $PY -c 'import mesonpy, ensurepip, pip' 2>/dev/null ||
    skip "install python3-mesonpy python3-venv python3-pip"
  command -v patchelf >/dev/null || skip "install patchelf (meson-python needs it)"
  mkdir "$TMP/src"
  tar -C "$TOP" --exclude=./.git --exclude='./build*' --exclude='./.mesonpy*' -cf - . |
    tar -C "$TMP/src" -xf -
  ROOT=$TMP/venv
  $PY -m venv --system-site-packages "$ROOT"
  (cd "$TMP" && "$ROOT/bin/python" -m pip install --no-build-isolation --no-index --no-cache-dir \
     --disable-pip-version-check -q "$TMP/src") > "$TMP/pip.log" 2>&1 ||
    { cat "$TMP/pip.log"; echo "python install test: pip install failed" >&2; exit 1; }
  # The wheel holds what Python needs (issue #32): the package, and the
  # rrpc-make-dev-certs script docs/python.md names; no C headers, .pc
  # files, shared libraries besides the extension, C tools, man pages.
  EXTRA=$(cd "$ROOT" && find . \( -name '*.h' -o -name '*.pc' -o -name 'libroce_rpc*' \
            -o -name 'rrpcd*' -o -name 'rrpc-bench' -o -name 'rrpc-doctor' -o -name '*.[1-8]' \
            -o -name '*.mesonpy.libs' -o -name 'plot.py' \) -print)
  [ -z "$EXTRA" ] || { echo "python install test: the wheel installed what Python does not need:" \
                             $EXTRA >&2; exit 1; }
  NEWBIN=$(cd "$ROOT/bin" && ls | grep -v -e '^python' -e '^pip' -e '^activate' -e '^Activate' | tr '\n' ' ')
  [ "$NEWBIN" = "rrpc-make-dev-certs " ] ||
    { echo "python install test: VENV/bin holds '$NEWBIN', not 'rrpc-make-dev-certs' only" >&2; exit 1; }
  grep -q 'VENV/bin` gains `rrpc-make-dev-certs` only' "$TOP/docs/python.md" ||
    { echo "python install test: docs/python.md does not say what VENV/bin gains" >&2; exit 1; }
  # Without the build backend: a few lines saying what to install, not
  # pip's traceback of the failed import (a venv that sees no Debian package).
  "$PY" -m venv "$TMP/bare"
  (cd "$TMP" && "$TMP/bare/bin/python" -m pip install --no-build-isolation --no-index \
     --no-cache-dir --disable-pip-version-check "$TMP/src") > "$TMP/bare.log" 2>&1 &&
    { cat "$TMP/bare.log"; echo "python install test: pip install without mesonpy succeeded?" >&2; exit 1; }
  if ! grep -q 'cannot import mesonpy (pip: meson-python), cffi' "$TMP/bare.log" ||
     ! grep -q 'apt-get install python3-mesonpy python3-cffi' "$TMP/bare.log" ||
     grep -q 'Traceback' "$TMP/bare.log" || [ "$(wc -l < "$TMP/bare.log")" -gt 30 ]; then
    cat "$TMP/bare.log"
    echo "python install test: pip without the build backend does not say what to install" >&2
    exit 1
  fi
  rm -rf "$TMP/src" "$TMP/bare"  # the installed package needs neither its source nor its build tree
  RUN="$ROOT/bin/python -s"
  ;;
*) echo "usage: $0 BUILD_DIR prefix|pip" >&2; exit 2 ;;
esac

cd "$TMP"  # outside the source and build trees: nothing importable from there
cp "$HERE/check-installed.py" "$TMP/"  # a script's directory is on sys.path
$RUN "$TMP/check-installed.py" "$ROOT"
RRPC_TEST_PACKAGE_UNDER=$ROOT $RUN -m pytest -q -p no:cacheprovider "$HERE/tests"
