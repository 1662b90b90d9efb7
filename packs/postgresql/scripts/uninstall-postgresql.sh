#!/bin/sh
# opsgraph pack postgresql - job uninstall-postgresql (action uninstall; destructive).
#
# Runs on the database host (scope target_nodes), as root over SSH, behind the gate
# confirm-uninstall-postgresql.
#   1. Refuses, changing nothing, while another cluster of the same version exists (removing
#      the packages would take its server away too).
#   2. Stops and disables postgresql@<version>-<cluster>.
#   3. purge true: pg_dropcluster removes the cluster's configuration (/etc/postgresql/...) and
#      its data directory. Otherwise both are kept: installing the same version again finds the
#      cluster with its data.
#   4. Removes postgresql-<version> and postgresql-client-<version> (apt-get remove, not purge;
#      postgresql-common stays, other versions may use it).
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased (booleans are true/false)
#
# Parameters: postgresql_version, cluster_name, purge
# Provides:   postgresql.removed
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/pg-lib.sh
. "$OPSGRAPH_LIB/pg-lib.sh"

apt_get() { apt-get -q -o DPkg::Lock::Timeout=600 "$@"; }
installed_version() {
    dpkg-query -W -f='${Status} ${Version}\n' "$1" 2>/dev/null | awk '$3 == "installed" { print $4 }'
}

[ "$(id -u)" -eq 0 ] || fail "must run as root"
pg_params
PURGE=${OPSGRAPH_PARAM_PURGE:-false}
case $PURGE in true | false) ;; *) fail "purge must be true or false, not '$PURGE'" ;; esac
export DEBIAN_FRONTEND=noninteractive

DATA=/var/lib/postgresql/$VERSION/$NAME
if command -v pg_lsclusters >/dev/null; then
    all=$(pg_lsclusters --no-header)
    others=$(printf '%s\n' "$all" | awk -v v="$VERSION" -v c="$NAME" '$1 == v && $2 != c { printf "%s ", $2 }')
    [ -z "$others" ] || fail "other clusters of $VERSION remain ($others): their server would go too; remove them first"
fi

if systemctl is-enabled --quiet "$UNIT" 2>/dev/null || systemctl is-active --quiet "$UNIT"; then
    systemctl disable --now --quiet "$UNIT"
    log "stopped and disabled $UNIT"
fi
if [ "$PURGE" = true ]; then
    if command -v pg_dropcluster >/dev/null && pg_lsclusters --no-header "$VERSION" "$NAME" >/dev/null 2>&1; then
        pg_dropcluster --stop "$VERSION" "$NAME"
        log "purge: dropped cluster $VERSION/$NAME (configuration and data)"
    fi
    # pg_dropcluster leaves files it did not make (configure-postgresql's conf.d file).
    rm -rf "/etc/postgresql/$VERSION/$NAME" "$DATA"
fi

remove=""
for pkg in "postgresql-$VERSION" "postgresql-client-$VERSION"; do
    [ -z "$(installed_version "$pkg")" ] || remove="$remove $pkg"
done
if [ -n "$remove" ]; then
    # shellcheck disable=SC2086 # package names built above
    apt_get remove -y $remove
    log "removed$remove"
fi
[ ! -e "/usr/lib/postgresql/$VERSION/bin/postgres" ] || fail "the postgres $VERSION binary is still there after the removal"
if [ "$PURGE" = true ]; then
    log "ok: $UNIT removed; its data and configuration are gone (purge)"
else
    log "ok: $UNIT removed; its data is kept in $DATA and its configuration in /etc/postgresql/$VERSION/$NAME"
fi
