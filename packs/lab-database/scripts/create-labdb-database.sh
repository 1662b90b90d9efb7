#!/bin/sh
# opsgraph pack lab-database - job create-labdb-database: the application database and owner.
#
# Runs on the node of target_nodes. Through the running server, creates (or updates) the owner
# with the secret password and the database it owns. The password reaches labdb through the
# environment (LABDB_PASSWORD), never argv. Writes the labdb_credentials artifact.
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: database, owner, db_password (secret), fail_job, fail_mode
# Provides:   lab.database.database
# Produces:   labdb_credentials (secret) - HOST, PORT, DATABASE, USER, PASSWORD
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node
DB_HOME=$NODE_DIR/labdb

DATABASE=${OPSGRAPH_PARAM_DATABASE:-appdb}
OWNER=${OPSGRAPH_PARAM_OWNER:-app}
PASSWORD=${OPSGRAPH_PARAM_DB_PASSWORD:-}
matches '[a-z_][a-z0-9_]{0,62}' "$DATABASE" || fail "database '$DATABASE' is not a lower-case identifier"
matches '[a-z_][a-z0-9_]{0,62}' "$OWNER" || fail "owner '$OWNER' is not a lower-case identifier"
matches '[A-Za-z0-9._~+/=@%^:,!*#-]{12,128}' "$PASSWORD" ||
    fail "db_password must be 12 to 128 characters of letters, digits and ._~+/=@%^:,!*#-"
LABDB=$DB_HOME/bin/labdb
[ -x "$LABDB" ] || fail "labdb is not installed on $NODE: install-labdb has not run"

lab_failpoint "createdb: error: database creation failed: ERROR:  permission denied to create database"

if lab_proven; then
    LABDB_PASSWORD=$PASSWORD "$LABDB" createuser "$OWNER" >/dev/null
    "$LABDB" createdb "$DATABASE" "$OWNER" >/dev/null
    [ "$(LABDB_PASSWORD=$PASSWORD "$LABDB" -U "$OWNER" -d "$DATABASE" query 'select current_database()')" = "$DATABASE" ] ||
        fail "cannot log in to $DATABASE as $OWNER"
fi
{
    printf 'HOST=127.0.0.1\n'
    printf 'PORT=%s\n' "$(kv "$DB_HOME/data/labdb.conf" PORT)"
    printf 'DATABASE=%s\n' "$DATABASE"
    printf 'USER=%s\n' "$OWNER"
    printf 'PASSWORD=%s\n' "$PASSWORD"
} | lab_artifact labdb_credentials
log "ok: database $DATABASE owned by $OWNER"
