#!/bin/sh
# issue-etcd-ca (executor: local, once): the cluster's certificate authority, on the control host.
# Parameters: cluster_name, cert_days.
# Produces: etcd_ca_cert (PEM), etcd_ca_key (PEM, secret: written with umask 077).
set -eu

name=${OPSGRAPH_PARAM_CLUSTER_NAME:-etcd}
days=${OPSGRAPH_PARAM_CERT_DAYS:-825}
case $name in '' | *[!a-z0-9-]*) echo "cluster_name must match [a-z0-9-]+, got '$name'" >&2; exit 2 ;; esac
case $days in '' | *[!0-9]*) echo "cert_days must be a whole number of days, got '$days'" >&2; exit 2 ;; esac
command -v openssl >/dev/null 2>&1 || { echo "openssl is not installed on the control host (apt-get install openssl)" >&2; exit 1; }
: "${OPSGRAPH_OUT:?OPSGRAPH_OUT is not set: the job declares output artifacts}"

umask 077
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 -days "$days" \
  -subj "/CN=$name etcd CA" \
  -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -keyout "$OPSGRAPH_OUT/etcd_ca_key.tmp" -out "$OPSGRAPH_OUT/etcd_ca_cert.tmp" 2>/dev/null
mv "$OPSGRAPH_OUT/etcd_ca_key.tmp" "$OPSGRAPH_OUT/etcd_ca_key"
mv "$OPSGRAPH_OUT/etcd_ca_cert.tmp" "$OPSGRAPH_OUT/etcd_ca_cert"
echo "issued the CA of cluster $name for $days days"
