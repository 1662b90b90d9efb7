#!/bin/sh
# opsgraph pack postgresql - job verify-replication.
#
# Runs on the primary (scope target_nodes), as root over SSH. Read-only: waits (up to 60 s)
# until pg_stat_replication shows at least one streaming replica and prints what it sees.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#
# Parameters: postgresql_version, cluster_name
# Provides:   postgresql.replication
set -eu

log() { printf 'verify-replication[%s]: %s\n' "${OPSGRAPH_TARGET_ID:-$(hostname)}" "$*" >&2; }
fail() { log "ERROR: $*"; exit 1; }

VERSION=${OPSGRAPH_PARAM_POSTGRESQL_VERSION:-15}
NAME=${OPSGRAPH_PARAM_CLUSTER_NAME:-main}
case $VERSION in [0-9][0-9]) ;; *) fail "postgresql_version '$VERSION' is not a major version" ;; esac
case $NAME in *[!a-z0-9_-]* | '') fail "cluster_name '$NAME' is not a cluster name" ;; esac

q() { runuser -u postgres -- psql -X --cluster "$VERSION/$NAME" -d postgres -tAc "$1"; }
i=0
until [ "$(q "select count(*) from pg_stat_replication where state = 'streaming'")" -ge 1 ]; do
    i=$((i + 1))
    [ "$i" -lt 30 ] || fail "no replica streams from this primary (pg_stat_replication: $(q 'select client_addr, state from pg_stat_replication'))"
    sleep 2
done
log "ok: streaming to $(q "select string_agg(client_addr::text || ' ' || state, ', ') from pg_stat_replication")"
