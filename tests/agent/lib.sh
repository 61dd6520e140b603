# tests/agent/lib.sh: the preamble the agent tests share.  A test sources it first:
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
# It sets BUILD (the build directory, the test's $1), HERE (tests/agent) and AG (the build's
# rrpc-agent); exits 77 (skipped) without rrpc-agent or as non-root (the agent's sockets' IPsec
# bypass needs CAP_NET_ADMIN); gives ok/bad, counted in PASS and FAIL, and finish, which says
# the counts and exits 0 only if nothing failed; makes the work directory W, removed at exit,
# and PIDS, the processes killed at exit.
set -uo pipefail
BUILD=$(cd "${1:?usage: $(basename "$0") BUILD_DIR}" && pwd)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
AG=$BUILD/agent/rrpc-agent
[ -x "$AG" ] || { echo "skipped: no $AG (libnl-xfrm-3-dev and OpenSSL at build time)"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "skipped: rrpc-agent needs CAP_NET_ADMIN (run as root)"; exit 77; }
PASS=0 FAIL=0
ok()  { PASS=$((PASS + 1)); echo "ok - $*"; }
bad() { FAIL=$((FAIL + 1)); echo "not ok - $*"; }
finish() { echo "$PASS passed, $FAIL failed"; [ $FAIL = 0 ]; exit; }
W=$(mktemp -d)
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$W"' EXIT
