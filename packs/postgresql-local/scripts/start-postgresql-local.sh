#!/bin/sh
# opsgraph pack postgresql-local - job start-postgresql-local: start PostgreSQL on 127.0.0.1.
#
# Runs for the lab node of target_nodes. A running server is kept (its port is recorded).
# Otherwise picks the port - the `port` parameter, or with 0 the first of 15432..15532 where
# pg_isready gets no response (exit 2) and no other lab node's PostgreSQL is recorded - writes
# <node>/postgresql/endpoint.env (HOST, PORT, SOCKET_DIR) and starts the server with
#   pg_ctl -D data -l log/postgresql.log -o "-p PORT -k SOCKDIR -c listen_addresses=127.0.0.1" start
# as the server's OS user, trying the next free port when the chosen one cannot be bound.
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: port, fail_job, fail_mode
# Provides:   postgresql.local.server
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node
# shellcheck source-path=SCRIPTDIR source=pg-lib.sh disable=SC1091
. "$LAB_SCRIPTS/pg-lib.sh"; pg_load

WANT=${OPSGRAPH_PARAM_PORT:-0}
if ! matches '[0-9]{1,5}' "$WANT" || [ "$WANT" -gt 65535 ]; then
    fail "port '$WANT' is not a port number (0: pick one)"
fi
[ -f "$PG_DATA/PG_VERSION" ] || fail "$PG_DATA holds no cluster: init-postgresql-local has not run"

endpoint() {
    {
        printf 'HOST=127.0.0.1\n'
        printf 'PORT=%s\n' "$1"
        printf 'SOCKET_DIR=%s\n' "$PG_SOCK"
    } | write_file "$PG_ENDPOINT"
}

lab_failpoint "$(date -u '+%Y-%m-%d %H:%M:%S.000 UTC') [$$] LOG:  could not bind IPv4 address \"127.0.0.1\": Address already in use" \
    "pg_ctl: could not start server"

if pg_running; then
    PORT=$(pg_running_port)
    log "PostgreSQL already runs on port $PORT"
    endpoint "$PORT"
    exit 0
fi

# Ports recorded by the other lab nodes' PostgreSQL (running or not).
taken=$(for f in "$LAB"/*/postgresql/endpoint.env; do [ "$f" = "$PG_ENDPOINT" ] || kv "$f" PORT; done 2>/dev/null)
free_port() {
    p=$1
    while [ "$p" -le 15532 ]; do
        if ! printf '%s\n' "$taken" | grep -qx "$p" && [ "$(pg_isready_rc "$p")" = 2 ]; then
            echo "$p"
            return 0
        fi
        p=$((p + 1))
    done
    return 1
}
pg_mkdir "$PG_SOCK" 0700
pg_mkdir "$PG_DIR/log" 0755
if [ "$WANT" != 0 ]; then
    [ "$(pg_isready_rc "$WANT")" = 2 ] || fail "port $WANT is in use"
    PORT=$WANT
else
    PORT=$(kv "$PG_ENDPOINT" PORT)
    if [ -z "$PORT" ] || [ "$(pg_isready_rc "$PORT")" != 2 ]; then
        PORT=$(free_port 15432) || fail "no free port in 15432..15532"
    fi
fi
tries=0
while :; do
    endpoint "$PORT"
    if ! lab_proven; then
        break
    fi
    log "starting PostgreSQL $VERSION on 127.0.0.1:$PORT"
    if as_server "$BINDIR/pg_ctl" -D "$PG_DATA" -l "$PG_DIR/log/postgresql.log" -w -t 30 \
        -o "-p $PORT -k $PG_SOCK -c listen_addresses=127.0.0.1" start >/dev/null; then
        break
    fi
    tries=$((tries + 1))
    if [ "$WANT" = 0 ] && [ "$tries" -lt 5 ] && tail -n 20 "$PG_DIR/log/postgresql.log" | grep -q 'could not bind'; then
        PORT=$(free_port $((PORT + 1))) || fail "no free port in 15432..15532"
        continue
    fi
    tail -n 5 "$PG_DIR/log/postgresql.log" >&2 || true
    fail "pg_ctl: could not start server (log: $PG_DIR/log/postgresql.log)"
done
log "ok: PostgreSQL on 127.0.0.1:$PORT"
