#!/bin/bash
# tests/softroce/agent-certs.sh DIR IP...: a throwaway CA and, per IP, a key and a certificate
# naming that IP as its subjectAltName (DIR/IP.crt, DIR/IP.key, DIR/ca.crt): what rrpc-agent
# checks of its peer.  For tests only (2 days, no passphrase).
set -e
D=$1; shift
mkdir -p "$D"; cd "$D"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.crt -days 2 -subj "/CN=agent test CA" 2>/dev/null
for ip in "$@"; do
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$ip.key" -out "$ip.csr" -subj "/CN=$ip" 2>/dev/null
  printf "subjectAltName=IP:%s\n" "$ip" > "$ip.ext"
  openssl x509 -req -in "$ip.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$ip.crt" -days 2 -extfile "$ip.ext" 2>/dev/null
done
