#!/bin/sh
# opsgraph pack postgresql-local - job init-postgresql-local: initdb on the lab node.
#
# Runs for the lab node of target_nodes. Creates the cluster in <node>/postgresql/data with
# initdb (UTF-8, C locale, peer authentication on the socket, scram-sha-256 over TCP) as the
# server's OS user, unless a cluster of the same major version is there (another one is an
# error: a person decides).
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: fail_job, fail_mode
# Provides:   postgresql.local.cluster
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node
# shellcheck source-path=SCRIPTDIR source=pg-lib.sh disable=SC1091
. "$LAB_SCRIPTS/pg-lib.sh"; pg_load

lab_failpoint "initdb: hint: If you want to create a new database system, either remove or empty the directory \"$PG_DATA\" or run initdb with an argument other than \"$PG_DATA\"." \
    "initdb: error: directory \"$PG_DATA\" exists but is not empty"

if [ -f "$PG_DATA/PG_VERSION" ]; then
    have=$(cat "$PG_DATA/PG_VERSION")
    [ "$have" = "$VERSION" ] || fail "$PG_DATA holds a PostgreSQL $have cluster, not $VERSION: remove it (stop-postgresql-local) or set postgresql_version"
    log "cluster $PG_DATA (PostgreSQL $have) exists"
elif lab_proven; then
    if [ -d "$PG_DATA" ] && [ -n "$(ls -A "$PG_DATA" 2>/dev/null)" ]; then
        fail "$PG_DATA is not empty and holds no cluster: remove it (stop-postgresql-local)"
    fi
    pg_mkdir "$PG_DATA" 0700
    pg_mkdir "$PG_DIR/log" 0755
    log "initdb $PG_DATA (PostgreSQL $VERSION${RUN_AS:+, as $RUN_AS})"
    as_server "$BINDIR/initdb" -D "$PG_DATA" --encoding=UTF8 --locale=C --auth-local=peer \
        --auth-host=scram-sha-256 --no-sync >"$PG_DIR/log/initdb.log" 2>&1 || {
        tail -n 5 "$PG_DIR/log/initdb.log" >&2
        fail "initdb failed (log: $PG_DIR/log/initdb.log)"
    }
fi
log "ok: cluster $PG_DATA"
