#!/bin/sh
# opsgraph pack postgresql - job configure-replication-primary.
#
# Runs on the primary (scope target_nodes), as root over SSH; talks to the server as the
# postgres superuser over the local socket.
#   - the role replicator: created if missing, REPLICATION LOGIN and the password set on every
#     run (the secret parameter is the source of truth);
#   - pg_hba.conf: a managed block `host replication replicator <replica_cidr> scram-sha-256`,
#     beside configure-postgresql's block; the server reloads when it changed.
# Debian's PostgreSQL 15 defaults (wal_level replica, max_wal_senders 10) need no restart.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased (secret ones too)
#
# Parameters: postgresql_version, cluster_name, port, replica_cidr,
#             replication_password (secret)
# Provides:   postgresql.replication_source
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/pg-lib.sh
. "$OPSGRAPH_LIB/pg-lib.sh"

[ "$(id -u)" -eq 0 ] || fail "must run as root"
pg_params
CIDR=${OPSGRAPH_PARAM_REPLICA_CIDR:-127.0.0.1/32}
PASSWORD=${OPSGRAPH_PARAM_REPLICATION_PASSWORD:?the replication_password secret parameter is required}
case $CIDR in *[!0-9A-Fa-f.:/]* | '' | */*/*) fail "replica_cidr '$CIDR' is not a CIDR" ;; */*) ;; *) fail "replica_cidr '$CIDR' is not a CIDR" ;; esac
[ "${#PASSWORD}" -ge 12 ] || fail "replication_password is shorter than 12 characters"

OPSGRAPH_PG_REPL_PASSWORD=$PASSWORD
export OPSGRAPH_PG_REPL_PASSWORD
runuser -u postgres -- psql -X -q -v ON_ERROR_STOP=1 --cluster "$VERSION/$NAME" -d postgres <<'SQL'
\getenv repl_password OPSGRAPH_PG_REPL_PASSWORD
SET password_encryption = 'scram-sha-256';
SELECT 'CREATE ROLE replicator REPLICATION LOGIN'
 WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'replicator') \gexec
SELECT format('ALTER ROLE replicator WITH REPLICATION LOGIN NOSUPERUSER PASSWORD %L', :'repl_password') \gexec
SQL
unset OPSGRAPH_PG_REPL_PASSWORD

HBA=/etc/postgresql/$VERSION/$NAME/pg_hba.conf
[ -f "$HBA" ] || fail "cluster $VERSION/$NAME has no $HBA"
new=$(mktemp)
trap 'rm -f "$new"' EXIT
line=$(printf 'host    replication      replicator       %-20s scram-sha-256' "$CIDR")
hba_with_block "$HBA" replication "$line" >"$new"
if cmp -s "$new" "$HBA"; then
    log "pg_hba.conf already lets replicator in from $CIDR"
else
    chmod 0640 "$new"
    chown postgres:postgres "$new"
    mv -f "$new" "$HBA"
    runuser -u postgres -- psql -X -q --cluster "$VERSION/$NAME" -d postgres -c 'select pg_reload_conf()' >/dev/null
    log "pg_hba.conf: replication for replicator from $CIDR; reloaded"
fi
log "ok: replicator may replicate from $CIDR"
