#!/bin/bash
# tests/broker/rrpcd-config-file.sh RRPCD SRC_ROOT: rrpcd's configuration file, read by
# libinih through rrpcd's typed settings table: comments after values (the etcd snippet of
# docs/deployment.md as it stands, its paths moved to test files), indented lines, an
# unknown name answered with "did you mean", a value out of range named with its range,
# sections, lines without '=', lines longer than libinih's buffer.
set -u
RRPCD=${1:?usage: rrpcd-config-file.sh RRPCD SRC_ROOT}
SRC=${2:?usage: rrpcd-config-file.sh RRPCD SRC_ROOT}
command -v openssl > /dev/null || { echo "skipped: the openssl command is missing"; exit 77; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
PASS=0 FAIL=0
ok() { echo "ok   - $*"; PASS=$((PASS + 1)); }
bad() { echo "FAIL - $*"; FAIL=$((FAIL + 1)); }

"$SRC/scripts/make-dev-certs.sh" "$WORK/c" kv-server > /dev/null 2>&1 ||
  { echo "FAIL - make-dev-certs"; exit 1; }
C=$WORK/c
GOOD=(-s "cert=$C/rrpcd.crt" -s "key=$C/rrpcd.key" -s "ca=$C/ca.crt" -s "ticket_key=$C/ticket.pem")

# FILE must pass --check.
accepted() {
  local what=$1 file=$2 out rc
  out=$("$RRPCD" -c "$file" "${GOOD[@]}" --check 2>&1); rc=$?
  if [ $rc = 0 ] && [ "$(tail -1 <<< "$out")" = "rrpcd: configuration OK" ]; then
    ok "$what"
  else
    bad "$what: exit $rc: $out"
  fi
}
# FILE must be refused with MESSAGE (a grep -E pattern).
refused() {
  local what=$1 file=$2 msg=$3 out rc
  out=$("$RRPCD" -c "$file" "${GOOD[@]}" --check 2>&1); rc=$?
  if [ $rc = 1 ] && grep -Eq -- "$msg" <<< "$out"; then
    ok "$what: $(head -1 <<< "$out")"
  else
    bad "$what: exit $rc, said: $out"
  fi
}

# docs/deployment.md's etcd configuration, comments after values and all: its ```ini blocks
# under "One rrpcd or a cluster on etcd", with the certificate paths pointed at test files.
D=$WORK/etc
mkdir -p "$D"
cp "$C/ca.crt" "$D/etcd-ca.crt"; cp "$C/ca.crt" "$D/client-ca.crt"
cp "$C/rrpcd.crt" "$D/etcd-client.crt"; cp "$C/rrpcd.key" "$D/etcd-client.key"
cp "$C/rrpcd.crt" "$D/b1.crt"; cp "$C/rrpcd.key" "$D/rrpcd.key"; cp "$C/ticket.pem" "$D/ticket.pem"
chmod 600 "$D/ticket.pem"
/usr/bin/python3 - "$SRC/docs/deployment.md" > "$WORK/doc.conf" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
section = text[text.index("### One rrpcd or a cluster on etcd"):]
section = section[:section.index("\n## ")]
blocks = re.findall(r"```ini\n(.*?)```", section, re.S)
assert len(blocks) >= 1, "no ini block"
sys.stdout.write("".join(blocks))
PY
grep -q ' # ' "$WORK/doc.conf" || bad "the docs' etcd snippet has no comment after a value any more"
sed -i "s#/etc/rrpcd/#$D/#g; s#/run/credentials/rrpcd.service/#$D/#g" "$WORK/doc.conf"
out=$("$RRPCD" -c "$WORK/doc.conf" -s "ca=$C/ca.crt" --check 2>&1); rc=$?
[ $rc = 0 ] && [ "$(tail -1 <<< "$out")" = "rrpcd: configuration OK" ] &&
  ok "docs/deployment.md's etcd configuration, comments after values, passes --check" ||
  bad "docs/deployment.md's etcd configuration: exit $rc: $out"

cat > "$WORK/comments.conf" <<EOF2
# a comment line
  ; another, indented
lease_ms = 20000   # a comment after a value
idle_timeout_ms = 60000 ; and one in inih's own style
    auth_timeout_ms = 3000
allow = lookup kv-store *    # the * is a pattern, the # a comment
ticket_key_previous =
log_level = debug#not a comment: no blank before it
EOF2
refused "a '#' right after a value is part of it" "$WORK/comments.conf" \
  "comments.conf:8: bad value 'debug#not a comment: no blank before it' for log_level"
sed -i '$d' "$WORK/comments.conf"
accepted "comments after values and indented lines are read as the old parser read them" \
  "$WORK/comments.conf"

printf 'lease_ms = 100   # too short\n' > "$WORK/range.conf"
refused "a value out of range names the range (and not the comment)" "$WORK/range.conf" \
  "range.conf:1: bad value '100' for lease_ms: not a number from 300 to 3600000"

printf 'listen = 127.0.0.1:0\nmax_conections = 5\n' > "$WORK/typo.conf"
refused "an unknown name says did you mean" "$WORK/typo.conf" \
  "typo.conf:2: unknown setting 'max_conections' \(did you mean 'max_connections'\?"
out=$("$RRPCD" "${GOOD[@]}" -s ticket_lifetim_ms=1000 --check 2>&1); rc=$?
[ $rc = 1 ] && grep -q "command line: unknown setting 'ticket_lifetim_ms' (did you mean 'ticket_lifetime_ms'?" <<< "$out" &&
  ok "-s with an unknown name says did you mean" || bad "-s ticket_lifetim_ms: exit $rc: $out"
printf 'frobnicate = 5\n' > "$WORK/unknown.conf"
refused "a name close to none gets no guess" "$WORK/unknown.conf" \
  "unknown.conf:1: unknown setting 'frobnicate' \(rrpcd --help lists them\)"

printf '[rrpcd]\nlease_ms = 20000\n' > "$WORK/section.conf"
refused "a section is refused" "$WORK/section.conf" "section.conf:2: \[rrpcd\]: rrpcd's file has no sections"
printf 'lease_ms = 20000\nlease_ms 20000\n' > "$WORK/noeq.conf"
refused "a line without '=' is refused with its number" "$WORK/noeq.conf" \
  "noeq.conf:2: expected \"name = value\""
printf 'require_client_cert = maybe\n' > "$WORK/bool.conf"
refused "a bool that is neither yes nor no" "$WORK/bool.conf" "for require_client_cert: not yes or no"

long=$(printf '/x%.0s' $(seq 150))
printf 'token_file = %s\n' "$long" > "$WORK/long.conf"
refused "a line longer than libinih's buffer is refused, not cut" "$WORK/long.conf" \
  "long.conf:1: the line is longer than [0-9]+ characters"
printf 'lease_ms = 20000 # %s\n# %s\n' "$long" "$long" > "$WORK/longcomment.conf"
accepted "a long comment is no error" "$WORK/longcomment.conf"

# The table prints itself: --help, and --help-settings=scdoc for the man page.
"$RRPCD" --help | grep -q "^  max_connections (default: 4096; 1..1000000)$" &&
  ok "--help lists each setting with its default and range" || bad "--help: $("$RRPCD" --help)"
"$RRPCD" --help-settings=scdoc | grep -q '^\*max\\_connections\* (default: 4096; 1..1000000)$' &&
  ok "--help-settings=scdoc prints the man page's list" || bad "--help-settings=scdoc"

# A mistyped option: the likely option and where the help is, not the whole help.
out=$("$RRPCD" --chek 2>&1); rc=$?
if [ $rc = 2 ] && grep -q "did you mean --check?" <<< "$out" && [ "$(wc -l <<< "$out")" -le 4 ]; then
  ok "rrpcd --chek: exit 2, 'did you mean --check?', $(wc -l <<< "$out") lines"
else
  bad "rrpcd --chek: exit $rc, $(wc -l <<< "$out") lines: $(head -5 <<< "$out")"
fi
echo "$PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
