#!/bin/sh
# opsgraph pack lab-database - job verify-labdb: the database answers its owner.
#
# Runs on the node of target_nodes. Logs in as the owner with the password and runs
# `select 1`, then records the connection (no password) as <node>/labdb/services/<database>.env
# - what clients on the node read - and as the labdb_connection artifact.
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: database, owner, db_password (secret), fail_job, fail_mode
# Provides:   lab.database
# Produces:   labdb_connection - HOST, PORT, DATABASE, USER
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node
DB_HOME=$NODE_DIR/labdb

DATABASE=${OPSGRAPH_PARAM_DATABASE:-appdb}
OWNER=${OPSGRAPH_PARAM_OWNER:-app}
matches '[a-z_][a-z0-9_]{0,62}' "$DATABASE" || fail "database '$DATABASE' is not a lower-case identifier"
matches '[a-z_][a-z0-9_]{0,62}' "$OWNER" || fail "owner '$OWNER' is not a lower-case identifier"
LABDB=$DB_HOME/bin/labdb
[ -x "$LABDB" ] || fail "labdb is not installed on $NODE"

lab_failpoint "labdb: FATAL:  password authentication failed for user \"$OWNER\""

got=$(LABDB_PASSWORD=${OPSGRAPH_PARAM_DB_PASSWORD:-} "$LABDB" -U "$OWNER" -d "$DATABASE" query 'select 1') ||
    fail "cannot run a query in $DATABASE as $OWNER"
[ "$got" = 1 ] || fail "select 1 returned '$got'"
connection() {
    printf 'HOST=127.0.0.1\n'
    printf 'PORT=%s\n' "$(head -n 1 "$DB_HOME/run/labdb.port")"
    printf 'DATABASE=%s\n' "$DATABASE"
    printf 'USER=%s\n' "$OWNER"
}
if lab_proven; then
    mkdir -p "$DB_HOME/services"
    connection | write_file "$DB_HOME/services/$DATABASE.env"
fi
connection | lab_artifact labdb_connection
log "ok: $OWNER@127.0.0.1:$(head -n 1 "$DB_HOME/run/labdb.port")/$DATABASE answers"
