# opsgraph pack kubernetes - node-lib.sh: helpers every script of the pack sources (never run on
# its own). The pack lists it under `libraries:` in pack.yaml, so a job finds it beside its
# script, in the directory OPSGRAPH_LIB names, on the control host and on a node over SSH alike
# (docs/pack-authoring.md).
#
# Use, right after `set -eu`:
#     # shellcheck source-path=SCRIPTDIR source=lib/node-lib.sh
#     . "$OPSGRAPH_LIB/node-lib.sh"
#     on_node      # for a script that works on a node: its log lines name the node

# ME: the job's name in log lines (the script's file name without `.sh`); WHO: ME, and the node.
ME=${0##*/}
ME=${ME%.sh}
WHO=$ME
errors=0

log() { printf '%s: %s\n' "$WHO" "$*" >&2; }
fail() { log "ERROR: $*"; exit 1; }
# problem MESSAGE: reports one more problem; the script ends later when there were any.
problem() { log "ERROR: $*"; errors=$((errors + 1)); }

# on_node: log lines name the target node (its id, else this host's name).
on_node() { WHO="${ME}[${OPSGRAPH_TARGET_ID:-$(hostname)}]"; }

# needs_root: the script must run as root.
needs_root() { [ "$(id -u)" -eq 0 ] || fail "must run as root"; }

# needs_out: OPSGRAPH_OUT names the directory for produced artifacts.
needs_out() { : "${OPSGRAPH_OUT:?OPSGRAPH_OUT must name the directory for produced artifacts}"; }

NL='
'
# matches REGEX VALUE: VALUE is a single line that matches the extended REGEX as a whole.
matches() {
    case $2 in *"$NL"*) return 1 ;; esac
    printf '%s\n' "$2" | grep -Eqx -- "$1"
}

# write_file PATH MODE < content: replaces PATH atomically when the content differs and
# sets WROTE=yes; leaves it alone (WROTE=no) when it is already up to date.
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
# installed_version PACKAGE: its version when installed, else nothing.
installed_version() {
    dpkg-query -W -f='${Status} ${Version}\n' "$1" 2>/dev/null | awk '$3 == "installed" { print $4 }'
}
