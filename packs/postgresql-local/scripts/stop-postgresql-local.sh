#!/bin/sh
# opsgraph pack postgresql-local - job stop-postgresql-local: stop and remove (rollback; destructive).
#
# Runs for the lab node of target_nodes. Stops the server (pg_ctl stop -m fast as its OS user;
# SIGINT to the postmaster when pg_ctl is gone) and removes <node>/postgresql with the cluster
# and its socket directory. The node directory stays. Idempotent.
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: fail_job, fail_mode
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node
# shellcheck source-path=SCRIPTDIR source=pg-lib.sh disable=SC1091
. "$LAB_SCRIPTS/pg-lib.sh"

lab_failpoint "pg_ctl: server does not shut down" \
    "HINT:  The \"-m fast\" option immediately disconnects sessions rather than waiting for session-initiated disconnection."

if [ -f "$PG_ENV" ]; then
    pg_load
    if pg_running; then
        log "stopping PostgreSQL (pg_ctl stop -m fast)"
        as_server "$BINDIR/pg_ctl" -D "$PG_DATA" -m fast -w -t 30 stop >/dev/null || true
    fi
fi
lab_stop_all "$PG_DIR"
if lab_proven; then
    rm -rf "$PG_DIR"
    case $PG_SOCK in /tmp/opsgraph-pg-*) rm -rf "$PG_SOCK" ;; esac
fi
log "ok: PostgreSQL removed from $NODE"
