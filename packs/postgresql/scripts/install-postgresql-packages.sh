#!/bin/sh
# opsgraph pack postgresql - job install-postgresql-packages.
#
# Runs on the database host (scope target_nodes), as root over SSH.
#   1. postgresql-common first, and create_main_cluster = false in its createcluster.conf,
#      so installing the server does not create a cluster with default settings
#      (ensure-postgresql-cluster creates it with ours);
#   2. the PGDG repository (apt.postgresql.org) with its signing key, unless use_pgdg=false;
#   3. postgresql-<version> and postgresql-client-<version>.
# Idempotent: files are rewritten only when they differ; installed packages stay.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased (booleans are true/false)
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#
# Parameters: postgresql_version (16), use_pgdg (true)
# Provides:   postgresql.packages
# Produces:   postgresql_package_report
set -eu

log() { printf 'install-postgresql[%s]: %s\n' "${OPSGRAPH_TARGET_ID:-$(hostname)}" "$*" >&2; }
fail() { log "ERROR: $*"; exit 1; }

# shellcheck disable=SC2034 # WROTE is for callers that care
write_file() {
    WROTE=no
    _tmp=$(mktemp "$1.opsgraph.XXXXXX")
    cat >"$_tmp"
    if [ -f "$1" ] && cmp -s "$_tmp" "$1"; then
        rm -f "$_tmp"
        return 0
    fi
    chmod "$2" "$_tmp"
    mv -f "$_tmp" "$1"
    WROTE=yes
    log "wrote $1"
}
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
VERSION=${OPSGRAPH_PARAM_POSTGRESQL_VERSION:-16}
USE_PGDG=${OPSGRAPH_PARAM_USE_PGDG:-true}
case $VERSION in 1[5-9] | 2[0-9]) ;; *) fail "postgresql_version '$VERSION' is not supported (15 or later)" ;; esac
case $USE_PGDG in true | false) ;; *) fail "use_pgdg must be true or false" ;; esac
export DEBIAN_FRONTEND=noninteractive

apt_get update
apt_install ca-certificates curl gnupg postgresql-common

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

SOURCE=distribution
if [ "$USE_PGDG" = true ]; then
    # shellcheck disable=SC1091
    CODENAME=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    [ -n "$CODENAME" ] || fail "cannot tell the distribution codename for the PGDG repository"
    KEY=/etc/apt/keyrings/postgresql-pgdg.asc
    install -d -m 0755 /etc/apt/keyrings
    if [ ! -s "$KEY" ]; then
        curl -fsSL --retry 3 -o "$KEY.tmp" https://www.postgresql.org/media/keys/ACCC4CF8.asc
        grep -q 'BEGIN PGP PUBLIC KEY BLOCK' "$KEY.tmp" || fail "the PGDG signing key download is not a key"
        chmod 0644 "$KEY.tmp"
        mv -f "$KEY.tmp" "$KEY"
    fi
    write_file /etc/apt/sources.list.d/pgdg.list 0644 <<LIST
# managed by opsgraph (pack postgresql, job install-postgresql-packages)
deb [signed-by=$KEY] https://apt.postgresql.org/pub/repos/apt $CODENAME-pgdg main
LIST
    apt_get update
    SOURCE="apt.postgresql.org $CODENAME-pgdg"
fi

if [ -z "$(installed_version "postgresql-$VERSION")" ] || [ -z "$(installed_version "postgresql-client-$VERSION")" ]; then
    apt-cache show "postgresql-$VERSION" >/dev/null 2>&1 || fail "postgresql-$VERSION is not available from $SOURCE"
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
