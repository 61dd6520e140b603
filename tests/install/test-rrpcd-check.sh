#!/bin/bash
# tests/install/test-rrpcd-check.sh RRPCD SRC_ROOT: `rrpcd --check` refuses what the start
# would refuse (and the start refuses it too), each with a message naming the setting:
# a port out of range, a listen host that does not resolve, a certificate, key, CA bundle or
# token file that is missing or does not parse, a key of another certificate, a ticket key
# that is not Ed25519, readable by others or missing.  A good
# configuration passes --check and starts.  Needs the openssl command (development CA).
set -u
RRPCD=${1:?usage: test-rrpcd-check.sh RRPCD SRC_ROOT}
SRC=${2:?usage: test-rrpcd-check.sh RRPCD SRC_ROOT}
command -v openssl > /dev/null || { echo "skipped: the openssl command is missing"; exit 77; }
WORK=$(mktemp -d)
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2> /dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
PASS=0 FAIL=0
ok() { echo "ok   - $*"; PASS=$((PASS + 1)); }
bad() { echo "FAIL - $*"; FAIL=$((FAIL + 1)); }

"$SRC/scripts/make-dev-certs.sh" "$WORK/c" kv-server > /dev/null 2>&1 ||
  { echo "FAIL - make-dev-certs"; exit 1; }
C=$WORK/c
echo "not a certificate" > "$WORK/garbage.pem"
printf 'kv-client s3cr3t-t0ken\n' > "$WORK/tokens"; chmod 600 "$WORK/tokens"
printf 'kv-client\n' > "$WORK/bad-tokens"; chmod 600 "$WORK/bad-tokens"
GOOD=(-s "cert=$C/rrpcd.crt" -s "key=$C/rrpcd.key" -s "ca=$C/ca.crt" -s "token_file=$WORK/tokens"
      -s "ticket_key=$C/ticket.pem"
      -s "listen=127.0.0.1:0" -s "port_file=$WORK/port")

# A configuration --check must refuse with MESSAGE (a grep -E pattern), and the start too.
refused() {
  local what=$1 msg=$2; shift 2
  local out rc
  out=$("$RRPCD" "${GOOD[@]}" "$@" --check 2>&1); rc=$?
  if [ $rc = 1 ] && grep -Eq -- "$msg" <<< "$out" && ! grep -q "configuration OK" <<< "$out"; then
    ok "--check refuses $what: $(head -1 <<< "$out")"
  else
    bad "--check on $what: exit $rc, said: $out"
  fi
  rm -f "$WORK/port"
  timeout 10 "$RRPCD" "${GOOD[@]}" "$@" > "$WORK/start.log" 2>&1; rc=$?
  if [ $rc = 1 ] && [ ! -s "$WORK/port" ]; then
    ok "the start refuses $what too"
  else
    bad "the start with $what: exit $rc (124: it kept running), port file: $(cat "$WORK/port" 2>/dev/null)"
  fi
}

refused "listen=127.0.0.1:99999 (port out of range)" \
  "bad value '127.0.0.1:99999' for listen: the port must be a number 0..65535" \
  -s listen=127.0.0.1:99999
refused "listen=127.0.0.1:http (a port that is not a number)" "for listen: the port must be" \
  -s listen=127.0.0.1:http
refused "a listen host that does not resolve" "listen = no-such-host.invalid:7700: " \
  -s listen=no-such-host.invalid:7700
refused "a certificate file that does not exist" "cert = $C/missing.crt: cannot open it: No such file" \
  -s "cert=$C/missing.crt"
refused "a certificate file that does not parse" "cert = $WORK/garbage.pem: not a PEM certificate" \
  -s "cert=$WORK/garbage.pem"
refused "a key file that does not exist" "key = $C/missing.key: cannot open it" \
  -s "key=$C/missing.key"
refused "a key file that does not parse" "key = $WORK/garbage.pem: not a PEM private key" \
  -s "key=$WORK/garbage.pem"
refused "the key of another certificate" "key = $C/kv-server.key does not belong to cert" \
  -s "key=$C/kv-server.key"
refused "a CA file that does not exist" "ca = $C/missing-ca.crt: cannot open it" \
  -s "ca=$C/missing-ca.crt"
refused "a CA file that does not parse" "ca = $WORK/garbage.pem: no PEM certificate" \
  -s "ca=$WORK/garbage.pem"
refused "a token file that does not exist" "cannot open the token file $WORK/missing-tokens" \
  -s "token_file=$WORK/missing-tokens"
refused "a token file that does not parse" "bad-tokens:1: expected \"PRINCIPAL TOKEN\"" \
  -s "token_file=$WORK/bad-tokens"

