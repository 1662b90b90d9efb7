#!/bin/sh
# opsgraph pack postgresql - job ensure-postgresql-cluster.
#
# Runs on the database host (scope target_nodes), as root over SSH. Creates the cluster
# <version>/<cluster_name> with pg_createcluster (UTF-8, the locale, data checksums, the
# port) unless it exists; does not start it. An existing cluster is left untouched (its
# port is configure-postgresql's business; encoding and checksums cannot change).
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#
# Parameters: postgresql_version, cluster_name, port, locale
# Provides:   postgresql.cluster
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/pg-lib.sh
. "$OPSGRAPH_LIB/pg-lib.sh"

[ "$(id -u)" -eq 0 ] || fail "must run as root"
pg_params
LOCALE=${OPSGRAPH_PARAM_LOCALE:-C.UTF-8}
port_ok() { matches '[0-9]{4,5}' "$1" && [ "$1" -ge 1024 ] && [ "$1" -le 65535 ]; }
port_ok "$PORT" || fail "port '$PORT' is not 1024-65535"
matches '[A-Za-z0-9_.@-]+' "$LOCALE" || fail "locale '$LOCALE' is not a locale name"

exists() {
    pg_lsclusters --no-header | awk -v v="$VERSION" -v c="$NAME" '$1 == v && $2 == c { f = 1 } END { exit !f }'
}

if exists; then
    log "cluster $VERSION/$NAME exists; left as it is"
    exit 0
fi

# `locale -a` spells C.UTF-8 as C.utf8.
norm_locale() { printf '%s\n' "$1" | tr '[:upper:]' '[:lower:]' | sed 's/utf-8$/utf8/'; }
locale -a 2>/dev/null | tr '[:upper:]' '[:lower:]' | grep -qxF "$(norm_locale "$LOCALE")" ||
    fail "locale $LOCALE is not installed (locale -a); generate it or choose C.UTF-8"

if [ -n "$(ss -Htln "sport = :$PORT")" ]; then
    fail "port $PORT is already in use on this host"
fi

pg_createcluster --port "$PORT" --encoding UTF8 --locale "$LOCALE" "$VERSION" "$NAME" -- --data-checksums
exists || fail "pg_createcluster reported success but $VERSION/$NAME is not listed"
log "ok: created cluster $VERSION/$NAME on port $PORT ($LOCALE, data checksums)"
