#!/bin/sh
# opsgraph pack lab-database - job labdb-teardown: stop labdb and remove it (rollback; destructive).
#
# Runs on the node of target_nodes. Stops the server (and any other process with a pid file
# under <node>/labdb) and removes <node>/labdb with its data. The node directory stays.
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: fail_job, fail_mode
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node
DB_HOME=$NODE_DIR/labdb

lab_failpoint "labdb-server: server does not shut down (pid file still names a running process)"

lab_stop_all "$DB_HOME"
if lab_proven; then
    rm -rf "$DB_HOME"
fi
log "ok: labdb removed from $NODE"