# The etcd registry's settings (issue #16): each checked as the start checks it.
printf 'etcd-pass\n' > "$WORK/etcd-pw"; chmod 600 "$WORK/etcd-pw"
: > "$WORK/empty-pw"; chmod 600 "$WORK/empty-pw"
refused "registry=zk://h:1 (not memory or etcd://)" "bad value 'zk://h:1' for registry: expected memory or etcd://" \
  -s registry=zk://h:1
refused "registry=etcd:// (no endpoint)" "for registry: each etcd endpoint is HOST:PORT" \
  -s registry=etcd://
refused "an etcd endpoint with port 0" "for registry: an etcd endpoint needs a host and a port 1..65535" \
  -s registry=etcd://127.0.0.1:2379,127.0.0.1:0
refused "an etcd endpoint with a port out of range" "for registry: each etcd endpoint is HOST:PORT or \[IPv6\]:PORT, port 1..65535" \
  -s registry=etcd://127.0.0.1:70000
refused "etcd_prefix without a leading /" "bad value 'rrpc' for etcd_prefix: the prefix begins with /" \
  -s etcd_prefix=rrpc
refused "etcd_ca without registry = etcd://" "etcd_ca is set but registry is not etcd://" \
  -s "etcd_ca=$C/ca.crt"
E=(-s registry=etcd://127.0.0.1:2379,[::1]:2379)
refused "etcd_key without etcd_cert" "etcd_key is set without etcd_cert" "${E[@]}" -s "etcd_key=$C/rrpcd.key"
refused "etcd_user without a password file" "etcd_user and etcd_password_file go together" \
  "${E[@]}" -s etcd_user=rrpcd
refused "an etcd password file whose first line is empty" "etcd_password_file = $WORK/empty-pw: its first line is empty" \
  "${E[@]}" -s etcd_user=rrpcd -s "etcd_password_file=$WORK/empty-pw"
refused "an etcd CA file that does not exist" "etcd_ca = $C/missing.crt: cannot open it" \
  "${E[@]}" -s "etcd_ca=$C/missing.crt"
refused "an etcd CA file that does not parse" "etcd_ca = $WORK/garbage.pem: no PEM certificate" \
  "${E[@]}" -s "etcd_ca=$WORK/garbage.pem"
refused "the etcd key of another certificate" "etcd_key = $C/kv-server.key: not a PEM private key of etcd_cert" \
  "${E[@]}" -s "etcd_cert=$C/rrpcd.crt" -s "etcd_key=$C/kv-server.key"
refused "an etcd password file that does not exist" "etcd_password_file = $WORK/missing-pw: cannot open it" \
  "${E[@]}" -s etcd_user=rrpcd -s "etcd_password_file=$WORK/missing-pw"
out=$("$RRPCD" "${GOOD[@]}" "${E[@]}" -s etcd_user=rrpcd -s "etcd_password_file=$WORK/etcd-pw" \
  --check 2>&1); rc=$?
[ $rc = 0 ] && [ "$(tail -1 <<< "$out")" = "rrpcd: configuration OK" ] && ok "--check accepts etcd_user with its password file" ||
  bad "--check on etcd_user with a password file: exit $rc: $out"
out=$("$RRPCD" "${GOOD[@]}" "${E[@]}" -s "etcd_cert=$C/rrpcd.crt" -s "etcd_key=$C/rrpcd.key" \
  -s "etcd_ca=$C/ca.crt" -s etcd_prefix=/cluster-a/rrpc/ --check 2>&1); rc=$?
[ $rc = 0 ] && [ "$(tail -1 <<< "$out")" = "rrpcd: configuration OK" ] && ok "--check accepts a good etcd configuration" ||
  bad "--check on a good etcd configuration: exit $rc: $out"

# The ticket keys (issue #16): Ed25519 only, private to rrpcd, previous keys bounded.
cp "$C/ticket.pem" "$WORK/open-ticket.pem"; chmod 644 "$WORK/open-ticket.pem"
for i in 1 2 3 4 5 6 7 8; do
  openssl genpkey -algorithm ed25519 2> /dev/null | openssl pkey -pubout -out "$WORK/prev$i.pub"
done
refused "a ticket_key that is not Ed25519 (P-256)" "holds a key of type EC; ticket keys are Ed25519" \
  -s "ticket_key=$C/rrpcd.key"
refused "a ticket_key others may read" "ticket_key = $WORK/open-ticket.pem is readable by its group or others" \
  -s "ticket_key=$WORK/open-ticket.pem"
refused "a ticket_key file that does not exist" "cannot read the ticket key $C/missing.pem" \
  -s "ticket_key=$C/missing.pem"
cp "$WORK/garbage.pem" "$WORK/garbage-key.pem"; chmod 600 "$WORK/garbage-key.pem"
refused "a ticket_key that is no key" "holds no PEM private key" -s "ticket_key=$WORK/garbage-key.pem"
refused "registry = etcd:// without ticket_key" "the registry on etcd needs 'ticket_key'" \
  -s ticket_key= -s registry=etcd://127.0.0.1:2379
refused "the current key as ticket_key_previous" "is the current ticket_key" \
  -s "ticket_key_previous=$C/ticket.pub"
refused "a ticket_key_previous that is not Ed25519" "ticket_key_previous: .* ticket keys are Ed25519" \
  -s "ticket_key_previous=$C/rrpcd.key"
refused "eight previous ticket keys" "at most 7 previous ticket keys" \
  -s "ticket_key_previous=$WORK/prev1.pub,$WORK/prev2.pub,$WORK/prev3.pub,$WORK/prev4.pub" \
  -s "ticket_key_previous=$WORK/prev5.pub,$WORK/prev6.pub,$WORK/prev7.pub,$WORK/prev8.pub"
out=$("$RRPCD" "${GOOD[@]}" -s "ticket_key_previous=$WORK/prev1.pub, $WORK/prev2.pub" --check 2>&1); rc=$?
[ $rc = 0 ] && grep -Eq "^rrpcd: ticket key [0-9a-f]{16} \(Ed25519\), 2 previous key\(s\) accepted$" <<< "$out" &&
  ok "--check loads ticket_key and a comma list of previous keys, and names the key" ||
  bad "--check with two previous keys: exit $rc: $out"

# metrics_listen (issue #17): checked as listen is; never every address by default.
refused "metrics_listen=127.0.0.1:99999 (port out of range)" \
  "bad value '127.0.0.1:99999' for metrics_listen: the port must be a number 0..65535" \
  -s metrics_listen=127.0.0.1:99999
refused "metrics_listen=:9464 (no host)" "for metrics_listen: the host is missing" \
  -s metrics_listen=:9464
refused "a metrics_listen host that does not resolve" "metrics_listen = no-such-host.invalid:9464: " \
  -s metrics_listen=no-such-host.invalid:9464
refused "metrics_port_file without metrics_listen" "metrics_port_file is set but metrics_listen is not" \
  -s "metrics_port_file=$WORK/mport"
# An address in use: --check does not bind (as for listen: a running rrpcd may hold it), the
# start refuses it with the address, before it writes any port file.
/usr/bin/python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
open(sys.argv[1] + ".tmp", "w").write(str(s.getsockname()[1])); __import__("os").rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(120)' "$WORK/busy" &
HOLDER=$!
for _ in $(seq 200); do [ -s "$WORK/busy" ] && break; sleep 0.05; done
BUSY=$(cat "$WORK/busy" 2>/dev/null)
if [ -n "$BUSY" ]; then
  rm -f "$WORK/port"
  out=$(timeout 10 "$RRPCD" "${GOOD[@]}" -s "metrics_listen=127.0.0.1:$BUSY" 2>&1); rc=$?
  if [ $rc = 1 ] && [ ! -s "$WORK/port" ] &&
     grep -q "metrics_listen = 127.0.0.1:$BUSY: cannot listen there: address in use" <<< "$out"; then
    ok "the start refuses a metrics_listen address in use, naming it"
  else
    bad "the start with metrics_listen in use: exit $rc, port file: $(cat "$WORK/port" 2>/dev/null), said: $out"
  fi
else
  bad "could not hold a port for the address-in-use check"
fi
kill "$HOLDER" 2> /dev/null
wait "$HOLDER" 2> /dev/null
GOOD+=(-s metrics_listen=127.0.0.1:0 -s "metrics_port_file=$WORK/mport")

# The good configuration: --check says so, and it starts.
out=$("$RRPCD" "${GOOD[@]}" --check 2>&1); rc=$?
[ $rc = 0 ] && [ "$(tail -1 <<< "$out")" = "rrpcd: configuration OK" ] && ok "--check accepts the good configuration" ||
  bad "--check on the good configuration: exit $rc: $out"
rm -f "$WORK/port"
"$RRPCD" "${GOOD[@]}" 2> "$WORK/rrpcd.log" &
PID=$!
for _ in $(seq 200); do [ -s "$WORK/port" ] && break; sleep 0.05; done
[ -s "$WORK/port" ] && ok "the good configuration starts (port $(cat "$WORK/port"))" ||
  bad "the good configuration did not start: $(cat "$WORK/rrpcd.log")"
[ -s "$WORK/mport" ] && ok "it serves its metrics (port $(cat "$WORK/mport"))" ||
  bad "the good configuration wrote no metrics port: $(cat "$WORK/rrpcd.log")"

echo "$PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
