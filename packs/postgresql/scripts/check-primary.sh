#!/bin/sh
# opsgraph pack postgresql - job check-primary (action add_replica).
#
# Runs on the primary (scope target_nodes), as root over SSH. Read-only: the running primary
# an add_replica starts from accepts connections, is not in recovery, and has the database.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (read-only)
#
# Parameters: postgresql_version, cluster_name, port, database
# Provides:   postgresql.database
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/pg-lib.sh
. "$OPSGRAPH_LIB/pg-lib.sh"

pg_params
DB=${OPSGRAPH_PARAM_DATABASE:?the database parameter is required}
case $DB in *[!a-z0-9_]* | '') fail "database '$DB' is not a lowercase identifier" ;; esac

pg_isready -q -p "$PORT" || fail "PostgreSQL $VERSION/$NAME does not accept connections on port $PORT (install it first)"
q() { runuser -u postgres -- psql -X --cluster "$VERSION/$NAME" -d postgres -tAc "$1"; }
[ "$(q 'select pg_is_in_recovery()')" = f ] || fail "$VERSION/$NAME is in recovery: a standby, not a primary"
[ "$(q "select count(*) from pg_database where datname = '$DB'")" = 1 ] || fail "database $DB does not exist on the primary"
log "ok: $VERSION/$NAME is a primary on port $PORT with database $DB ($(q 'show server_version'))"
