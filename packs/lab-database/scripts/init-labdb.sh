#!/bin/sh
# opsgraph pack lab-database - job init-labdb: create the labdb data directory.
#
# Runs on the node of target_nodes. Creates <node>/labdb/data (LABDB_VERSION, labdb.conf with
# the port, databases/, users/). The port: the `port` parameter, or with 0 a free-ish number
# derived from the node's name (20000-29999); a data directory made before keeps its port
# unless `port` names another one. Idempotent.
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: port, fail_job, fail_mode
# Provides:   lab.database.datadir
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node
DB_HOME=$NODE_DIR/labdb

PORT=${OPSGRAPH_PARAM_PORT:-0}
if ! matches '[0-9]{1,5}' "$PORT" || [ "$PORT" -gt 65535 ]; then
    fail "port '$PORT' is not a port number (0: pick one)"
fi
[ -x "$DB_HOME/bin/labdb-server" ] || fail "labdb is not installed on $NODE: install-labdb has not run"

lab_failpoint "initdb: error: could not create directory \"$DB_HOME/data\": No space left on device"

DATA=$DB_HOME/data
if [ "$PORT" = 0 ]; then
    PORT=$(kv "$DATA/labdb.conf" PORT)
    if [ -z "$PORT" ]; then
        sum=$(printf '%s' "$NODE" | cksum | cut -d' ' -f1)
        PORT=$((20000 + sum % 10000))
    fi
fi
mkdir -p "$DATA/databases" "$DATA/users"
chmod 0700 "$DATA"
printf 'PORT=%s\n' "$PORT" | write_file "$DATA/labdb.conf"
if lab_proven; then
    [ -f "$DATA/LABDB_VERSION" ] || echo 1 >"$DATA/LABDB_VERSION"
fi
log "ok: data directory $DATA, port $PORT"
