#!/bin/sh
# opsgraph pack lab-cluster - job repair-control-plane: the `repair` action's one job.
#
# Runs on the control-plane node of an existing cluster. Starts again each of its daemons that
# is not running (containerd, then the apiserver, the CNI agent and the kubelet, each after what
# it needs), leaves running ones alone, and waits for every heartbeat to be fresh.
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: fail_job, fail_mode
# Provides:   lab.kubernetes.control_plane.repaired
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node cluster

[ -x "$NODE_DIR/bin/lab-daemon" ] || [ -f "$NODE_DIR/bin/lab-daemon" ] ||
    fail "$NODE was never set up as a node of $CLUSTER ($NODE_DIR/bin/lab-daemon is missing): create the cluster first"
[ -f "$NODE_DIR/kubernetes/admin.conf" ] ||
    fail "$NODE is not the control plane of $CLUSTER ($NODE_DIR/kubernetes/admin.conf is missing)"
lab_failpoint "error: the control plane of $CLUSTER could not be repaired"

lab_start containerd "$NODE_DIR" sh "$NODE_DIR/bin/lab-daemon" containerd "$NODE_DIR"
if lab_proven; then
    lab_start apiserver "$NODE_DIR" sh "$NODE_DIR/bin/lab-daemon" apiserver "$NODE_DIR" containerd
    lab_start cni "$NODE_DIR" sh "$NODE_DIR/bin/lab-daemon" cni "$NODE_DIR" apiserver
fi
lab_start kubelet "$NODE_DIR" sh "$NODE_DIR/bin/lab-daemon" kubelet "$NODE_DIR" containerd
for daemon in containerd apiserver cni kubelet; do
    lab_wait_fresh "$daemon" "$NODE_DIR" || fail "$daemon on $NODE beats no more after its restart"
done
log "ok: the control plane of $CLUSTER on $NODE runs again"
