#!/bin/sh
# opsgraph pack postgresql-local - job verify-postgresql-local: the owner logs in over TCP.
#
# Runs for the lab node of target_nodes. Logs in to 127.0.0.1:PORT as the owner with the
# password (PGPASSWORD, from the environment), checks the user and database, records the
# connection as a [database] section of <node>/postgresql/pg_service.conf (for PGSERVICEFILE)
# and writes the postgresql_endpoint artifact.
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: database, owner, db_password (secret), fail_job, fail_mode
# Provides:   database.postgresql
# Produces:   postgresql_endpoint - HOST, PORT, DATABASE, USER (no password)
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node
# shellcheck source-path=SCRIPTDIR source=pg-lib.sh disable=SC1091
. "$LAB_SCRIPTS/pg-lib.sh"; pg_load

DATABASE=${OPSGRAPH_PARAM_DATABASE:-lab}
OWNER=${OPSGRAPH_PARAM_OWNER:-lab_app}
matches '[a-z_][a-z0-9_]{0,62}' "$DATABASE" || fail "database '$DATABASE' is not a lower-case identifier"
matches '[a-z_][a-z0-9_]{0,62}' "$OWNER" || fail "owner '$OWNER' is not a lower-case identifier"
PORT=$(kv "$PG_ENDPOINT" PORT)
matches '[0-9]{1,5}' "$PORT" || fail "$PG_ENDPOINT has no port: start-postgresql-local has not run"

lab_failpoint "psql: error: connection to server at \"127.0.0.1\", port $PORT failed: FATAL:  password authentication failed for user \"$OWNER\""

got=$(PGPASSWORD=${OPSGRAPH_PARAM_DB_PASSWORD:-} PGCONNECT_TIMEOUT=5 "$PSQL" -X -h 127.0.0.1 -p "$PORT" \
    -U "$OWNER" -d "$DATABASE" -tA -F ' ' -c 'SELECT current_user, current_database()') ||
    fail "cannot log in to $DATABASE on 127.0.0.1:$PORT as $OWNER"
[ "$got" = "$OWNER $DATABASE" ] || fail "logged in as '$got', not '$OWNER $DATABASE'"

if lab_proven; then
    {
        awk -v s="[$DATABASE]" '/^\[/ { skip = ($0 == s) } !skip' "$PG_DIR/pg_service.conf" 2>/dev/null || true
        printf '[%s]\nhost=127.0.0.1\nport=%s\ndbname=%s\nuser=%s\n' "$DATABASE" "$PORT" "$DATABASE" "$OWNER"
    } | write_file "$PG_DIR/pg_service.conf"
fi
{
    printf 'HOST=127.0.0.1\n'
    printf 'PORT=%s\n' "$PORT"
    printf 'DATABASE=%s\n' "$DATABASE"
    printf 'USER=%s\n' "$OWNER"
} | lab_artifact postgresql_endpoint
log "ok: $OWNER@127.0.0.1:$PORT/$DATABASE"
