#!/bin/sh
# remove-etcd-member (executor: ssh, as root, on the one host of scope leaving; action
# remove_member; destructive), after check-etcd-remove passed on every member that stays:
#   1. `etcdctl member remove <id>` of this member, through the members that stay (the
#      endpoints of member_addresses, which no longer names it); skipped when it is not listed
#      any more (a run again);
#   2. etcd.service stopped and disabled;
#   3. its data directory, /etc/default/etcd and its certificate and key removed (a removed
#      member's key would still be a client certificate of the cluster). Packages stay.
# Parameters: cluster_name, member_addresses (the membership after the removal).
# Provides: etcd.member.removed, etcd.members.changed.
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/etcd-lib.sh
. "$OPSGRAPH_LIB/etcd-lib.sh"

[ "$(id -u)" -eq 0 ] || fail "must run as root"
this_member leaving
if member_address "$member" >/dev/null 2>&1; then
  fail "$member is still in member_addresses: give the membership without it"
fi
stay=$(client_endpoints "")

if [ -f /etc/etcd/pki/member.key ]; then
  live=$(etcdctl_tls --endpoints="$stay" member list) || fail "cannot read the member list from $stay"
  id=$(printf '%s\n' "$live" | awk -F', ' -v m="$member" '$3 == m { print $1 }')
  if [ -n "$id" ]; then
    etcdctl_tls --endpoints="$stay" member remove "$id" >/dev/null || fail "etcdctl member remove $id ($member) failed"
    log "removed $member ($id) from the cluster"
  else
    log "$member is not in the member list (removed already)"
  fi
else
  log "no certificate here: $member was removed already"
fi

if systemctl is-enabled --quiet etcd 2>/dev/null || systemctl is-active --quiet etcd; then
  systemctl disable --now --quiet etcd
  log "stopped and disabled etcd.service"
fi
rm -rf "$DATA" /etc/default/etcd /var/lib/opsgraph/etcd.restart /etc/etcd/pki/member.key /etc/etcd/pki/member.crt
log "ok: $member left the cluster; its data directory $DATA, configuration and key are gone"
