#!/bin/sh
# opsgraph pack postgresql - job restore-postgresql (action restore; destructive).
#
# Runs on the database host (scope target_nodes), as root over SSH, behind the gate
# confirm-restore-postgresql. The backup is the artifact postgresql_backup of an earlier
# operation, named by the parameter backup (<operation>/postgresql_backup); its file is in
# OPSGRAPH_ARTIFACT_POSTGRESQL_BACKUP.
#   1. The file must be a pg_dump custom archive holding table data, and the database must
#      exist: otherwise nothing is changed.
#   2. The row count of every table in the backup ("<count> <table>" lines) is written to
#      /var/lib/opsgraph/postgresql/restore/<operation>.expected (the evidence
#      postgresql_restored_rows compares the database with it).
#   3. pg_restore --clean --if-exists --single-transaction --exit-on-error into the database
#      as postgres, reading the archive on stdin: the backup's objects are dropped and created
#      again with its rows, all or nothing; objects the backup does not hold are left alone.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; safe to run again (the restore is repeated whole)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased
#
# Parameters: backup (an artifact reference), postgresql_version, cluster_name, port, database
# Provides:   postgresql.restored
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/pg-lib.sh
. "$OPSGRAPH_LIB/pg-lib.sh"

: "${OPSGRAPH_OPERATION_ID:?OPSGRAPH_OPERATION_ID must name the operation}"
[ "$(id -u)" -eq 0 ] || fail "must run as root"
DUMP=${OPSGRAPH_ARTIFACT_POSTGRESQL_BACKUP:-}
[ -n "$DUMP" ] || fail "no backup to restore: ${OPSGRAPH_MISSING_ARTIFACT_POSTGRESQL_BACKUP:-the parameter backup names no postgresql_backup artifact}"
pg_params
DB=${OPSGRAPH_PARAM_DATABASE:?the database parameter is required}
case $DB in *[!a-z0-9_]* | '') fail "database '$DB' is not a lowercase identifier" ;; esac
case $OPSGRAPH_OPERATION_ID in *[!a-z0-9-]* | '') fail "operation id '$OPSGRAPH_OPERATION_ID' is not an id" ;; esac

[ -s "$DUMP" ] || fail "the backup file is empty"
pg_restore --list "$DUMP" >/dev/null || fail "the backup is not an archive pg_restore reads (pg_dump --format=custom)"
pg_isready -q -p "$PORT" || fail "PostgreSQL $VERSION/$NAME does not accept connections on port $PORT"
q() { runuser -u postgres -- psql -X --cluster "$VERSION/$NAME" -d postgres -tAc "$1"; }
[ "$(q "select count(*) from pg_database where datname = '$DB'")" = 1 ] ||
    fail "database $DB does not exist in $VERSION/$NAME (install it first; restore does not create databases)"

# Row counts from the archive's data (COPY blocks: one line per row, ended by \.).
STATE=/var/lib/opsgraph/postgresql/restore
install -d -m 0700 "$STATE"
EXPECTED=$STATE/$OPSGRAPH_OPERATION_ID.expected
data=$(mktemp "$STATE/.data.XXXXXX")
counts=$(mktemp "$STATE/.expected.XXXXXX")
trap 'rm -f "$data" "$counts"' EXIT
pg_restore --data-only --file=- "$DUMP" >"$data" || fail "pg_restore cannot read the backup's data"
# Each line of the result: the row count, then the table as COPY names it (schema-qualified,
# quoted where it needs quotes, so it may hold spaces).
awk '/^COPY .* FROM stdin;$/ && !inside {
         t = $0; sub(/^COPY /, "", t); sub(/ FROM stdin;$/, "", t); sub(/ \(.*\)$/, "", t)
         n = 0; inside = 1; next }
     inside && /^\\\.$/ { print n, t; inside = 0; next }
     inside { n++ }' "$data" >"$counts"
[ -s "$counts" ] || fail "the backup holds no table data: nothing to restore"
chmod 0600 "$counts"
mv -f "$counts" "$EXPECTED"

runuser -u postgres -- pg_restore --cluster "$VERSION/$NAME" --dbname "$DB" --clean --if-exists \
    --single-transaction --exit-on-error <"$DUMP" || fail "pg_restore into $DB failed; the transaction was rolled back"
log "ok: $DB restored: $(awk '{ n = $1; sub(/^[0-9]+ /, ""); printf "%s%s %s rows", sep, $0, n; sep = ", " }' "$EXPECTED")"
