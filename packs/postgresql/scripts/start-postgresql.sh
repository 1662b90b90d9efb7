#!/bin/sh
# opsgraph pack postgresql - job start-postgresql.
#
# Runs on the database host (scope target_nodes), as root over SSH. Enables the cluster's
# systemd unit (postgresql@<version>-<cluster>) for boot, then restarts it if
# configure-postgresql recorded a restart, reloads it if it recorded a reload, or starts
# it if it is down; waits until it accepts connections.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#
# Parameters: postgresql_version, cluster_name, port
# Provides:   postgresql.server.running
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/pg-lib.sh
. "$OPSGRAPH_LIB/pg-lib.sh"

[ "$(id -u)" -eq 0 ] || fail "must run as root"
pg_params

STATE=/var/lib/opsgraph/postgresql
RESTART_FLAG=$STATE/$VERSION-$NAME.restart
RELOAD_FLAG=$STATE/$VERSION-$NAME.reload

START_CONF=/etc/postgresql/$VERSION/$NAME/start.conf
if [ -f "$START_CONF" ] && ! grep -qx 'auto' "$START_CONF"; then
    log "warning: $START_CONF is not 'auto'; the cluster will not start at boot"
fi
systemctl enable --quiet postgresql.service "$UNIT"

if [ -f "$RESTART_FLAG" ]; then
    systemctl restart "$UNIT"
    rm -f "$RESTART_FLAG" "$RELOAD_FLAG"
    log "restarted $UNIT"
elif ! systemctl is-active --quiet "$UNIT"; then
    systemctl start "$UNIT"
    rm -f "$RELOAD_FLAG"
    log "started $UNIT"
elif [ -f "$RELOAD_FLAG" ]; then
    systemctl reload "$UNIT"
    rm -f "$RELOAD_FLAG"
    log "reloaded $UNIT"
fi

pg_wait_ready "PostgreSQL does not accept connections on port $PORT"
log "ok: $UNIT accepts connections on port $PORT"
