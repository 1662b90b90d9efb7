#!/bin/sh
# opsgraph pack postgresql-local - job find-postgresql: find this machine's PostgreSQL server.
#
# Runs for the lab node of target_nodes. Finds the server binaries: the postgresql_version
# parameter's, or the newest of /usr/lib/postgresql/<ver>/bin (Debian, Ubuntu),
# /usr/pgsql-<ver>/bin (PGDG RPMs), /usr/local/pgsql/bin, /opt/homebrew/opt/postgresql@<ver>/bin,
# then pg_ctl on PATH. Needs postgres, initdb, pg_ctl, psql and pg_isready. Decides the server's
# OS user: the job's own, or `postgres` when the job runs as root (initdb refuses root).
# Records all that in <node>/postgresql/server.env. Installs nothing.
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: postgresql_version (optional), fail_job, fail_mode
# Provides:   postgresql.local.binaries
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node
# shellcheck source-path=SCRIPTDIR source=pg-lib.sh disable=SC1091
. "$LAB_SCRIPTS/pg-lib.sh"

WANT=${OPSGRAPH_PARAM_POSTGRESQL_VERSION:-}
[ -z "$WANT" ] || matches '[0-9]{1,2}(\.[0-9]{1,2})?' "$WANT" || fail "postgresql_version '$WANT' is not a major version such as 15"

lab_failpoint "sh: 1: initdb: not found" \
    "find-postgresql[$NODE]: ERROR: no PostgreSQL server binaries (postgres, initdb, pg_ctl) on this machine: install postgresql-${WANT:-15}"

has_server_tools() { for t in postgres initdb pg_ctl; do [ -x "$1/$t" ] || return 1; done; }
# candidates: "VERSION DIR" lines.
candidates() {
    for d in /usr/lib/postgresql/*/bin /usr/pgsql-*/bin /opt/homebrew/opt/postgresql@*/bin /usr/local/opt/postgresql@*/bin; do
        [ -d "$d" ] || continue
        v=$(printf '%s\n' "$d" | sed -n 's,.*/postgresql/\([0-9.]*\)/bin$,\1,p; s,.*/pgsql-\([0-9.]*\)/bin$,\1,p; s,.*/postgresql@\([0-9.]*\)/bin$,\1,p')
        [ -n "$v" ] && printf '%s %s\n' "$v" "$d"
    done
    on_path=$(command -v pg_ctl 2>/dev/null || echo /nonexistent/pg_ctl)
    on_path=$(readlink -f "$on_path" 2>/dev/null || echo "$on_path")
    for d in /usr/local/pgsql/bin "${on_path%/*}"; do
        has_server_tools "$d" || continue
        v=$("$d/postgres" --version 2>/dev/null | sed -n 's/.* \([0-9][0-9]*\)[.0-9]*.*/\1/p' | head -n 1)
        [ -n "$v" ] && printf '%s %s\n' "$v" "$d"
    done
}
BINDIR=
VERSION=
# Newest first; of equal versions the first listed (distribution directories before PATH).
for line in $(candidates | tr ' ' '|' | sort -s -t '|' -k1,1nr); do
    v=${line%%|*}
    d=${line#*|}
    [ -z "$WANT" ] || [ "$v" = "$WANT" ] || continue
    if has_server_tools "$d"; then
        BINDIR=$d
        VERSION=$v
        break
    fi
done
[ -n "$BINDIR" ] || fail "no PostgreSQL server binaries${WANT:+ of version $WANT} (postgres, initdb, pg_ctl) on this machine: install postgresql${WANT:+-$WANT}"
find_tool() {
    if [ -x "$BINDIR/$1" ]; then echo "$BINDIR/$1"; else command -v "$1" || fail "$1 is missing (neither in $BINDIR nor on PATH)"; fi
}
PSQL=$(find_tool psql)
PG_ISREADY=$(find_tool pg_isready)

RUN_AS=
if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || fail "running as root, and there is no OS user postgres to run the server (initdb refuses root)"
    command -v runuser >/dev/null 2>&1 || command -v su >/dev/null 2>&1 || fail "running as root without runuser or su"
    RUN_AS=postgres
fi

mkdir -p "$PG_DIR"
chmod 0755 "$NODE_DIR" "$PG_DIR" 2>/dev/null || true
if [ -n "$RUN_AS" ] && ! as_server test -x "$PG_DIR"; then
    fail "the OS user $RUN_AS cannot reach $PG_DIR: a directory above it is not searchable by others (is the lab under /root?); use a lab directory such as /var/tmp/..."
fi
if lab_proven; then
    {
        printf 'BINDIR=%s\n' "$BINDIR"
        printf 'VERSION=%s\n' "$VERSION"
        printf 'PSQL=%s\n' "$PSQL"
        printf 'PG_ISREADY=%s\n' "$PG_ISREADY"
        printf 'RUN_AS=%s\n' "$RUN_AS"
    } | write_file "$PG_ENV"
fi
log "ok: PostgreSQL $VERSION in $BINDIR${RUN_AS:+, server runs as $RUN_AS}"
