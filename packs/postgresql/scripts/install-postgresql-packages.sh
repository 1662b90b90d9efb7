#!/bin/sh
# opsgraph pack postgresql - job install-postgresql-packages.
#
# Runs on the database host (scope target_nodes), as root over SSH.
#   1. source=pgdg: the PGDG repository (apt.postgresql.org) with its signing key; when the
#      repository cannot be reached, the job fails saying so ("the PGDG repository is
#      unreachable ..."), which the remedy postgresql-pgdg-unreachable recognises.
#      source=debian: the distribution's archive as the host's apt is configured (Debian 12:
#      PostgreSQL 15); a PGDG list this job wrote earlier is removed;
#   2. postgresql-common, and create_main_cluster = false in its createcluster.conf,
#      so installing the server does not create a cluster with default settings
#      (ensure-postgresql-cluster creates it with ours);
#   3. postgresql-<version> and postgresql-client-<version>.
# Idempotent: files are rewritten only when they differ; installed packages stay.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased (booleans are true/false)
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#
# Parameters: postgresql_version (15), source (debian | pgdg)
# Provides:   postgresql.packages
# Produces:   postgresql_package_report
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/pg-lib.sh
. "$OPSGRAPH_LIB/pg-lib.sh"

apt_get() { apt-get -q -o DPkg::Lock::Timeout=600 "$@"; }
apt_install() {
    apt_get install -y --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@"
}
installed_version() {
    dpkg-query -W -f='${Status} ${Version}\n' "$1" 2>/dev/null | awk '$3 == "installed" { print $4 }'
}

: "${OPSGRAPH_OUT:?OPSGRAPH_OUT must name the directory for produced artifacts}"
[ "$(id -u)" -eq 0 ] || fail "must run as root"
pg_params
SOURCE_KIND=${OPSGRAPH_PARAM_SOURCE:-debian}
case $VERSION in 1[5-9] | 2[0-9]) ;; *) fail "postgresql_version '$VERSION' is not supported (15 or later)" ;; esac
case $SOURCE_KIND in debian | pgdg) ;; *) fail "source must be debian or pgdg, not '$SOURCE_KIND'" ;; esac
export DEBIAN_FRONTEND=noninteractive

PGDG_LIST=/etc/apt/sources.list.d/pgdg.list
if [ "$SOURCE_KIND" = debian ] && [ -f "$PGDG_LIST" ] && grep -q '^# managed by opsgraph' "$PGDG_LIST"; then
    rm -f "$PGDG_LIST"
    log "source debian: removed $PGDG_LIST (written by an earlier pgdg run)"
fi
apt_get update
[ "$SOURCE_KIND" = debian ] || apt_install ca-certificates curl

# The repository first: when it cannot be reached, nothing else is installed.
SOURCE="the distribution's archive"
if [ "$SOURCE_KIND" = pgdg ]; then
    # shellcheck disable=SC1091
    CODENAME=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    [ -n "$CODENAME" ] || fail "cannot tell the distribution codename for the PGDG repository"
    KEY=/etc/apt/keyrings/postgresql-pgdg.asc
    KEY_URL=https://www.postgresql.org/media/keys/ACCC4CF8.asc
    install -d -m 0755 /etc/apt/keyrings
    if [ ! -s "$KEY" ]; then
        if ! curl -fsSL --connect-timeout 10 --max-time 60 --retry 2 -o "$KEY.tmp" "$KEY_URL" 2>"$KEY.err"; then
            why=$(tail -n 1 "$KEY.err")
            rm -f "$KEY.tmp" "$KEY.err"
            fail "the PGDG repository is unreachable from this host: its signing key ($KEY_URL) could not be downloaded: ${why:-no answer}. Use source debian (PostgreSQL from the distribution's archive), or give this host a way to www.postgresql.org and apt.postgresql.org"
        fi
        rm -f "$KEY.err"
        grep -q 'BEGIN PGP PUBLIC KEY BLOCK' "$KEY.tmp" || fail "the PGDG signing key download is not a key"
        chmod 0644 "$KEY.tmp"
        mv -f "$KEY.tmp" "$KEY"
    fi
    write_file "$PGDG_LIST" 0644 <<LIST
# managed by opsgraph (pack postgresql, job install-postgresql-packages)
deb [signed-by=$KEY] https://apt.postgresql.org/pub/repos/apt $CODENAME-pgdg main
LIST
    apt_get update || fail "the PGDG repository is unreachable from this host: apt-get update failed for apt.postgresql.org (see above). Use source debian, or give this host a way to apt.postgresql.org"
    SOURCE="apt.postgresql.org $CODENAME-pgdg"
fi

apt_install postgresql-common

# No automatic cluster: ours gets our port, locale and checksums.
CC=/etc/postgresql-common/createcluster.conf
if ! grep -Eq '^[[:space:]]*create_main_cluster[[:space:]]*=[[:space:]]*false' "$CC"; then
    if grep -Eq '^[[:space:]]*#?[[:space:]]*create_main_cluster[[:space:]]*=' "$CC"; then
        sed -i -E 's/^[[:space:]]*#?[[:space:]]*create_main_cluster[[:space:]]*=.*/create_main_cluster = false/' "$CC"
    else
        printf 'create_main_cluster = false\n' >>"$CC"
    fi
    log "create_main_cluster = false in $CC"
fi

if [ -z "$(installed_version "postgresql-$VERSION")" ] || [ -z "$(installed_version "postgresql-client-$VERSION")" ]; then
    apt-cache show "postgresql-$VERSION" >/dev/null 2>&1 ||
        fail "postgresql-$VERSION is not available from $SOURCE (Debian 12 has 15; other versions need source pgdg)"
    apt_install "postgresql-$VERSION" "postgresql-client-$VERSION"
fi
[ -x "/usr/lib/postgresql/$VERSION/bin/postgres" ] || fail "postgres $VERSION binary missing after the install"

mkdir -p "$OPSGRAPH_OUT"
{
    printf 'SOURCE=%s\n' "$SOURCE"
    for pkg in postgresql-common "postgresql-$VERSION" "postgresql-client-$VERSION"; do
        printf 'PACKAGE %s=%s\n' "$pkg" "$(installed_version "$pkg")"
    done
} >"$OPSGRAPH_OUT/postgresql_package_report"
log "ok: postgresql-$VERSION $(installed_version "postgresql-$VERSION") from $SOURCE"
