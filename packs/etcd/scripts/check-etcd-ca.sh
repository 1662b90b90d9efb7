#!/bin/sh
# check-etcd-ca (executor: ssh, as root, one instance per member; action create_cluster).
# Changes nothing. A member that already holds a CA certificate (/etc/etcd/pki/ca.crt) must hold
# this operation's; otherwise the member's install is refused before it changes anything.
# Applying create_cluster again issues a new CA unless the intent names the cluster's (ca_cert,
# ca_key: the artifacts of the operation that issued it): installing another CA's certificates
# on a member of a running cluster would cut it off from its peers and from every client that
# trusts the old CA the moment etcd reads them again. install-etcd-member records, in
# /etc/etcd/pki/ca.operation, the operation whose CA it installed, so the refusal can say which
# parameters to give.
# Requires: etcd_ca_cert. Runs before install-etcd-member on the same member (after:).
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/etcd-lib.sh
. "$OPSGRAPH_LIB/etcd-lib.sh"

member=${OPSGRAPH_TARGET_NAME:?OPSGRAPH_TARGET_NAME is not set: the job is scoped to members}
[ -z "${OPSGRAPH_MISSING_ARTIFACT_ETCD_CA_CERT:-}" ] || fail "$OPSGRAPH_MISSING_ARTIFACT_ETCD_CA_CERT"
: "${OPSGRAPH_ARTIFACT_ETCD_CA_CERT:?the CA certificate artifact is missing}"
[ -s "$OPSGRAPH_ARTIFACT_ETCD_CA_CERT" ] || fail "the CA certificate artifact is empty"

held=/etc/etcd/pki/ca.crt
if [ ! -e "$held" ]; then
  log "$member holds no CA certificate yet: this operation's will be installed"
  exit 0
fi
if [ ! -f "$held" ] || [ ! -r "$held" ]; then fail "$held exists but is not a readable file"; fi
if cmp -s "$held" "$OPSGRAPH_ARTIFACT_ETCD_CA_CERT"; then
  log "$member holds this operation's CA certificate already"
  exit 0
fi

digest() { sha256sum "$1" | cut -c1-16; }
issuer=$(cat /etc/etcd/pki/ca.operation 2>/dev/null || true)
case $issuer in '' | *[!a-z0-9-]*) issuer= ;; esac
log "ERROR: $member holds another CA certificate ($held, sha256 $(digest "$held")...) than this operation's (sha256 $(digest "$OPSGRAPH_ARTIFACT_ETCD_CA_CERT")...): installing it would cut the member off from its peers and clients"
if [ -n "$issuer" ]; then
  log "to apply create_cluster again, give the cluster's CA in the intent's parameters: ca_cert: $issuer/etcd_ca_cert and ca_key: $issuer/etcd_ca_key"
else
  log "to apply create_cluster again, give the cluster's CA in the intent's parameters: ca_cert: <operation>/etcd_ca_cert and ca_key: <operation>/etcd_ca_key, of the operation that created the cluster (opsgraph describe resource)"
fi
log "to make a new cluster on this host instead, uninstall the old one with purge: true first"
exit 1
