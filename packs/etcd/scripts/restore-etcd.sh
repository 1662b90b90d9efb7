#!/bin/sh
# restore-etcd-member (executor: ssh, as root, one instance per member; action restore;
# destructive, behind the gate confirm-restore-etcd-member). The snapshot is the artifact
# etcd_snapshot of an earlier backup, named by the parameter snapshot (<operation>/etcd_snapshot);
# its file is in OPSGRAPH_ARTIFACT_ETCD_SNAPSHOT.
#   1. `etcdctl snapshot status` must read it and `etcdctl snapshot restore` (which checks the
#      SHA-256 etcdctl appended when it saved it) must make a data directory of it for this
#      member - a fresh one, <data>.restore-<operation> - with the cluster's token and the initial
#      cluster of member_addresses: otherwise nothing is changed;
#   2. etcd.service is stopped, the member's data directory moved aside to
#      <data>.before-restore-<operation> (kept: a person removes it) and the restored one put in
#      its place; the snapshot's revision is written to
#      /var/lib/opsgraph/etcd/restore/<operation>.revision (the evidence etcd_restored_revision
#      compares the cluster with it);
#   3. etcd is not started here: start-restored-member starts every member once all are
#      restored (a restored member must not meet one of the old cluster).
# Parameters: snapshot (an artifact reference), cluster_name, member_addresses.
# Provides: etcd.restored.
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/etcd-lib.sh
. "$OPSGRAPH_LIB/etcd-lib.sh"

: "${OPSGRAPH_OPERATION_ID:?OPSGRAPH_OPERATION_ID must name the operation}"
[ "$(id -u)" -eq 0 ] || fail "must run as root"
case $OPSGRAPH_OPERATION_ID in *[!a-z0-9-]* | '') fail "operation id '$OPSGRAPH_OPERATION_ID' is not an id" ;; esac
SNAPSHOT=${OPSGRAPH_ARTIFACT_ETCD_SNAPSHOT:-}
[ -n "$SNAPSHOT" ] || fail "no snapshot to restore: ${OPSGRAPH_MISSING_ARTIFACT_ETCD_SNAPSHOT:-the parameter snapshot names no etcd_snapshot artifact}"
this_member members
addr=$(member_address "$member")
grep -qx "ETCD_INITIAL_CLUSTER_TOKEN=$CLUSTER" /etc/default/etcd 2>/dev/null ||
  fail "$member is not a configured member of cluster $CLUSTER (/etc/default/etcd)"

[ -s "$SNAPSHOT" ] || fail "the snapshot file is empty"
status=$(etcdctl snapshot status "$SNAPSHOT" -w json) || fail "etcdctl snapshot status cannot read the snapshot"
revision=$(printf '%s\n' "$status" | sed -n 's/.*"revision":\([0-9]*\).*/\1/p')
[ -n "$revision" ] || fail "etcdctl snapshot status printed no revision: $status"

NEW=$DATA.restore-$OPSGRAPH_OPERATION_ID
OLD=$DATA.before-restore-$OPSGRAPH_OPERATION_ID
rm -rf "$NEW"
etcdctl snapshot restore "$SNAPSHOT" --name "$member" --data-dir "$NEW" \
  --initial-cluster "$(initial_cluster)" --initial-cluster-token "$CLUSTER" \
  --initial-advertise-peer-urls "https://$addr:2380" >/dev/null 2>"$NEW.log" || {
  log "etcdctl snapshot restore failed (nothing was changed):"
  cat "$NEW.log" >&2
  rm -rf "$NEW" "$NEW.log"
  exit 1
}
rm -f "$NEW.log"
chown -R etcd:etcd "$NEW"
chmod 0700 "$NEW"

systemctl stop etcd
if [ -e "$OLD" ]; then
  # A run again: the data directory is this operation's earlier restore.
  rm -rf "$DATA"
elif [ -e "$DATA" ]; then
  mv "$DATA" "$OLD"
fi
mv "$NEW" "$DATA"
install -d -m 0700 /var/lib/opsgraph/etcd/restore
printf '%s\n' "$revision" >"/var/lib/opsgraph/etcd/restore/$OPSGRAPH_OPERATION_ID.revision"
rm -f /var/lib/opsgraph/etcd.restart
log "ok: $member restored from the snapshot at revision $revision; the data it had is in $OLD"
