#!/bin/sh
# opsgraph pack postgresql - job repair-postgresql (action repair).
#
# Runs on the database host (scope target_nodes), as root over SSH. Planned by the operations
# policy's `repair` when a verification finds the instance degraded (docs/day2.md): the
# cluster's unit postgresql@<version>-<cluster> is enabled again and started where it stopped
# (a failed unit's state is reset first), then the job waits until the server accepts
# connections. A running server is left alone: nothing is restarted, no configuration or data is
# touched (those are install's and restore's). A cluster that does not exist is not created
# here: that fails, naming install.
#
# Conventions (packs/README.md): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: postgresql_version, cluster_name, port
# Provides:   postgresql.server.running
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/pg-lib.sh
. "$OPSGRAPH_LIB/pg-lib.sh"

[ "$(id -u)" -eq 0 ] || fail "must run as root"
pg_params
command -v pg_lsclusters >/dev/null 2>&1 || fail "pg_lsclusters not found: postgresql-common is not installed (install PostgreSQL first)"
pg_lsclusters --no-header "$VERSION" "$NAME" >/dev/null 2>&1 ||
    fail "cluster $VERSION/$NAME does not exist on this host: repair starts a cluster, install creates one"

systemctl enable --quiet postgresql.service "$UNIT"
if systemctl is-active --quiet "$UNIT"; then
    log "$UNIT already runs"
else
    state=$(systemctl is-active "$UNIT") || log "$UNIT was $state"
    if [ "$state" = failed ]; then
        systemctl reset-failed "$UNIT"
    fi
    systemctl start "$UNIT"
    log "started $UNIT"
fi
pg_wait_ready "PostgreSQL $VERSION/$NAME does not accept connections on port $PORT after it was started"
log "ok: $UNIT accepts connections on port $PORT"
