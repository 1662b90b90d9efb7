# opsgraph lab packs - lab-lib.sh: helpers every lab script sources (never run on its own).
# shellcheck shell=sh disable=SC2034  # variables set here are read by the scripts that source it
#
# An identical copy lives in each lab pack (lab-cluster, lab-database, postgresql-local), so a
# pack stays self-contained. Each pack lists it under `libraries:`; a script finds it in the
# directory OPSGRAPH_LIB names (docs/pack-authoring.md):
#     # shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
#     . "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node cluster
#
# The lab: a lab node is the directory "$OPSGRAPH_LAB_DIR/<node-name>" with its own background
# processes (plain `sh` loops started with setsid, pid files in <node>/run). A cluster's shared
# state is "$OPSGRAPH_LAB_DIR/<cluster-name>" (the intent's name). Needs a POSIX sh, coreutils,
# grep, sed, awk; setsid (util-linux) when present, nohup otherwise.
#
# Environment (packs/README.md; everything else is unset):
#   OPSGRAPH_LAB_DIR       absolute directory holding the lab nodes
#   OPSGRAPH_JOB_ID        the instance id (install-runtime@lab-2); the job id is ${OPSGRAPH_JOB_ID%@*}
#   OPSGRAPH_TARGET_NAME   the node a scoped instance runs on
#   OPSGRAPH_INTENT_NAME   the resource the operation creates (the cluster)
#   OPSGRAPH_OUT           where produced artifacts go
#
# Failure switch (for repair-loop, timeout and manual-intervention tests):
#   parameter fail_job = this job's id (or its instance id, job@node), with fail_mode:
#     exit      the job prints a realistic error to stderr and exits 1
#     evidence  the job exits 0 but leaves its output unproven, so its evidence fails
#     hang      the job sleeps 3600 s (the job's timeout ends it)
#   file "$OPSGRAPH_LAB_DIR/fail/<job-id>" (or ".../fail/<job-id>@<node>") exists: the job fails
#     the `exit` way whatever the parameters say; deleting the file is the "manual fix".

# The directory of the script that sourced this file ($0 is still that script): where the pack's
# other scripts are.
LAB_SCRIPTS=$(dirname -- "$0")

LAB_NL='
'
LAB_INSTANCE=${OPSGRAPH_JOB_ID:-}
LAB_JOB=${LAB_INSTANCE%@*}
LAB_UNPROVEN=0
# A lab node or cluster name: a DNS label.
LAB_NAME_RE='[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?'

log() { printf '%s[%s]: %s\n' "${LAB_JOB:-lab}" "${OPSGRAPH_TARGET_NAME:-local}" "$*" >&2; }
fail() {
    log "ERROR: $*"
    exit 1
}

# matches REGEX VALUE: VALUE is one line that matches the extended REGEX as a whole.
matches() {
    case $2 in *"$LAB_NL"*) return 1 ;; esac
    printf '%s\n' "$2" | grep -Eqx -- "$1"
}

