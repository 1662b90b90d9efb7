#!/bin/sh
# opsgraph pack postgresql - job backup-postgresql (action backup).
#
# Runs on the database host (scope target_nodes), as root over SSH; talks to the server as the
# postgres superuser on the local socket.
#   1. pg_dump --format=custom of the database into a temporary file beside the host's copy;
#   2. pg_restore --list must read it and its header must name the database, else nothing is
#      kept (an empty database's dump lists no entries and is valid);
#   3. the host keeps it as /var/lib/opsgraph/postgresql/backups/<operation>.dump (root, 0600;
#      the evidence postgresql_backup_valid reads it there; old copies are for a person to
#      remove), and it is collected as the artifact postgresql_backup with a manifest.
# Why pg_dump and not pg_basebackup: a backup of one database that restores into a running
# server (pg_restore --clean, no stop, no replacement of the data directory), across minor and
# major versions, and that pg_restore --list can check; pg_basebackup copies the whole cluster,
# restores only by replacing the data directory of a stopped server of the same major, and is
# what clone-replica already uses for replicas.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; safe to run again (each run takes a new dump)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#
# Parameters: postgresql_version, cluster_name, port, database
# Provides:   postgresql.backup
# Produces:   postgresql_backup (secret), postgresql_backup_manifest
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/pg-lib.sh
. "$OPSGRAPH_LIB/pg-lib.sh"

: "${OPSGRAPH_OUT:?OPSGRAPH_OUT must name the directory for produced artifacts}"
: "${OPSGRAPH_OPERATION_ID:?OPSGRAPH_OPERATION_ID must name the operation}"
[ "$(id -u)" -eq 0 ] || fail "must run as root"
pg_params
DB=${OPSGRAPH_PARAM_DATABASE:?the database parameter is required}
case $DB in *[!a-z0-9_]* | '') fail "database '$DB' is not a lowercase identifier" ;; esac
case $OPSGRAPH_OPERATION_ID in *[!a-z0-9-]* | '') fail "operation id '$OPSGRAPH_OPERATION_ID' is not an id" ;; esac

pg_isready -q -p "$PORT" || fail "PostgreSQL $VERSION/$NAME does not accept connections on port $PORT"
DIR=/var/lib/opsgraph/postgresql/backups
install -d -m 0700 "$DIR"
FILE=$DIR/$OPSGRAPH_OPERATION_ID.dump
tmp=$(mktemp "$DIR/.dump.XXXXXX")
trap 'rm -f "$tmp"' EXIT
# The dump is written by this (root) shell: postgres never gets a path to write to.
runuser -u postgres -- pg_dump --cluster "$VERSION/$NAME" --format=custom --dbname "$DB" >"$tmp" ||
    fail "pg_dump of $DB failed (see above)"
[ -s "$tmp" ] || fail "pg_dump wrote nothing"
toc=$(pg_restore --list "$tmp") || fail "pg_restore cannot read the dump"
printf '%s\n' "$toc" | grep -Fqx ";     dbname: $DB" || fail "the dump does not name database $DB in its header"
# An empty database dumps to no entries: a valid backup all the same.
entries=$(printf '%s\n' "$toc" | grep -Ec '^[0-9]+; ') || entries=0
tables=$(printf '%s\n' "$toc" | grep -Ec '^[0-9]+; [0-9]+ [0-9]+ TABLE DATA ') || tables=0
chmod 0600 "$tmp"
mv -f "$tmp" "$FILE"
trap - EXIT

mkdir -p "$OPSGRAPH_OUT"
cp "$FILE" "$OPSGRAPH_OUT/postgresql_backup"
size=$(wc -c <"$FILE" | tr -d ' ')
sum=$(sha256sum "$FILE" | cut -d' ' -f1)
{
    printf 'OPERATION=%s\n' "$OPSGRAPH_OPERATION_ID"
    printf 'CLUSTER=%s/%s\n' "$VERSION" "$NAME"
    printf 'DATABASE=%s\n' "$DB"
    printf 'SERVER_VERSION=%s\n' "$(runuser -u postgres -- psql -X --cluster "$VERSION/$NAME" -d postgres -tAc 'show server_version')"
    printf 'FORMAT=pg_dump custom\n'
    printf 'BYTES=%s\n' "$size"
    printf 'SHA256=%s\n' "$sum"
    printf 'ENTRIES=%s\n' "$entries"
    printf 'TABLES=%s\n' "$tables"
    printf 'HOST_COPY=%s\n' "$FILE"
} >"$OPSGRAPH_OUT/postgresql_backup_manifest"
log "ok: $DB dumped ($size bytes, $tables tables with data, sha256 $sum), kept at $FILE"
