# opsgraph pack postgresql-local - pg-lib.sh: helpers of the PostgreSQL scripts, sourced after
# lab-lib.sh and lab_node (never run on its own).
# shellcheck shell=sh disable=SC2034  # variables set here are read by the scripts that source it
#
# Layout, all under the lab node:
#   <node>/postgresql/server.env     BINDIR, VERSION, PSQL, PG_ISREADY, RUN_AS (find-postgresql)
#   <node>/postgresql/data           the cluster (initdb), owned by the server's OS user
#   <node>/postgresql/run            the Unix socket directory (a short /tmp path when the node's
#                                    path is too long for a socket name)
#   <node>/postgresql/log            postgresql.log
#   <node>/postgresql/endpoint.env   HOST, PORT, SOCKET_DIR of the running server (start-postgresql-local)
#   <node>/postgresql/pg_service.conf  one [database] section per verified database
# The server runs as the job's user; as root (initdb refuses root) as the OS user `postgres`
# through runuser (or su), with the directories it writes owned by that user.

PG_DIR=$NODE_DIR/postgresql
PG_DATA=$PG_DIR/data
PG_ENV=$PG_DIR/server.env
PG_ENDPOINT=$PG_DIR/endpoint.env
PG_SOCK=$PG_DIR/run
# A Unix socket name has at most 107 bytes.
if [ "${#PG_SOCK}" -gt 88 ]; then
    PG_SOCK=/tmp/opsgraph-pg-$(printf '%s' "$PG_DIR" | cksum | cut -d' ' -f1)
fi
# pg_ctl hands -o to a shell: keep the paths plain.
matches '[-A-Za-z0-9._/+@:]+' "$PG_DIR" ||
    fail "the lab node path $PG_DIR has characters pg_ctl's -o cannot take (only letters, digits and ._/+@:-)"

# pg_load: reads server.env (BINDIR, VERSION, PSQL, PG_ISREADY, RUN_AS).
pg_load() {
    [ -f "$PG_ENV" ] || fail "$PG_ENV is missing: find-postgresql has not run on $NODE"
    kvs "$PG_ENV" BINDIR VERSION PSQL PG_ISREADY RUN_AS
    [ -x "$BINDIR/pg_ctl" ] || fail "$BINDIR/pg_ctl is missing: run find-postgresql again"
}

# as_server CMD [ARG...]: runs CMD as the server's OS user (RUN_AS; the job's own user when
# empty), from / (the job's directory may be closed to that user).
as_server() {
    if [ -z "${RUN_AS:-}" ]; then
        "$@"
    elif command -v runuser >/dev/null 2>&1; then
        (cd / && runuser -u "$RUN_AS" -- "$@")
    else
        # shellcheck disable=SC2016 # expanded by the shell su starts
        (cd / && su -s /bin/sh -c 'exec "$0" "$@"' "$RUN_AS" "$@")
    fi
}

# pg_mkdir DIR [MODE]: a directory the server's user owns.
pg_mkdir() {
    mkdir -p "$1"
    if [ -n "${RUN_AS:-}" ]; then chown "$RUN_AS" "$1"; fi
    chmod "${2:-0700}" "$1"
}

# pg_running: the cluster's postmaster runs (pg_ctl status).
pg_running() { as_server "$BINDIR/pg_ctl" status -D "$PG_DATA" >/dev/null 2>&1; }

# pg_running_port: the port of the running postmaster (line 4 of postmaster.pid).
pg_running_port() { sed -n 4p "$PG_DATA/postmaster.pid" 2>/dev/null; }

# pg_isready_rc PORT: pg_isready's exit code for 127.0.0.1:PORT (0 ready, 2 no response).
pg_isready_rc() {
    pir=0
    "$PG_ISREADY" -q -h 127.0.0.1 -p "$1" -t 2 >/dev/null 2>&1 || pir=$?
    echo "$pir"
}
