#!/bin/bash
# tests/fuzz/run-fuzz.sh BUILD_DIR [SECONDS=30]
#
# Runs every libFuzzer harness of tests/fuzz for SECONDS each, one at a time,
# in a clang build with ASan + UBSan of its own: BUILD_DIR-fuzz (a sibling of
# the project's BUILD_DIR; FUZZ_BUILD_DIR=... overrides it).  Installs clang
# and its libFuzzer runtime with apt-get when they are missing.
#
# Each harness starts from its seed corpus, tests/fuzz/corpus/<name>/ (read
# only); what it finds goes to BUILD_DIR-fuzz/fuzz-corpus/<name>/.  A crash,
# leak, timeout or out-of-memory is copied to tests/fuzz/crashes/<name>/ and
# the harness counts as failed: reproduce it with
#   BUILD_DIR-fuzz/tests/fuzz/fuzz_<name> tests/fuzz/crashes/<name>/crash-...
# then fix it and add the file to corpus/<name>/ as crash-<what> (README.md).
#
# Last line: "N passed, N failed"; exit status 1 if any failed.
# Environment: FUZZ_JOBS_ARGS (extra libFuzzer flags), FUZZ_BUILD_DIR.
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 BUILD_DIR [SECONDS=30]" >&2
  exit 2
fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
BUILD=${1%/}
SECS=${2:-30}
case "$SECS" in ''|*[!0-9]*) echo "run-fuzz: SECONDS must be a number" >&2; exit 2 ;; esac
FUZZ_DIR=${FUZZ_BUILD_DIR:-$BUILD-fuzz}

# ---- clang with libFuzzer -------------------------------------------------------
libfuzzer_links() {
  local d
  d=$(mktemp -d)
  printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return 0; }' > "$d/t.c"
  local rc=0
  clang -fsanitize=fuzzer,address,undefined "$d/t.c" -o "$d/t" >/dev/null 2>&1 || rc=1
  rm -rf "$d"
  return $rc
}
if ! command -v clang >/dev/null 2>&1 || ! libfuzzer_links; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "run-fuzz: clang with libFuzzer (-fsanitize=fuzzer) is needed; install it" >&2
    exit 1
  fi
  SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
  echo "run-fuzz: installing clang and its libFuzzer runtime"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends clang
  # libFuzzer and the sanitizer runtimes: libclang-rt-N-dev (only recommended by clang-N).
  V=$(clang --version | sed -n 's/.*clang version \([0-9][0-9]*\)\..*/\1/p' | head -1)
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
    "libclang-rt-$V-dev" || DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q \
    --no-install-recommends "libfuzzer-$V-dev"
  libfuzzer_links || { echo "run-fuzz: clang still cannot link -fsanitize=fuzzer" >&2; exit 1; }
fi

# ---- the clang build --------------------------------------------------------------
cd "$SRC"
if [ ! -f "$FUZZ_DIR/build.ninja" ]; then
  CC=clang meson setup "$FUZZ_DIR" -Db_sanitize=address,undefined -Db_lundef=false \
    -Dbuildtype=debugoptimized -Dtests=enabled
fi
NAMES=()
for d in "$HERE"/corpus/*/; do
  NAMES+=("$(basename "$d")")
done
TARGETS=()
for n in "${NAMES[@]}"; do
  # Harnesses not configured (broker_msg without OpenSSL) have no target.
  if meson introspect "$FUZZ_DIR" --targets | grep -q "\"name\": \"fuzz_$n\""; then
    TARGETS+=("fuzz_$n")
  fi
done
if [ ${#TARGETS[@]} = 0 ]; then
  echo "run-fuzz: $FUZZ_DIR builds no libFuzzer harness: not a clang build, or" \
       "-fsanitize=fuzzer does not link (its meson summary says; remove it or set FUZZ_BUILD_DIR)" >&2
  exit 1
fi
meson compile -C "$FUZZ_DIR" "${TARGETS[@]}"

# ---- fuzz, one harness at a time ------------------------------------------------
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}
PASSED=0 FAILED=0
for t in "${TARGETS[@]}"; do
  n=${t#fuzz_}
  work="$FUZZ_DIR/fuzz-corpus/$n"
  art="$FUZZ_DIR/fuzz-artifacts/$n/"
  mkdir -p "$work" "$art"
  rm -f "$art"/crash-* "$art"/leak-* "$art"/timeout-* "$art"/oom-*
  echo "== $t: ${SECS}s =="
  set +e
  # shellcheck disable=SC2086
  "$FUZZ_DIR/tests/fuzz/$t" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$art" ${FUZZ_JOBS_ARGS:-} \
    "$work" "$HERE/corpus/$n" 2>"$FUZZ_DIR/fuzz-$n.log"
  rc=$?
  set -e
  tail -n 12 "$FUZZ_DIR/fuzz-$n.log"
  found=$(find "$art" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o \
          -name 'timeout-*' -o -name 'oom-*' \) | sort)
  if [ "$rc" = 0 ] && [ -z "$found" ]; then
    echo "$t: ok"
    PASSED=$((PASSED + 1))
  else
    mkdir -p "$HERE/crashes/$n"
    for f in $found; do
      cp "$f" "$HERE/crashes/$n/"
      echo "$t: found $(basename "$f") -> tests/fuzz/crashes/$n/$(basename "$f")"
    done
    echo "$t: FAILED (exit $rc; full log: $FUZZ_DIR/fuzz-$n.log)"
    FAILED=$((FAILED + 1))
  fi
done
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
