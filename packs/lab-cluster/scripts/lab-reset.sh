#!/bin/sh
# opsgraph pack lab-cluster - job lab-reset: tear a lab node down (rollback; destructive).
#
# Runs on each node of its scope. Stops every process of the node (each *.pid file under the
# node directory: lab daemons get TERM, a PostgreSQL postmaster SIGINT), removes the node from
# its cluster's registry - and, on a control-plane node, the cluster directory itself - then
# removes the node directory "$OPSGRAPH_LAB_DIR/<node>". Nothing outside the lab directory is
# touched. Idempotent: a node without a directory is done.
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: fail_job, fail_mode
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node
# shellcheck source-path=SCRIPTDIR source=cluster-lib.sh disable=SC1091
. "$LAB_SCRIPTS/cluster-lib.sh"

lab_failpoint "lab-reset[$NODE]: ERROR: the node could not be reset" \
    "rm: cannot remove '$NODE_DIR/run': Device or resource busy"

if [ ! -d "$NODE_DIR" ]; then
    log "ok: $NODE_DIR does not exist"
    exit 0
fi
if [ ! -f "$NODE_DIR/node.env" ] && [ -d "$NODE_DIR/nodes" ]; then
    fail "$NODE_DIR looks like a cluster directory, not a lab node"
fi
lab_stop_all "$NODE_DIR"
member=$(kcfg "$NODE_DIR/kubernetes/kubelet.conf" cluster)
if [ -n "$member" ] && matches "$LAB_NAME_RE" "$member" && [ -d "$LAB/$member/nodes" ]; then
    if [ "$(kcfg "$NODE_DIR/kubernetes/admin.conf" cluster)" = "$member" ]; then
        log "$NODE is the control plane of $member: removing the cluster directory $LAB/$member"
        if lab_proven; then rm -rf "${LAB:?}/$member"; fi
    else
        log "removing $NODE from cluster $member"
        rm -f "$LAB/$member/nodes/$NODE"
    fi
fi
if lab_proven; then
    rm -rf "${LAB:?}/$NODE"
fi
log "ok: $NODE reset"
