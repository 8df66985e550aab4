#!/usr/bin/env bash
# Makes a certificate authority and CA-signed certificates for a test cluster of actorpipe nodes and
# coordinators (mutual TLS, docs/cluster.md):
#   scripts/make_test_certs.sh DIR [NAME...]      (NAMEs default to: coordinator node)
# writes DIR/ca.pem (the CA's certificate: pass it as --tls-ca everywhere), DIR/ca.key (keep it private),
# and for each NAME DIR/NAME.pem and DIR/NAME.key (--tls-cert, --tls-key). An existing DIR/ca.pem is reused, so
# certificates made later for new machines join the same cluster. Keys are unencrypted EC P-256, readable by their
# owner only; certificates are X.509 v3 signed with SHA-256, each NAME's usable as TLS server and client with NAME
# as subjectAltName (an IPv4 address as IP:, else DNS:), as `actorpipe certs` makes them (Note [cluster
# certificates] in network/certificates.hpp); they last 30 days: for tests and trials, not production.
set -euo pipefail
if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  echo "usage: $0 DIR [NAME...]" >&2
  exit 2
fi
dir=$1
shift
names=("$@")
[ ${#names[@]} -eq 0 ] && names=(coordinator node)
command -v openssl >/dev/null || { echo "$0: needs the openssl command (Debian package openssl)" >&2; exit 1; }
mkdir -p "$dir"
cd "$dir"
umask 077
if [ ! -f ca.pem ] || [ ! -f ca.key ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
    -subj "/CN=actorpipe test CA $(date +%s)-$$" -keyout ca.key -out ca.pem 2>/dev/null
fi
for name in "${names[@]}"; do
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$name" \
    -keyout "$name.key" -out "$name.csr" 2>/dev/null
  if [[ $name =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]]; then alt="IP:$name"; else alt="DNS:$name"; fi
  printf '%s\n' "basicConstraints = critical, CA:FALSE" "keyUsage = critical, digitalSignature, keyEncipherment" \
    "extendedKeyUsage = serverAuth, clientAuth" "subjectAltName = $alt" > "$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 -sha256 -extfile "$name.ext" \
    -out "$name.pem" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
done
chmod 644 ca.pem ./*.pem
echo "certificates in $dir: ca.pem, ${names[*]/%/.pem} (keys: .key)"
