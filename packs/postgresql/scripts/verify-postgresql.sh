#!/bin/sh
# opsgraph pack postgresql - job verify-postgresql.
#
# Runs on the database host (scope target_nodes), as root over SSH. Read-only:
#   - the server's port, listen_addresses and password_encryption are the intended ones;
#   - the owner logs in to its database over TCP with its password (scram-sha-256), the way
#     an application will (loopback when the server listens there).
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased (secret ones too)
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#
# Parameters: postgresql_version, cluster_name, port, listen_addresses, database, owner,
#             db_password (secret)
# Provides:   database.postgresql
# Produces:   postgresql_connection
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/pg-lib.sh
. "$OPSGRAPH_LIB/pg-lib.sh"

: "${OPSGRAPH_OUT:?OPSGRAPH_OUT must name the directory for produced artifacts}"
db_params
PGPASSWORD=${OPSGRAPH_PARAM_DB_PASSWORD:?the db_password secret parameter is required}
export PGPASSWORD

show() { runuser -u postgres -- psql -X --cluster "$VERSION/$NAME" -d postgres -tAc "SHOW $1"; }
[ "$(show port)" = "$PORT" ] || fail "the server runs on port $(show port), not $PORT"
[ "$(show listen_addresses)" = "$LISTEN" ] || fail "listen_addresses is '$(show listen_addresses)', not '$LISTEN' (restart pending?)"
[ "$(show password_encryption)" = scram-sha-256 ] || fail "password_encryption is not scram-sha-256"

case ",$(printf '%s' "$LISTEN" | tr -d ' ')," in
    *,\*,* | *,0.0.0.0,* | *,localhost,* | *,127.0.0.1,*) HOST=127.0.0.1 ;;
    *) HOST=$(printf '%s' "$LISTEN" | cut -d, -f1 | tr -d ' ') ;;
esac

who=$(psql -X "host=$HOST port=$PORT dbname=$DB user=$OWNER connect_timeout=10" -tAc 'select current_user') ||
    fail "$OWNER cannot log in to $DB at $HOST:$PORT with its password (see pg_hba.conf and the server log)"
[ "$who" = "$OWNER" ] || fail "logged in as '$who', expected '$OWNER'"

mkdir -p "$OPSGRAPH_OUT"
{
    printf 'HOST=%s\n' "$HOST"
    printf 'PORT=%s\n' "$PORT"
    printf 'DATABASE=%s\n' "$DB"
    printf 'OWNER=%s\n' "$OWNER"
    printf 'SERVER_VERSION=%s\n' "$(show server_version)"
    printf 'CLUSTER=%s/%s\n' "$VERSION" "$NAME"
} >"$OPSGRAPH_OUT/postgresql_connection"
log "ok: $OWNER@$HOST:$PORT/$DB"
