#!/bin/sh
# opsgraph pack lab-database - job start-labdb: start the labdb server.
#
# Runs on the node of target_nodes. Starts <node>/labdb/bin/labdb-server in a session of its
# own (pid in <node>/labdb/run/labdb-server.pid, a heartbeat every second, the port in
# run/labdb.port); a running server is kept, unless its port is not the configured one (then it
# is restarted). Waits until `labdb ping` answers.
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: fail_job, fail_mode
# Provides:   lab.database.server
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node
DB_HOME=$NODE_DIR/labdb

[ -f "$DB_HOME/data/LABDB_VERSION" ] || fail "$DB_HOME/data is not a labdb data directory: init-labdb has not run"
PORT=$(kv "$DB_HOME/data/labdb.conf" PORT)

lab_failpoint "labdb-server: LOG:  could not bind IPv4 address \"127.0.0.1\": Address already in use" \
    "labdb-server: FATAL:  could not create any TCP/IP sockets"

if lab_alive labdb-server "$DB_HOME" && [ "$(head -n 1 "$DB_HOME/run/labdb.port" 2>/dev/null)" != "$PORT" ]; then
    log "the server runs on another port: restarting it on $PORT"
    lab_stop labdb-server "$DB_HOME"
fi
if lab_proven; then
    lab_start labdb-server "$DB_HOME" sh "$DB_HOME/bin/labdb-server" "$DB_HOME"
    "$DB_HOME/bin/labdb" ping >/dev/null || fail "the server does not answer"
fi
log "ok: labdb-server on port $PORT"
