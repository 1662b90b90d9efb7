#!/bin/sh
# verify-etcd-cluster (executor: ssh, as root, one instance per member, after every member was
# started): waits up to 2 minutes for this member's unit to be active, then prints the cluster's
# health and member list as etcdctl sees them over TLS. The evidence decides.
# Parameters: member_addresses. Provides: kv.etcd.verified.
set -eu

i=0
until [ "$(systemctl is-active etcd || true)" = active ]; do
  i=$((i + 1))
  if [ "$i" -gt 60 ]; then
    echo "etcd.service is not active after 2 minutes; its last log lines:" >&2
    journalctl -u etcd -n 20 --no-pager >&2 || true
    exit 1
  fi
  sleep 2
done
set -- --endpoints=https://127.0.0.1:2379 --cacert=/etc/etcd/pki/ca.crt \
  --cert=/etc/etcd/pki/member.crt --key=/etc/etcd/pki/member.key --command-timeout=5s
etcdctl "$@" endpoint health --cluster
etcdctl "$@" member list
