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
# shellcheck source-path=SCRIPTDIR source=lib/pg-lib.sh
. "$OPSGRAPH_LIB/pg-lib.sh"

pg_params

q() { runuser -u postgres -- psql -X --cluster "$VERSION/$NAME" -d postgres -tAc "$1"; }
i=0
until [ "$(q "select count(*) from pg_stat_replication where state = 'streaming'")" -ge 1 ]; do
    i=$((i + 1))
    [ "$i" -lt 30 ] || fail "no replica streams from this primary (pg_stat_replication: $(q 'select client_addr, state from pg_stat_replication'))"
    sleep 2
done
log "ok: streaming to $(q "select string_agg(client_addr::text || ' ' || state, ', ') from pg_stat_replication")"
