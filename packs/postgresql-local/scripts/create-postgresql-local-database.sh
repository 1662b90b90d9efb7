#!/bin/sh
# opsgraph pack postgresql-local - job create-postgresql-local-database: database and owner.
#
# Runs for the lab node of target_nodes. As the server's superuser over the Unix socket (peer
# authentication), creates the owner role (or sets its password again) and the database it
# owns, and revokes CONNECT from PUBLIC. The SQL, password included, goes to psql on stdin -
# never argv - with statement logging off for the session.
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: database, owner, db_password (secret), fail_job, fail_mode
# Provides:   postgresql.local.database
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node
# shellcheck source-path=SCRIPTDIR source=pg-lib.sh disable=SC1091
. "$LAB_SCRIPTS/pg-lib.sh"; pg_load

DATABASE=${OPSGRAPH_PARAM_DATABASE:-lab}
OWNER=${OPSGRAPH_PARAM_OWNER:-lab_app}
PASSWORD=${OPSGRAPH_PARAM_DB_PASSWORD:-}
matches '[a-z_][a-z0-9_]{0,62}' "$DATABASE" || fail "database '$DATABASE' is not a lower-case identifier"
matches '[a-z_][a-z0-9_]{0,62}' "$OWNER" || fail "owner '$OWNER' is not a lower-case identifier"
case $OWNER in pg_* | postgres) fail "owner '$OWNER' is reserved" ;; esac
# No quote or backslash: the password sits in a SQL string literal.
matches '[A-Za-z0-9._~+/=@%^:,!*#-]{12,128}' "$PASSWORD" ||
    fail "db_password must be 12 to 128 characters of letters, digits and ._~+/=@%^:,!*#-"
PORT=$(kv "$PG_ENDPOINT" PORT)
if [ -z "$PORT" ] || ! pg_running; then
    fail "PostgreSQL is not running on $NODE: start-postgresql-local has not run"
fi

lab_failpoint "psql:<stdin>:4: ERROR:  permission denied to create role"

if lab_proven; then
    as_server "$PSQL" -X -q -v ON_ERROR_STOP=1 -h "$PG_SOCK" -p "$PORT" -d postgres >/dev/null <<SQL
SET log_statement = 'none';
SET log_min_error_statement = 'panic';
SELECT format('CREATE ROLE %I LOGIN', '$OWNER') WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$OWNER')\gexec
ALTER ROLE "$OWNER" WITH LOGIN PASSWORD '$PASSWORD';
SELECT format('CREATE DATABASE %I OWNER %I', '$DATABASE', '$OWNER') WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '$DATABASE')\gexec
REVOKE CONNECT ON DATABASE "$DATABASE" FROM PUBLIC;
GRANT CONNECT ON DATABASE "$DATABASE" TO "$OWNER";
SQL
    owner_now=$(as_server "$PSQL" -X -h "$PG_SOCK" -p "$PORT" -d postgres -tAc \
        "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = '$DATABASE'")
    [ "$owner_now" = "$OWNER" ] || fail "database $DATABASE exists but is owned by '$owner_now', not $OWNER"
fi
log "ok: database $DATABASE owned by $OWNER"
