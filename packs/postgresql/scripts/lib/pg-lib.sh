# opsgraph pack postgresql - pg-lib.sh: helpers every script of the pack sources (never run on
# its own).
# shellcheck shell=sh disable=SC2034  # variables set here are read by the scripts that source it
#
# The pack lists it under `libraries:`; a script finds it in the directory OPSGRAPH_LIB names
# (docs/pack-authoring.md):
#     # shellcheck source-path=SCRIPTDIR source=lib/pg-lib.sh
#     . "$OPSGRAPH_LIB/pg-lib.sh"; pg_params
#
# log MESSAGE           one line on stderr: "<job>[<target>]: MESSAGE"
# fail MESSAGE          logs "ERROR: MESSAGE" and exits 1
# matches ERE VALUE     VALUE is one line matching the whole extended regular expression
# write_file PATH MODE [OWNER] < content
#                       replaces PATH atomically when the content differs (WROTE=yes), leaves
#                       it alone when it is up to date (WROTE=no); OWNER may be empty
# pg_params             reads and checks postgresql_version, cluster_name and port: VERSION, NAME,
#                       PORT, and UNIT (the cluster's systemd unit postgresql@<version>-<name>)
# db_params             pg_params, then reads and checks the database's parameters: LISTEN
#                       (listen_addresses, default localhost), CIDR (client_cidr, default
#                       127.0.0.1/32), DB (database) and OWNER (owner), lowercase identifiers
# pg_wait_ready WHY     waits up to 60 s for the server on PORT to accept connections; otherwise
#                       shows the unit's journal and fails with WHY
# pg_include_confd CONF makes CONF/postgresql.conf include conf.d (added once) and creates conf.d
# hba_with_block FILE BLOCK LINE
#                       prints the pg_hba.conf FILE with its "opsgraph BLOCK block" (between
#                       BEGIN/END markers) replaced by one holding LINE, marked with this job;
#                       every other line as it was

PG_JOB=${OPSGRAPH_JOB_ID:-$(basename -- "$0" .sh)}
PG_JOB=${PG_JOB%@*}
NL='
'

log() { printf '%s[%s]: %s\n' "$PG_JOB" "${OPSGRAPH_TARGET_ID:-$(hostname)}" "$*" >&2; }
fail() { log "ERROR: $*"; exit 1; }

matches() {
    case $2 in *"$NL"*) return 1 ;; esac
    printf '%s\n' "$2" | grep -Eqx -- "$1"
}

write_file() {
    WROTE=no
    _tmp=$(mktemp "$1.opsgraph.XXXXXX")
    cat >"$_tmp"
    if [ -f "$1" ] && cmp -s "$_tmp" "$1"; then
        rm -f "$_tmp"
        return 0
    fi
    chmod "$2" "$_tmp"
    [ -z "${3:-}" ] || chown "$3" "$_tmp"
    mv -f "$_tmp" "$1"
    WROTE=yes
    log "wrote $1"
}

pg_params() {
    VERSION=${OPSGRAPH_PARAM_POSTGRESQL_VERSION:-15}
    NAME=${OPSGRAPH_PARAM_CLUSTER_NAME:-main}
    PORT=${OPSGRAPH_PARAM_PORT:-5432}
    matches '[0-9]{2}' "$VERSION" || fail "postgresql_version '$VERSION' is not a major version"
    matches '[a-z0-9][a-z0-9_-]{0,30}' "$NAME" || fail "cluster_name '$NAME' is not a cluster name"
    matches '[0-9]{2,5}' "$PORT" || fail "port '$PORT' is not a port"
    UNIT="postgresql@$VERSION-$NAME"
}

db_params() {
    pg_params
    LISTEN=${OPSGRAPH_PARAM_LISTEN_ADDRESSES:-localhost}
    CIDR=${OPSGRAPH_PARAM_CLIENT_CIDR:-127.0.0.1/32}
    DB=${OPSGRAPH_PARAM_DATABASE:?the database parameter is required}
    OWNER=${OPSGRAPH_PARAM_OWNER:?the owner parameter is required}
    matches '(\*|[A-Za-z0-9.:-]+)(, *[A-Za-z0-9.:-]+)*' "$LISTEN" || fail "listen_addresses '$LISTEN' is not '*' or a list of addresses"
    matches '[0-9A-Fa-f.:]+/[0-9]{1,3}' "$CIDR" || fail "client_cidr '$CIDR' is not a CIDR"
    matches '[a-z_][a-z0-9_]{0,62}' "$DB" || fail "database '$DB' is not a lowercase identifier"
    matches '[a-z_][a-z0-9_]{0,62}' "$OWNER" || fail "owner '$OWNER' is not a lowercase identifier"
}

pg_wait_ready() {
    _i=0
    until pg_isready -q -p "$PORT"; do
        _i=$((_i + 1))
        if [ "$_i" -ge 30 ]; then
            journalctl -u "$UNIT" -n 30 --no-pager >&2 || log "(the journal of $UNIT could not be read)"
            fail "$1"
        fi
        sleep 2
    done
}

pg_include_confd() {
    grep -Eq "^[[:space:]]*include_dir[[:space:]]*=[[:space:]]*'conf\.d'" "$1/postgresql.conf" ||
        printf "\n# added by opsgraph\ninclude_dir = 'conf.d'\n" >>"$1/postgresql.conf"
    install -d -o postgres -g postgres -m 0755 "$1/conf.d"
}

hba_with_block() {
    awk -v begin="^# BEGIN opsgraph $2 block" -v end="^# END opsgraph $2 block" '
        $0 ~ begin { skip = 1; next }
        $0 ~ end { skip = 0; next }
        !skip' "$1"
    printf '# BEGIN opsgraph %s block (pack postgresql, job %s)\n' "$2" "$PG_JOB"
    printf '%s\n' "$3"
    printf '# END opsgraph %s block\n' "$2"
}
