#!/bin/sh
# check-etcd-add / check-etcd-remove (executor: ssh, as root, one instance per member of the
# membership after the change; actions add_member and remove_member). Changes nothing: it
# refuses the change, before any other job runs, unless it is one member at a time and the
# cluster can take it.
#   member_addresses is the membership after the change. On a configured member, the cluster's
#   member list (etcdctl over TLS, this member's certificate) is compared with it:
#   - check-etcd-add: every member listed is in member_addresses and every endpoint is healthy
#     (a new member raises the quorum: a sick cluster could lose it), and exactly one name of
#     member_addresses is not a member yet;
#   - check-etcd-remove: exactly one member is not in member_addresses (the one that leaves),
#     at least one stays, and the healthy endpoints among those that stay are a quorum of the
#     cluster as it is now (floor(n/2)+1: the removal must commit, and what stays must run).
#   The host that joins (check-etcd-add only) has no etcd configuration yet: there it checks
#   that its name is in member_addresses and that it holds no data directory of the cluster.
# Parameters: cluster_name, member_addresses. Provides: etcd.scale.checked.
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/etcd-lib.sh
. "$OPSGRAPH_LIB/etcd-lib.sh"

this_member members
case ${OPSGRAPH_JOB_ID:-} in
  check-etcd-add*) mode=add ;;
  check-etcd-remove*) mode=remove ;;
  *) fail "run as check-etcd-add or check-etcd-remove, not '${OPSGRAPH_JOB_ID:-}'" ;;
esac
member_address "$member" >/dev/null || fail "$member is not in member_addresses (the membership after the change)"

if ! grep -qx "ETCD_INITIAL_CLUSTER_TOKEN=$CLUSTER" /etc/default/etcd 2>/dev/null; then
  [ "$mode" = add ] || fail "$member is not a configured member of cluster $CLUSTER (/etc/default/etcd)"
  [ ! -e "$DATA/member" ] || fail "$DATA/member exists on $member, which is not a configured member: remove it first (a person decides)"
  log "ok: $member is not a member yet; it can join"
  exit 0
fi

live=$(live_members https://127.0.0.1:2379) || fail "cannot read the member list from $member's etcd"
unnamed=$(printf '%s\n' "$live" | awk '$1 == "?" { print $3 }')
[ -z "$unnamed" ] || fail "members whose peer URL is in no entry of member_addresses: $unnamed (a join that failed? remove them first)"
unstarted=$(printf '%s\n' "$live" | awk '$2 != "started" { print $1 }')
[ -z "$unstarted" ] || fail "members that never started: $unstarted (a join that failed? remove them first)"
live_names=$(printf '%s\n' "$live" | awk '{ print $1 }')
wanted=$(member_names)
extra=$(minus "$live_names" "$wanted")
new=$(minus "$wanted" "$live_names")
n=$(printf '%s\n' "$live_names" | wc -l)
quorum=$((n / 2 + 1))
log "the cluster has $n members ($(words "$live_names")); member_addresses names $(words "$wanted")"

if [ "$mode" = add ]; then
  [ -z "$extra" ] || fail "members not in member_addresses: $(words "$extra") (add one member at a time, keeping the others)"
  [ -n "$new" ] || fail "member_addresses names no new member: nothing to add"
  [ "$(printf '%s\n' "$new" | wc -l)" -eq 1 ] || fail "member_addresses names $(words "$new") as new: add one member at a time"
  health=$(etcdctl_tls --endpoints="$(client_endpoints "$new")" endpoint health 2>&1) ||
    fail "the cluster is not healthy; refusing to add a member: $(unhealthy "$health")"
  log "ok: all $n members healthy; $new may join (quorum $quorum -> $(((n + 1) / 2 + 1)))"
else
  [ -z "$new" ] || fail "member_addresses names $(words "$new"), which are not members (remove_member only removes)"
  [ -n "$extra" ] || fail "every member is in member_addresses: nothing to remove"
  [ "$(printf '%s\n' "$extra" | wc -l)" -eq 1 ] || fail "$(words "$extra") would leave: remove one member at a time"
  [ "$n" -gt 1 ] || fail "$extra is the last member: uninstall the cluster instead"
  # The endpoints of the members that stay, each on its own: how many answer healthy.
  healthy=0
  for url in $(client_endpoints "$extra" | tr ',' ' '); do
    if etcdctl_tls --endpoints="$url" endpoint health >/dev/null 2>&1; then
      healthy=$((healthy + 1))
    else
      log "$url is not healthy"
    fi
  done
  [ "$healthy" -ge "$quorum" ] ||
    fail "only $healthy of the members that stay are healthy; removing $extra needs $quorum (a quorum of $n): refusing"
  log "ok: $extra may leave; $healthy healthy members stay (quorum $quorum -> $(((n - 1) / 2 + 1)))"
fi
