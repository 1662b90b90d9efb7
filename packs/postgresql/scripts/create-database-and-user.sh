#!/bin/sh
# opsgraph pack postgresql - job create-database-and-user.
#
# Runs on the database host (scope target_nodes), as root over SSH; talks to the server as
# the postgres superuser over the local socket (peer authentication).
#   - the owner role: created if missing, LOGIN and the password set on every run (so the
#     secret parameter is the source of truth, and rotating it is a re-run);
#   - the database: created if missing (UTF-8, template0) and owned by the role;
#   - CONNECT/TEMPORARY revoked from PUBLIC and granted to the owner.
# The password travels in the environment and psql's \getenv, never on a command line; the
# statements are built with format(%I, %L), so names and password are quoted by the server.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased (secret ones too)
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#
# Parameters: postgresql_version, cluster_name, port, listen_addresses, database, owner,
#             db_password (secret)
# Provides:   postgresql.database
# Produces:   postgresql_credentials (secret)
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/pg-lib.sh
. "$OPSGRAPH_LIB/pg-lib.sh"

: "${OPSGRAPH_OUT:?OPSGRAPH_OUT must name the directory for produced artifacts}"
[ "$(id -u)" -eq 0 ] || fail "must run as root"
db_params
PASSWORD=${OPSGRAPH_PARAM_DB_PASSWORD:?the db_password secret parameter is required}

[ "$OWNER" != postgres ] || fail "the owner must not be the postgres superuser"
case $PASSWORD in *"$NL"*) fail "db_password must be one line" ;; esac
[ "${#PASSWORD}" -ge 12 ] || fail "db_password is shorter than 12 characters"

OPSGRAPH_PG_DB=$DB
OPSGRAPH_PG_OWNER=$OWNER
OPSGRAPH_PG_PASSWORD=$PASSWORD
export OPSGRAPH_PG_DB OPSGRAPH_PG_OWNER OPSGRAPH_PG_PASSWORD

# runuser without --login keeps the environment, which carries the values to \getenv.
runuser -u postgres -- psql -X -q -v ON_ERROR_STOP=1 --cluster "$VERSION/$NAME" -d postgres <<'SQL'
\getenv db_name OPSGRAPH_PG_DB
\getenv owner_name OPSGRAPH_PG_OWNER
\getenv owner_password OPSGRAPH_PG_PASSWORD
SET password_encryption = 'scram-sha-256';
SELECT format('CREATE ROLE %I LOGIN', :'owner_name')
 WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = :'owner_name') \gexec
SELECT format('ALTER ROLE %I WITH LOGIN NOSUPERUSER PASSWORD %L', :'owner_name', :'owner_password') \gexec
SELECT format('CREATE DATABASE %I OWNER %I ENCODING %L TEMPLATE template0', :'db_name', :'owner_name', 'UTF8')
 WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_database WHERE datname = :'db_name') \gexec
SELECT format('ALTER DATABASE %I OWNER TO %I', :'db_name', :'owner_name') \gexec
SELECT format('REVOKE CONNECT, TEMPORARY ON DATABASE %I FROM PUBLIC', :'db_name') \gexec
SELECT format('GRANT CONNECT, TEMPORARY ON DATABASE %I TO %I', :'db_name', :'owner_name') \gexec
SQL
unset OPSGRAPH_PG_PASSWORD

# The address clients use: loopback when the server listens there, else its first address.
case ",$(printf '%s' "$LISTEN" | tr -d ' ')," in
    *,\*,* | *,0.0.0.0,*) HOST=$(ip -4 route get 1.1.1.1 2>/dev/null | awk '{ for (i = 1; i < NF; i++) if ($i == "src") { print $(i + 1); exit } }') ;;
    *) HOST=$(printf '%s' "$LISTEN" | cut -d, -f1 | tr -d ' ') ;;
esac
[ -n "$HOST" ] || HOST=127.0.0.1

mkdir -p "$OPSGRAPH_OUT"
umask 077
{
    printf 'PGHOST=%s\n' "$HOST"
    printf 'PGPORT=%s\n' "$PORT"
    printf 'PGDATABASE=%s\n' "$DB"
    printf 'PGUSER=%s\n' "$OWNER"
    printf 'PGPASSWORD=%s\n' "$PASSWORD"
} >"$OPSGRAPH_OUT/postgresql_credentials.tmp"
mv -f "$OPSGRAPH_OUT/postgresql_credentials.tmp" "$OPSGRAPH_OUT/postgresql_credentials"
log "ok: database $DB owned by $OWNER"
