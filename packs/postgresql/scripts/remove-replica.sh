#!/bin/sh
# opsgraph pack postgresql - job remove-replica (action remove_replica; destructive).
#
# Runs on each replica to remove (scope replica_nodes), as root over SSH, behind the gate
# confirm-remove-replica.
#   1. Refuses, changing nothing, when the cluster runs and is not in recovery (a primary).
#   2. Stops and disables postgresql@<version>-<cluster>.
#   3. pg_dropcluster, then what it leaves (files opsgraph wrote in the configuration
#      directory): its configuration and data directory (a copy of the primary's) go.
#      The packages stay installed.
# The primary is not touched: a standby without a replication slot leaves nothing behind there.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#
# Parameters: postgresql_version, cluster_name, port
# Provides:   postgresql.replica_removed
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/pg-lib.sh
. "$OPSGRAPH_LIB/pg-lib.sh"

[ "$(id -u)" -eq 0 ] || fail "must run as root"
pg_params

if pg_isready -q -p "$PORT" 2>/dev/null; then
    recovery=$(runuser -u postgres -- psql -X --cluster "$VERSION/$NAME" -d postgres -tAc 'select pg_is_in_recovery()') ||
        fail "cannot ask $VERSION/$NAME whether it is a standby"
    [ "$recovery" = t ] || fail "$VERSION/$NAME on this host is not in recovery: a primary, not a replica; nothing removed"
fi
if systemctl is-enabled --quiet "$UNIT" 2>/dev/null || systemctl is-active --quiet "$UNIT"; then
    systemctl disable --now --quiet "$UNIT"
    log "stopped and disabled $UNIT"
fi
if pg_lsclusters --no-header "$VERSION" "$NAME" >/dev/null 2>&1; then
    pg_dropcluster --stop "$VERSION" "$NAME"
    log "dropped cluster $VERSION/$NAME"
fi
# pg_dropcluster leaves files it did not make (clone-replica's conf.d/50-opsgraph.conf).
rm -rf "/etc/postgresql/$VERSION/$NAME" "/var/lib/postgresql/$VERSION/$NAME"
log "ok: the replica $VERSION/$NAME is removed from this host"
