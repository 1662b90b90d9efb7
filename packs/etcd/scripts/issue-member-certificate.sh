#!/bin/sh
# issue-member-certificate (executor: local, one instance per member): a member's key and a
# certificate signed by the CA, on the control host (the CA key never reaches a member).
# Parameters: member_addresses, cert_days. Target: OPSGRAPH_TARGET_NAME (the member's name).
# Requires: etcd_ca_cert, etcd_ca_key (secret). Produces: etcd_member_cert, etcd_member_key (secret).
set -eu

# shellcheck source-path=SCRIPTDIR source=lib/etcd-lib.sh
. "$OPSGRAPH_LIB/etcd-lib.sh"

member=${OPSGRAPH_TARGET_NAME:?OPSGRAPH_TARGET_NAME is not set: the job is scoped to members}
days=${OPSGRAPH_PARAM_CERT_DAYS:-825}
case $days in '' | *[!0-9]*) echo "cert_days must be a whole number of days, got '$days'" >&2; exit 2 ;; esac
check_member_addresses
addr=$(member_address "$member")
command -v openssl >/dev/null 2>&1 || { echo "openssl is not installed on the control host (apt-get install openssl)" >&2; exit 1; }
: "${OPSGRAPH_ARTIFACT_ETCD_CA_CERT:?the CA certificate artifact is missing}"
: "${OPSGRAPH_ARTIFACT_ETCD_CA_KEY:?the CA key artifact is missing}"
: "${OPSGRAPH_OUT:?OPSGRAPH_OUT is not set: the job declares output artifacts}"

umask 077
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/ext" <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=DNS:$member,DNS:localhost,IP:$addr,IP:127.0.0.1
EXT
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 -subj "/CN=$member" \
  -keyout "$work/key" -out "$work/csr" 2>/dev/null
serial=$(openssl rand -hex 16)
openssl x509 -req -sha256 -days "$days" -in "$work/csr" -set_serial "0x$serial" \
  -CA "$OPSGRAPH_ARTIFACT_ETCD_CA_CERT" -CAkey "$OPSGRAPH_ARTIFACT_ETCD_CA_KEY" \
  -extfile "$work/ext" -out "$work/cert" 2>/dev/null
openssl verify -CAfile "$OPSGRAPH_ARTIFACT_ETCD_CA_CERT" "$work/cert" >/dev/null
mv "$work/key" "$OPSGRAPH_OUT/etcd_member_key"
mv "$work/cert" "$OPSGRAPH_OUT/etcd_member_cert"
echo "issued the certificate of member $member ($addr) for $days days"
