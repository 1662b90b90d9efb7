#!/bin/sh
# issue-etcd-ca (executor: local, once): the cluster's certificate authority, on the control host.
# Parameters: cluster_name, cert_days; ca_cert and ca_key (both or neither: the CA of an earlier
# operation, kept instead of issuing one).
# Produces: etcd_ca_cert (PEM), etcd_ca_key (PEM, secret: written with umask 077).
set -eu

name=${OPSGRAPH_PARAM_CLUSTER_NAME:-etcd}
days=${OPSGRAPH_PARAM_CERT_DAYS:-825}
case $name in '' | *[!a-z0-9-]*) echo "cluster_name must match [a-z0-9-]+, got '$name'" >&2; exit 2 ;; esac
case $days in '' | *[!0-9]*) echo "cert_days must be a whole number of days, got '$days'" >&2; exit 2 ;; esac
command -v openssl >/dev/null 2>&1 || { echo "openssl is not installed on the control host (apt-get install openssl)" >&2; exit 1; }
: "${OPSGRAPH_OUT:?OPSGRAPH_OUT is not set: the job declares output artifacts}"

umask 077
# The cluster's CA again (ca_cert and ca_key name the artifacts of the operation that issued it):
# applying create_cluster again keeps the CA its members and clients trust. Both or neither.
given_cert=${OPSGRAPH_PARAM_CA_CERT:-}
given_key=${OPSGRAPH_PARAM_CA_KEY:-}
if [ -n "$given_cert" ] || [ -n "$given_key" ]; then
  if [ -z "$given_cert" ] || [ -z "$given_key" ]; then
    echo "give both ca_cert and ca_key (the CA of the operation that created the cluster), or neither" >&2
    exit 2
  fi
  for missing in "${OPSGRAPH_MISSING_ARTIFACT_ETCD_CA_CERT:-}" "${OPSGRAPH_MISSING_ARTIFACT_ETCD_CA_KEY:-}"; do
    [ -z "$missing" ] || { echo "$missing" >&2; exit 1; }
  done
  cert=${OPSGRAPH_ARTIFACT_ETCD_CA_CERT:?the artifact ca_cert names was not handed to the job}
  key=${OPSGRAPH_ARTIFACT_ETCD_CA_KEY:?the artifact ca_key names was not handed to the job}
  # The key is the certificate's, and the certificate is a CA that signed itself.
  cert_pub=$(openssl x509 -noout -pubkey -in "$cert" 2>/dev/null) || { echo "ca_cert ($given_cert) is not a PEM certificate" >&2; exit 1; }
  key_pub=$(openssl pkey -pubout -in "$key" 2>/dev/null) || { echo "ca_key ($given_key) is not a PEM private key" >&2; exit 1; }
  [ "$cert_pub" = "$key_pub" ] || { echo "ca_key ($given_key) is not the key of ca_cert ($given_cert)" >&2; exit 1; }
  openssl verify -CAfile "$cert" "$cert" >/dev/null 2>&1 \
    || { echo "ca_cert ($given_cert) is not a self-signed CA certificate that is valid now" >&2; exit 1; }
  cp "$key" "$OPSGRAPH_OUT/etcd_ca_key.tmp"
  cp "$cert" "$OPSGRAPH_OUT/etcd_ca_cert.tmp"
  mv "$OPSGRAPH_OUT/etcd_ca_key.tmp" "$OPSGRAPH_OUT/etcd_ca_key"
  mv "$OPSGRAPH_OUT/etcd_ca_cert.tmp" "$OPSGRAPH_OUT/etcd_ca_cert"
  echo "kept the CA of cluster $name from ${given_cert%%/*}"
  exit 0
fi
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 -days "$days" \
  -subj "/CN=$name etcd CA" \
  -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -keyout "$OPSGRAPH_OUT/etcd_ca_key.tmp" -out "$OPSGRAPH_OUT/etcd_ca_cert.tmp" 2>/dev/null
mv "$OPSGRAPH_OUT/etcd_ca_key.tmp" "$OPSGRAPH_OUT/etcd_ca_key"
mv "$OPSGRAPH_OUT/etcd_ca_cert.tmp" "$OPSGRAPH_OUT/etcd_ca_cert"
echo "issued the CA of cluster $name for $days days"
