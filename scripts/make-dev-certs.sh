#!/bin/bash
# scripts/make-dev-certs.sh DIR [PRINCIPAL...]   (installed as rrpc-make-dev-certs)
#   Makes a DEVELOPMENT certificate authority and certificates for rrpcd with
#   the openssl command line (ECDSA P-256, valid 825 days):
#     DIR/ca.crt  DIR/ca.key          the CA (keep ca.key private)
#     DIR/rrpcd.crt  DIR/rrpcd.key    the broker: CN=rrpcd, SAN localhost,
#                                     127.0.0.1, ::1 and $RRPCD_SANS
#                                     (e.g. RRPCD_SANS="DNS:broker.lan,IP:10.0.0.5")
#     DIR/P.crt  DIR/P.key            a client certificate with CN=P for each
#                                     PRINCIPAL (default: kv-server kv-client)
#                                     PRINCIPAL written P:IP[:IP...] (an
#                                     rrpc-agent's: IP its --local address) gets
#                                     those IP SANs and both TLS purposes
#     DIR/ticket.pem  DIR/ticket.pub  the Ed25519 key rrpcd signs tickets with
#                                     (ticket_key; only brokers hold it) and
#                                     its public half
#   The CN of a client certificate is the principal rrpcd's ACL names.
#   An existing CA and ticket key in DIR are reused, so more principals can
#   be added later.
#   Not for production: see docs/broker.md, "Deployment".
set -euo pipefail
if [ $# -lt 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
  # The comment block above, under the name this was run by.
  me=$(basename "$0")
  sed -n '2,/^[^#]/p' "$0" | sed '/^[^#]/d; s/^# \{0,1\}//' |
    sed "1s|^scripts/make-dev-certs.sh|usage: $me|; 1s| *(installed as rrpc-make-dev-certs)||"
  if [ $# -ge 1 ]; then exit 0; else exit 2; fi
fi
DIR=$1
shift
[ $# -gt 0 ] || set -- kv-server kv-client
command -v openssl >/dev/null || { echo "make-dev-certs: the openssl command is missing (apt-get install openssl)" >&2; exit 1; }
mkdir -p "$DIR"
umask 077
cd "$DIR"
DAYS=825

if [ ! -f ca.key ] || [ ! -f ca.crt ]; then
  openssl ecparam -name prime256v1 -genkey -noout -out ca.key
  openssl req -x509 -new -key ca.key -sha256 -days $DAYS -subj "/CN=roce-rpc development CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out ca.crt 2>/dev/null
fi

# issue NAME CN EXTENSIONS
issue() {
  local name=$1 cn=$2 ext=$3
  openssl ecparam -name prime256v1 -genkey -noout -out "$name.key"
  openssl req -new -key "$name.key" -subj "/CN=$cn" -out "$name.csr" 2>/dev/null
  printf '%b' "$ext" > "$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 \
    -days $DAYS -extfile "$name.ext" -out "$name.crt" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}

SANS="DNS:localhost,IP:127.0.0.1,IP:::1${RRPCD_SANS:+,$RRPCD_SANS}"
issue rrpcd rrpcd "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=$SANS\n"
names=()
for arg in "$@"; do
  p=${arg%%:*}
  case "$p" in *[!A-Za-z0-9._-]*|'') echo "make-dev-certs: bad principal name '$p'" >&2; exit 2 ;; esac
  names+=("$p")
  if [ "$p" = "$arg" ]; then
    issue "$p" "$p" "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n"
    continue
  fi
  ips=${arg#*:} san=""
  IFS=: read -r -a list <<< "$ips"
  for ip in "${list[@]}"; do
    case "$ip" in *[!0-9a-fA-F.]*|'') echo "make-dev-certs: '$ip' in '$arg' is not an IPv4 address (this script writes IPv4 SANs only)" >&2; exit 2 ;; esac
    san="$san${san:+,}IP:$ip"
  done
  issue "$p" "$p" "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=$san\n"
done
if [ ! -f ticket.pem ]; then
  openssl genpkey -algorithm ed25519 -out ticket.pem
  openssl pkey -in ticket.pem -pubout -out ticket.pub
fi
chmod 644 ca.crt rrpcd.crt ./*.crt ticket.pub
echo "make-dev-certs: CA, rrpcd and client certificates (${names[*]}) and the ticket key are in $PWD"
