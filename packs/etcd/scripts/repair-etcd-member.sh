#!/bin/sh
# repair-etcd-member (executor: ssh, as root, one instance per member; the `repair` action):
# a member whose etcd.service stopped is started again and enabled; a running one is left alone.
# It does not restart a running member (that would cost the cluster a member for nothing), nor
# change its configuration or certificates: those are create_cluster's. Provides:
# etcd.member.running.
set -eu

command -v systemctl >/dev/null 2>&1 || { echo "systemctl not found: etcd.service needs systemd" >&2; exit 1; }
[ -f /etc/default/etcd ] || { echo "/etc/default/etcd is missing: this host is not a configured member (create the cluster)" >&2; exit 1; }
systemctl enable etcd
if systemctl is-active --quiet etcd; then
  echo "etcd already runs"
else
  systemctl start --no-block etcd
  echo "starting etcd (it was $(systemctl is-active etcd || true))"
fi
