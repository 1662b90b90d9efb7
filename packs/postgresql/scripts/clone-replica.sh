#!/bin/sh
# opsgraph pack postgresql - job clone-replica.
#
# Runs on each replica (scope replica_nodes), as root over SSH.
#   1. A standby of this cluster that is up and in recovery is left alone (idempotent).
#   2. The cluster's configuration: pg_createcluster (if missing) on the port, then
#      listen_addresses and the owner's pg_hba block as on the primary (configuration lives in
#      /etc/postgresql on Debian, so a base backup does not bring it).
#   3. The data directory is replaced by pg_basebackup -R from primary_host as replicator
#      (standby.signal and primary_conninfo written by pg_basebackup; the password reaches it
#      through the environment), and the cluster is started as a standby.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased (secret ones too)
#
# Parameters: postgresql_version, cluster_name, port, listen_addresses, client_cidr, database,
#             owner, primary_host, replication_password (secret)
# Provides:   postgresql.replica
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/pg-lib.sh
. "$OPSGRAPH_LIB/pg-lib.sh"

[ "$(id -u)" -eq 0 ] || fail "must run as root"
db_params
PRIMARY=${OPSGRAPH_PARAM_PRIMARY_HOST:?the primary_host parameter is required}
PGPASSWORD=${OPSGRAPH_PARAM_REPLICATION_PASSWORD:?the replication_password secret parameter is required}
case $PRIMARY in *[!A-Za-z0-9.:-]* | '') fail "primary_host '$PRIMARY' is not a host name or address" ;; esac

CONF=/etc/postgresql/$VERSION/$NAME
DATA=/var/lib/postgresql/$VERSION/$NAME
BIN=/usr/lib/postgresql/$VERSION/bin

in_recovery() {
    [ "$(runuser -u postgres -- psql -X -p "$PORT" -tAc 'select pg_is_in_recovery()' 2>/dev/null)" = t ]
}
if systemctl is-active --quiet "$UNIT" && in_recovery; then
    log "ok: $UNIT is a standby already; left as it is"
    exit 0
fi

if [ ! -f "$CONF/postgresql.conf" ]; then
    pg_createcluster --port "$PORT" --encoding UTF8 "$VERSION" "$NAME" >&2
fi
pg_conftool "$VERSION" "$NAME" set port "$PORT"
pg_include_confd "$CONF"
printf "# managed by opsgraph (pack postgresql, job clone-replica); edits are overwritten\nlisten_addresses = '%s'\npassword_encryption = 'scram-sha-256'\n" "$LISTEN" >"$CONF/conf.d/50-opsgraph.conf"
chown postgres:postgres "$CONF/conf.d/50-opsgraph.conf"
hba=$(mktemp)
trap 'rm -f "$hba"' EXIT
line=$(printf 'host    %-16s %-16s %-20s scram-sha-256' "$DB" "$OWNER" "$CIDR")
hba_with_block "$CONF/pg_hba.conf" managed "$line" >"$hba"
chmod 0640 "$hba"
chown postgres:postgres "$hba"
mv -f "$hba" "$CONF/pg_hba.conf"

if systemctl is-active --quiet "$UNIT"; then
    systemctl stop "$UNIT"
fi
rm -rf "$DATA"
install -d -o postgres -g postgres -m 0700 "$DATA"
export PGPASSWORD
runuser -u postgres -- "$BIN/pg_basebackup" -h "$PRIMARY" -p "$PORT" -U replicator -D "$DATA" \
    -R -X stream -c fast -w ||
    fail "pg_basebackup from $PRIMARY:$PORT as replicator failed (is replica_cidr in the primary's pg_hba.conf, and the password right?)"
unset PGPASSWORD
[ -f "$DATA/standby.signal" ] || fail "pg_basebackup -R wrote no standby.signal"

systemctl enable --quiet postgresql.service "$UNIT"
systemctl start "$UNIT"
pg_wait_ready "the standby does not accept connections on port $PORT"
in_recovery || fail "the cluster started but is not in recovery (not a standby)"
log "ok: $UNIT is a standby of $PRIMARY:$PORT"
