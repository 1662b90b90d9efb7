#!/bin/sh
# start-etcd-member (executor: ssh, as root, one instance per member): enables etcd.service and
# starts it, or restarts it when configure-etcd-member left /var/lib/opsgraph/etcd.restart.
# It does not wait (--no-block): a new member is ready only once a quorum runs, and the members
# start in parallel; verify-etcd-cluster waits for them. Provides: etcd.member.running.
set -eu

command -v systemctl >/dev/null 2>&1 || { echo "systemctl not found: etcd.service needs systemd" >&2; exit 1; }
systemctl enable etcd
if [ -e /var/lib/opsgraph/etcd.restart ]; then
  systemctl restart --no-block etcd
  rm -f /var/lib/opsgraph/etcd.restart
  echo "restarting etcd with its new configuration"
else
  systemctl start --no-block etcd
  echo "starting etcd"
fi
