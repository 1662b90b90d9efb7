#!/bin/sh
# verify-etcd-cluster (executor: ssh, as root, one instance per member, after every member was
# started): waits up to 2 minutes for this member's unit to be active, then prints the cluster's
# health and member list as etcdctl sees them over TLS. The evidence decides.
# Parameters: member_addresses. Provides: kv.etcd.verified.
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/etcd-lib.sh
. "$OPSGRAPH_LIB/etcd-lib.sh"

unit_active() { [ "$(systemctl is-active etcd || true)" = active ]; }
wait_etcd "is not active" unit_active
set -- --endpoints=https://127.0.0.1:2379 --cacert=/etc/etcd/pki/ca.crt \
  --cert=/etc/etcd/pki/member.crt --key=/etc/etcd/pki/member.key --command-timeout=5s
etcdctl "$@" endpoint health --cluster
etcdctl "$@" member list
