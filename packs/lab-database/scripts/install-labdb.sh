#!/bin/sh
# opsgraph pack lab-database - job install-labdb: install the labdb "binaries" on a lab node.
#
# Runs on the node of target_nodes. Copies the labdb client and server (two sh scripts) to
# <node>/labdb/bin. Idempotent: files are replaced only when they differ.
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: fail_job, fail_mode
# Provides:   lab.database.binaries
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node
DB_HOME=$NODE_DIR/labdb

lab_failpoint "E: Unable to locate package labdb-server-1.0"

mkdir -p "$NODE_DIR" "$DB_HOME/bin"
write_file "$DB_HOME/bin/labdb-server" 0755 <"$LAB_SCRIPTS/labdb-server.sh"
if lab_proven; then
    write_file "$DB_HOME/bin/labdb" 0755 <"$LAB_SCRIPTS/labdb.sh"
fi
log "ok: labdb installed in $DB_HOME/bin"
