#!/bin/sh
# opsgraph pack postgresql - job upgrade-postgresql (action upgrade: minor, within the major).
#
# Runs on the database host (scope target_nodes), as root over SSH.
#   1. apt-get update, then apt-get install --only-upgrade postgresql-<version> and
#      postgresql-client-<version> (never another major; configuration files kept);
#   2. the installed package must then be apt's candidate;
#   3. the cluster is restarted when the running server is older than the installed binaries
#      (the package's own scripts may have restarted it already), started when it is down,
#      and left alone when it already runs the installed version (no newer minor: no restart);
#   4. the versions before and after go into postgresql_upgrade_report.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#
# Parameters: postgresql_version, cluster_name, port
# Provides:   postgresql.upgraded
# Produces:   postgresql_upgrade_report
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/pg-lib.sh
. "$OPSGRAPH_LIB/pg-lib.sh"

apt_get() { apt-get -q -o DPkg::Lock::Timeout=600 "$@"; }
installed_version() {
    dpkg-query -W -f='${Status} ${Version}\n' "$1" 2>/dev/null | awk '$3 == "installed" { print $4 }'
}

: "${OPSGRAPH_OUT:?OPSGRAPH_OUT must name the directory for produced artifacts}"
[ "$(id -u)" -eq 0 ] || fail "must run as root"
pg_params
export DEBIAN_FRONTEND=noninteractive

BIN=/usr/lib/postgresql/$VERSION/bin
PKGS="postgresql-$VERSION postgresql-client-$VERSION"
before=$(installed_version "postgresql-$VERSION")
[ -n "$before" ] || fail "postgresql-$VERSION is not installed: nothing to upgrade (action install installs it)"
server() { runuser -u postgres -- psql -X --cluster "$VERSION/$NAME" -d postgres -tAc 'show server_version' 2>/dev/null; }
running_before=$(server) || running_before="(not running)"

apt_get update
# shellcheck disable=SC2086 # two package names, checked above
apt_get install -y --only-upgrade --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold $PKGS
after=$(installed_version "postgresql-$VERSION")
policy=$(LC_ALL=C apt-cache policy "postgresql-$VERSION")
candidate=$(printf '%s\n' "$policy" | sed -n 's/^ *Candidate: *//p')
[ "$after" = "$candidate" ] || fail "postgresql-$VERSION is $after after the upgrade, but apt's candidate is $candidate"

# postgres --version: "postgres (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)"; server_version:
# "15.14 (Debian 15.14-0+deb12u1)".
binary=$("$BIN/postgres" --version)
binary=${binary#postgres (PostgreSQL) }
if ! systemctl is-active --quiet "$UNIT"; then
    systemctl start "$UNIT"
    log "started $UNIT (it was down)"
elif [ "$(server)" != "$binary" ]; then
    systemctl restart "$UNIT"
    log "restarted $UNIT: it ran $(server), the binaries are $binary"
fi
pg_wait_ready "PostgreSQL does not accept connections on port $PORT after the upgrade"
running=$(server) || fail "cannot read server_version"
[ "$running" = "$binary" ] || fail "the server runs $running, the installed binaries are $binary"

mkdir -p "$OPSGRAPH_OUT"
{
    printf 'PACKAGE_BEFORE postgresql-%s=%s\n' "$VERSION" "$before"
    printf 'PACKAGE_AFTER postgresql-%s=%s\n' "$VERSION" "$after"
    printf 'CANDIDATE=%s\n' "$candidate"
    printf 'SERVER_BEFORE=%s\n' "$running_before"
    printf 'SERVER_AFTER=%s\n' "$running"
} >"$OPSGRAPH_OUT/postgresql_upgrade_report"
if [ "$before" = "$after" ]; then
    log "ok: postgresql-$VERSION $after is apt's candidate already; the server runs $running"
else
    log "ok: postgresql-$VERSION $before -> $after; the server runs $running"
fi