# lab_init [node] [cluster]: checks the environment; sets LAB (the lab directory) and creates
# it; then, as asked, lab_node and lab_cluster.
lab_init() {
    LAB=${OPSGRAPH_LAB_DIR:-}
    case $LAB in
        /*) ;;
        *) fail "OPSGRAPH_LAB_DIR must be an absolute directory (got '$LAB')" ;;
    esac
    case $LAB in *"$LAB_NL"*) fail "OPSGRAPH_LAB_DIR holds a newline" ;; esac
    LAB=${LAB%/}
    [ -n "$LAB_JOB" ] || fail "OPSGRAPH_JOB_ID is not set"
    case ${OPSGRAPH_PARAM_FAIL_MODE:-exit} in
        exit | evidence | hang) ;;
        *) fail "fail_mode '${OPSGRAPH_PARAM_FAIL_MODE}' is not one of exit, evidence, hang" ;;
    esac
    mkdir -p "$LAB"
    for _lab_what in "$@"; do
        case $_lab_what in
            node) lab_node ;;
            cluster) lab_cluster ;;
            *) fail "lab_init: '$_lab_what' is not node or cluster" ;;
        esac
    done
}

# lab_node: sets NODE (the instance's node) and NODE_DIR.
lab_node() {
    NODE=${OPSGRAPH_TARGET_NAME:-}
    matches "$LAB_NAME_RE" "$NODE" || fail "target name '$NODE' is not a lab node name (a DNS label)"
    NODE_DIR=$LAB/$NODE
}

# lab_cluster: sets CLUSTER (the intent's name) and CLUSTER_DIR.
lab_cluster() {
    CLUSTER=${OPSGRAPH_INTENT_NAME:-}
    matches "$LAB_NAME_RE" "$CLUSTER" || fail "intent name '$CLUSTER' is not a cluster name (a DNS label)"
    CLUSTER_DIR=$LAB/$CLUSTER
}

# lab_fail_mode: prints how the failure switch says this job must fail: file, exit, evidence,
# hang, or nothing.
lab_fail_mode() {
    if [ -e "$LAB/fail/$LAB_JOB" ] || [ -e "$LAB/fail/$LAB_INSTANCE" ]; then
        echo file
        return 0
    fi
    lfm_job=${OPSGRAPH_PARAM_FAIL_JOB:-}
    if [ -n "$lfm_job" ] && { [ "$lfm_job" = "$LAB_JOB" ] || [ "$lfm_job" = "$LAB_INSTANCE" ]; }; then
        echo "${OPSGRAPH_PARAM_FAIL_MODE:-exit}"
    fi
}

# lab_fail_now LINE...: prints the lines (a realistic error) to stderr and exits 1.
lab_fail_now() {
    for lfn_line in "$@"; do
        printf '%s\n' "$lfn_line" >&2
    done
    exit 1
}

# lab_hang: what fail_mode hang does.
lab_hang() {
    sleep 3600
    exit 1
}

# lab_failpoint LINE...: applies the failure switch; LINE... is the job's realistic error.
# In evidence mode it only sets LAB_UNPROVEN=1: the script then skips what its evidence proves.
lab_failpoint() {
    case $(lab_fail_mode) in
        file | exit) lab_fail_now "$@" ;;
        evidence) LAB_UNPROVEN=1 ;;
        hang) lab_hang ;;
    esac
}

# lab_proven: true unless the failure switch asked to leave the output unproven.
lab_proven() { [ "$LAB_UNPROVEN" = 0 ]; }

# write_file PATH [MODE]: stdin to PATH (temp file + cmp + mv), only when the content differs.
write_file() {
    wf_tmp="$1.tmp.$$"
    (
        umask 077
        cat >"$wf_tmp"
    )
    chmod "${2:-0644}" "$wf_tmp"
    if [ -f "$1" ] && cmp -s "$wf_tmp" "$1" 2>/dev/null; then
        rm -f "$wf_tmp"
        chmod "${2:-0644}" "$1"
    else
        mv -f "$wf_tmp" "$1"
    fi
}

# lab_artifact ID: stdin to "$OPSGRAPH_OUT/ID" (mode 0600, temp name then rename).
lab_artifact() {
    : "${OPSGRAPH_OUT:?OPSGRAPH_OUT must name the directory for produced artifacts}"
    mkdir -p "$OPSGRAPH_OUT"
    (
        umask 077
        cat >"$OPSGRAPH_OUT/.$1.tmp"
    )
    mv -f "$OPSGRAPH_OUT/.$1.tmp" "$OPSGRAPH_OUT/$1"
}

# kv FILE KEY: the value of the first KEY=value line of FILE (empty when there is none).
kv() { sed -n "s/^$2=//p" "$1" 2>/dev/null | head -n 1; }

# kvs FILE KEY...: sets each variable KEY (a name in capitals) to `kv FILE KEY`.
kvs() {
    _file=$1
    shift
    for _key in "$@"; do
        case $_key in '' | [!A-Z]* | *[!A-Z0-9_]*) fail "kvs: '$_key' is not a variable name in capitals" ;; esac
        _value=$(kv "$_file" "$_key")
        eval "$_key=\$_value"
    done
}

# random_hex N: N random hex digits.
random_hex() { od -An -N"$(( ($1 + 1) / 2 ))" -tx1 /dev/urandom | tr -d ' \n' | cut -c1-"$1"; }

# now: seconds since the epoch.
now() { date +%s; }

# seconds DURATION: 90s, 15m, 2h -> seconds.
seconds() {
    matches '[0-9]+[smh]' "$1" || return 1
    case $1 in
        *s) echo "${1%s}" ;;
        *m) echo $(( ${1%m} * 60 )) ;;
        *h) echo $(( ${1%h} * 3600 )) ;;
    esac
}

# lab_pid_alive PID: a live process (a zombie left by a PID 1 that does not reap is dead).
lab_pid_alive() {
    matches '[0-9]+' "$1" || return 1
    kill -0 "$1" 2>/dev/null || return 1
    if [ -r "/proc/$1/stat" ] && grep -q ') Z ' "/proc/$1/stat" 2>/dev/null; then
        return 1
    fi
    return 0
}

# lab_pid NAME DIR: the pid in DIR/run/NAME.pid (empty when none).
lab_pid() { head -n 1 "$2/run/$1.pid" 2>/dev/null || true; }

# lab_alive NAME DIR: the daemon NAME of DIR runs.
lab_alive() { lab_pid_alive "$(lab_pid "$1" "$2")"; }

# lab_fresh NAME DIR [MAX]: its heartbeat is at most MAX (3) seconds old.
lab_fresh() {
    lf_hb=$(head -n 1 "$2/run/$1.heartbeat" 2>/dev/null || true)
    matches '[0-9]+' "$lf_hb" || return 1
    [ $(( $(now) - lf_hb )) -le "${3:-3}" ]
}

# lab_wait_fresh NAME DIR: waits up to 3 s for a fresh heartbeat of a live daemon.
lab_wait_fresh() {
    lwf_i=0
    until lab_alive "$1" "$2" && lab_fresh "$1" "$2" 2; do
        lwf_i=$((lwf_i + 1))
        [ "$lwf_i" -le 30 ] || return 1
        lab_nap
    done
}

# lab_nap: a tenth of a second where sleep takes fractions, else one.
lab_nap() { sleep 0.1 2>/dev/null || sleep 1; }

# lab_start NAME DIR PROGRAM [ARG...]: starts a lab daemon for DIR (a node directory, or a
# service directory inside one) unless DIR/run/NAME.pid names a live process. PROGRAM writes its
# own pid file and heartbeat (lab-daemon.sh, labdb-server.sh). It runs in a session of its own
# (setsid), so it outlives the job and its process group; its output goes to DIR/log/NAME.log.
# Waits up to 3 s for its pid file and first heartbeat.
lab_start() {
    ls_name=$1
    ls_dir=$2
    shift 2
    mkdir -p "$ls_dir/run" "$ls_dir/log"
    if lab_alive "$ls_name" "$ls_dir"; then
        log "$ls_name already runs (pid $(lab_pid "$ls_name" "$ls_dir"))"
        return 0
    fi
    rm -f "$ls_dir/run/$ls_name.pid" "$ls_dir/run/$ls_name.heartbeat"
    if command -v setsid >/dev/null 2>&1; then
        setsid "$@" >>"$ls_dir/log/$ls_name.log" 2>&1 </dev/null &
    else
        nohup "$@" >>"$ls_dir/log/$ls_name.log" 2>&1 </dev/null &
    fi
    ls_i=0
    until lab_alive "$ls_name" "$ls_dir" && [ -s "$ls_dir/run/$ls_name.heartbeat" ]; do
        ls_i=$((ls_i + 1))
        if [ "$ls_i" -gt 30 ]; then
            tail -n 5 "$ls_dir/log/$ls_name.log" >&2 2>/dev/null || true
            fail "$ls_name did not start within 3 s (log: $ls_dir/log/$ls_name.log)"
        fi
        lab_nap
    done
    log "started $ls_name (pid $(lab_pid "$ls_name" "$ls_dir"))"
}

# lab_kill PID SIGNAL: signals PID's process group when PID leads one (setsid), else PID.
lab_kill() {
    kill -s "$2" -- "-$1" 2>/dev/null || kill -s "$2" "$1" 2>/dev/null || true
}

# lab_stop_pid PID [SIGNAL [single]]: SIGNAL (TERM) to its group (to PID alone with `single`),
# then KILL after 5 s; returns when it is gone.
lab_stop_pid() {
    lab_pid_alive "$1" || return 0
    if [ "${3:-}" = single ]; then
        kill -s "${2:-TERM}" "$1" 2>/dev/null || true
    else
        lab_kill "$1" "${2:-TERM}"
    fi
    lsp_i=0
    while lab_pid_alive "$1"; do
        lsp_i=$((lsp_i + 1))
        if [ "$lsp_i" -eq 50 ]; then
            kill -s KILL "$1" 2>/dev/null || true
        elif [ "$lsp_i" -gt 80 ]; then
            fail "process $1 does not stop"
        fi
        lab_nap
    done
}

# lab_stop NAME DIR: stops the daemon NAME of DIR and removes its pid file and heartbeat.
lab_stop() {
    lst_pid=$(lab_pid "$1" "$2")
    if lab_pid_alive "$lst_pid"; then
        log "stopping $1 (pid $lst_pid)"
        lab_stop_pid "$lst_pid"
    fi
    rm -f "$2/run/$1.pid" "$2/run/$1.heartbeat"
}

# lab_stop_all DIR: stops every process named by a *.pid file under DIR (PostgreSQL's
# postmaster.pid gets SIGINT, its fast shutdown).
lab_stop_all() {
    [ -d "$1" ] || return 0
    find "$1" -name '*.pid' -type f | while IFS= read -r lsa_file; do
        lsa_pid=$(head -n 1 "$lsa_file" 2>/dev/null || true)
        lab_pid_alive "$lsa_pid" || continue
        case $lsa_file in
            */postmaster.pid)
                log "stopping postgres (pid $lsa_pid)"
                lab_stop_pid "$lsa_pid" INT single
                ;;
            *)
                log "stopping ${lsa_file##*/} (pid $lsa_pid)"
                lab_stop_pid "$lsa_pid" TERM
                ;;
        esac
    done
}

