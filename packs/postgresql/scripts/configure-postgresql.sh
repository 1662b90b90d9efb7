#!/bin/sh
# opsgraph pack postgresql - job configure-postgresql.
#
# Runs on the database host (scope target_nodes), as root over SSH.
#   - port: set in postgresql.conf itself with pg_conftool (Debian's pg_lsclusters,
#     pg_ctlcluster and the psql wrapper read it from there);
#   - listen_addresses and password_encryption: conf.d/50-opsgraph.conf;
#   - pg_hba.conf: one managed block (between BEGIN/END markers) letting the owner reach its
#     database from client_cidr with scram-sha-256; the rest of the file is left alone.
# Nothing is restarted here: a restart (port, listen_addresses) or reload (pg_hba) is
# recorded under /var/lib/opsgraph/postgresql/ and done by start-postgresql. When the
# server is running, a pg_hba.conf it would reject is rolled back before anything else.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#
# Parameters: postgresql_version, cluster_name, port, listen_addresses, client_cidr,
#             database, owner
# Provides:   postgresql.configured
# Produces:   postgresql_config_snapshot
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/pg-lib.sh
. "$OPSGRAPH_LIB/pg-lib.sh"

: "${OPSGRAPH_OUT:?OPSGRAPH_OUT must name the directory for produced artifacts}"
[ "$(id -u)" -eq 0 ] || fail "must run as root"
db_params

CONF_DIR=/etc/postgresql/$VERSION/$NAME
DATA_DIR=/var/lib/postgresql/$VERSION/$NAME
[ -f "$CONF_DIR/postgresql.conf" ] || fail "cluster $VERSION/$NAME has no $CONF_DIR/postgresql.conf"
STATE=/var/lib/opsgraph/postgresql
install -d -m 0700 "$STATE"
RESTART_FLAG=$STATE/$VERSION-$NAME.restart
RELOAD_FLAG=$STATE/$VERSION-$NAME.reload

# The port the running server listens on (postmaster.pid line 4), even when postgresql.conf
# already names a new one; nothing when the server is down.
running_port() {
    [ -f "$DATA_DIR/postmaster.pid" ] || return 0
    _p=$(sed -n 4p "$DATA_DIR/postmaster.pid")
    if pg_isready -q -p "$_p"; then printf '%s\n' "$_p"; fi
}

# 1. Port, in postgresql.conf.
current_port=$(pg_conftool -s "$VERSION" "$NAME" show port 2>/dev/null || true)
if [ "$current_port" != "$PORT" ]; then
    pg_conftool "$VERSION" "$NAME" set port "$PORT"
    touch "$RESTART_FLAG"
    log "port $current_port -> $PORT (restart due)"
fi

# 2. listen_addresses and password hashing, in conf.d.
pg_include_confd "$CONF_DIR"
write_file "$CONF_DIR/conf.d/50-opsgraph.conf" 0644 postgres:postgres <<CONF
# managed by opsgraph (pack postgresql, job configure-postgresql); edits are overwritten
listen_addresses = '$LISTEN'
password_encryption = 'scram-sha-256'
CONF
[ "$WROTE" = no ] || touch "$RESTART_FLAG"

# 3. pg_hba.conf: replace the managed block, keep everything else.
HBA=$CONF_DIR/pg_hba.conf
hba_new=$(mktemp)
trap 'rm -f "$hba_new"' EXIT
line=$(printf 'host    %-16s %-16s %-20s scram-sha-256' "$DB" "$OWNER" "$CIDR")
hba_with_block "$HBA" managed "$line" >"$hba_new"
cp -p "$HBA" "$STATE/$VERSION-$NAME.pg_hba.conf.prev"
write_file "$HBA" 0640 postgres:postgres <"$hba_new"
if [ "$WROTE" = yes ]; then
    touch "$RELOAD_FLAG"
    live_port=$(running_port)
    if [ -n "$live_port" ]; then
        bad=$(runuser -u postgres -- psql -X -p "$live_port" -d postgres \
            -tAc 'select count(*) from pg_hba_file_rules where error is not null')
        if [ "$bad" != 0 ]; then
            cp -p "$STATE/$VERSION-$NAME.pg_hba.conf.prev" "$HBA"
            fail "the new pg_hba.conf has $bad invalid line(s); the previous file is restored"
        fi
    fi
fi

# 4. The server must parse the configuration (conf.d included) and see the port.
seen=$(runuser -u postgres -- "/usr/lib/postgresql/$VERSION/bin/postgres" -D "$DATA_DIR" \
    -c "config_file=$CONF_DIR/postgresql.conf" -C port) || fail "postgres rejects the configuration"
[ "$seen" = "$PORT" ] || fail "postgres reads port $seen, not $PORT (another setting overrides it)"

mkdir -p "$OPSGRAPH_OUT"
{
    printf '### %s\n' "$CONF_DIR/conf.d/50-opsgraph.conf"
    cat "$CONF_DIR/conf.d/50-opsgraph.conf"
    printf '### port (postgresql.conf) = %s\n' "$PORT"
    printf '### %s\n' "$HBA"
    grep -v '^[[:space:]]*$' "$HBA"
} >"$OPSGRAPH_OUT/postgresql_config_snapshot"
log "ok: port $PORT, listen_addresses '$LISTEN', $OWNER@$DB from $CIDR$([ -f "$RESTART_FLAG" ] && echo ' (restart due)')"
