#!/bin/sh
# backup-etcd (executor: ssh, as root, on the one member of scope source; action backup):
#   1. `etcdctl snapshot save` over TLS from this member's endpoint (the whole keyspace, at one
#      revision; etcdctl appends the file's SHA-256, which `snapshot restore` checks) into a
#      temporary file beside the host's copy;
#   2. `etcdctl snapshot status` must read it (revision, keys), else nothing is kept;
#   3. the host keeps it as /var/lib/opsgraph/etcd/backups/<operation>.db (root, 0600) with its
#      SHA-256 in <operation>.db.sha256 (the evidence etcd_snapshot_valid reads both there; old
#      copies are for a person to remove), and it is collected as the artifact etcd_snapshot,
#      with a manifest (etcd_snapshot_manifest).
# Parameters: cluster_name. Provides: etcd.backup.
# Produces: etcd_snapshot (confidential), etcd_snapshot_manifest.
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/etcd-lib.sh
. "$OPSGRAPH_LIB/etcd-lib.sh"

: "${OPSGRAPH_OUT:?OPSGRAPH_OUT must name the directory for produced artifacts}"
: "${OPSGRAPH_OPERATION_ID:?OPSGRAPH_OPERATION_ID must name the operation}"
[ "$(id -u)" -eq 0 ] || fail "must run as root"
case $OPSGRAPH_OPERATION_ID in *[!a-z0-9-]* | '') fail "operation id '$OPSGRAPH_OPERATION_ID' is not an id" ;; esac
cluster_name
grep -qx "ETCD_INITIAL_CLUSTER_TOKEN=$CLUSTER" /etc/default/etcd 2>/dev/null ||
  fail "this host is not a configured member of cluster $CLUSTER (/etc/default/etcd)"

DIR=/var/lib/opsgraph/etcd/backups
install -d -m 0700 "$DIR"
FILE=$DIR/$OPSGRAPH_OPERATION_ID.db
tmp=$(mktemp "$DIR/.snapshot.XXXXXX")
trap 'rm -f "$tmp" "$tmp.part" "$tmp.log"' EXIT
etcdctl_tls --endpoints=https://127.0.0.1:2379 snapshot save "$tmp" >/dev/null 2>"$tmp.log" || {
  log "etcdctl snapshot save failed:"
  cat "$tmp.log" >&2
  rm -f "$tmp.log"
  exit 1
}
rm -f "$tmp.log"
[ -s "$tmp" ] || fail "etcdctl snapshot save wrote nothing"
status=$(etcdctl snapshot status "$tmp" -w json) || fail "etcdctl snapshot status cannot read the snapshot"
revision=$(printf '%s\n' "$status" | sed -n 's/.*"revision":\([0-9]*\).*/\1/p')
keys=$(printf '%s\n' "$status" | sed -n 's/.*"totalKey":\([0-9]*\).*/\1/p')
[ -n "$revision" ] && [ -n "$keys" ] || fail "etcdctl snapshot status printed no revision: $status"
chmod 0600 "$tmp"
mv -f "$tmp" "$FILE"
trap - EXIT
sum=$(sha256sum "$FILE")
sum=${sum%% *}
printf '%s  %s\n' "$sum" "$FILE" >"$FILE.sha256"

mkdir -p "$OPSGRAPH_OUT"
cp "$FILE" "$OPSGRAPH_OUT/etcd_snapshot.tmp"
mv "$OPSGRAPH_OUT/etcd_snapshot.tmp" "$OPSGRAPH_OUT/etcd_snapshot"
size=$(wc -c <"$FILE" | tr -d ' ')
version=$(etcd --version | sed -n 's/^etcd Version: //p')
{
  printf 'OPERATION=%s\n' "$OPSGRAPH_OPERATION_ID"
  printf 'CLUSTER=%s\n' "$CLUSTER"
  printf 'MEMBER=%s\n' "${OPSGRAPH_TARGET_NAME:-$(hostname)}"
  printf 'ETCD_VERSION=%s\n' "$version"
  printf 'REVISION=%s\n' "$revision"
  printf 'TOTAL_KEYS=%s\n' "$keys"
  printf 'BYTES=%s\n' "$size"
  printf 'SHA256=%s\n' "$sum"
  printf 'HOST_COPY=%s\n' "$FILE"
} >"$OPSGRAPH_OUT/etcd_snapshot_manifest"
log "ok: snapshot of $CLUSTER at revision $revision ($keys keys, $size bytes, sha256 $sum), kept at $FILE"
