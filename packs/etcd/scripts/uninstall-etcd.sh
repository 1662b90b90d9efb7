#!/bin/sh
# uninstall-etcd-member (executor: ssh, as root, one instance per member; action uninstall;
# destructive, behind the gate confirm-uninstall-etcd-member):
#   1. etcd.service stopped and disabled;
#   2. purge true: the member's data directory, /etc/default/etcd and /etc/etcd (its
#      certificates and key) removed. Otherwise all are kept: installing the cluster again
#      with the same cluster_name finds the member with its data;
#   3. etcd-server and etcd-client removed (apt-get remove).
# Copies of backups under /var/lib/opsgraph/etcd/backups stay either way (the artifacts are in
# the store).
# Parameters: cluster_name, purge. Provides: etcd.removed.
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/etcd-lib.sh
. "$OPSGRAPH_LIB/etcd-lib.sh"

[ "$(id -u)" -eq 0 ] || fail "must run as root"
cluster_name
PURGE=${OPSGRAPH_PARAM_PURGE:-false}
case $PURGE in true | false) ;; *) fail "purge must be true or false, not '$PURGE'" ;; esac
export DEBIAN_FRONTEND=noninteractive

if systemctl is-enabled --quiet etcd 2>/dev/null || systemctl is-active --quiet etcd; then
  systemctl disable --now --quiet etcd
  log "stopped and disabled etcd.service"
fi
if [ "$PURGE" = true ]; then
  rm -rf "$DATA" /etc/default/etcd /etc/etcd /var/lib/opsgraph/etcd.restart
  log "purge: removed $DATA, /etc/default/etcd and /etc/etcd"
fi
remove=""
for pkg in etcd-server etcd-client; do
  if [ "$(dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null || true)" = "install ok installed" ]; then
    remove="$remove $pkg"
  fi
done
if [ -n "$remove" ]; then
  # shellcheck disable=SC2086 # two package names, from the loop above
  apt-get -q -o DPkg::Lock::Timeout=600 remove -y $remove
  log "removed$remove"
fi
[ ! -e /usr/bin/etcd ] || fail "/usr/bin/etcd is still there after the removal"
if [ "$PURGE" = true ]; then
  log "ok: etcd removed; its data and configuration are gone (purge)"
else
  log "ok: etcd removed; its data is kept in $DATA and its configuration in /etc/default/etcd and /etc/etcd"
fi
