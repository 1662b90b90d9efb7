#!/bin/sh
# join-etcd-member (executor: ssh, as root, on the one host of scope joining; action add_member),
# after check-etcd-add passed on every member and install-joining-member installed etcd and the
# new member's certificate here:
#   1. with that certificate (issued from the cluster's CA), over TLS to the other members: every
#      endpoint healthy, then `etcdctl member add <name> --peer-urls=https://<address>:2380`
#      (skipped when the list already has this peer URL: a run again after a failure);
#   2. /etc/default/etcd as configure-etcd-member writes it, with
#      ETCD_INITIAL_CLUSTER_STATE=existing and the initial cluster of member_addresses (this
#      member included);
#   3. etcd.service enabled and started; waits up to 2 minutes for this member to be healthy
#      (the cluster needs it: its quorum grew with the add).
# Parameters: cluster_name, member_addresses (the membership after the add).
# Provides: etcd.member.running, etcd.members.changed.
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/etcd-lib.sh
. "$OPSGRAPH_LIB/etcd-lib.sh"

[ "$(id -u)" -eq 0 ] || fail "must run as root"
this_member joining
addr=$(member_address "$member")
others=$(client_endpoints "$member")
[ -n "$others" ] || fail "member_addresses names no member but $member: there is no cluster to join"
[ -f /etc/etcd/pki/member.key ] || fail "/etc/etcd/pki/member.key is missing: install-joining-member did not run here"

live=$(live_members "$others") || fail "cannot read the member list from $others"
if printf '%s\n' "$live" | awk -v m="$member" '$1 == m { found = 1 } END { exit !found }'; then
  log "$member is in the member list already (peer https://$addr:2380)"
else
  health=$(etcdctl_tls --endpoints="$others" endpoint health 2>&1) ||
    fail "the cluster is not healthy; refusing to add $member: $(unhealthy "$health")"
  [ ! -e "$DATA/member" ] || fail "$DATA/member exists: a data directory of an earlier life; remove it first (a person decides)"
  etcdctl_tls --endpoints="$others" member add "$member" --peer-urls="https://$addr:2380" >/dev/null ||
    fail "etcdctl member add $member failed"
  log "added $member (https://$addr:2380) to the cluster"
fi

write_etcd_config "$member" existing
systemctl enable etcd
if [ -e /var/lib/opsgraph/etcd.restart ]; then
  systemctl restart --no-block etcd
  rm -f /var/lib/opsgraph/etcd.restart
else
  systemctl start --no-block etcd
fi
wait_etcd "is not healthy" etcdctl_tls --endpoints=https://127.0.0.1:2379 endpoint health
log "ok: $member joined the cluster"
