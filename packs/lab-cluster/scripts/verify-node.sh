#!/bin/sh
# opsgraph pack lab-cluster - job verify-node: a newly joined lab node is Ready.
#
# Runs on each new node after join-node. Checks the node is registered in its cluster and its
# kubelet heartbeat is fresh (waiting up to 3 s), and marks it Ready.
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: fail_job, fail_mode
# Provides:   lab.kubernetes.node.ready
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node cluster
# shellcheck source-path=SCRIPTDIR source=cluster-lib.sh disable=SC1091
. "$LAB_SCRIPTS/cluster-lib.sh"

[ -f "$CLUSTER_DIR/nodes/$NODE" ] || fail "Error from server (NotFound): nodes \"$NODE\" not found"
lab_failpoint "error: timed out waiting for the condition on nodes/$NODE"
lab_wait_fresh kubelet "$NODE_DIR" ||
    fail "error: timed out waiting for the condition on nodes/$NODE (kubelet stopped posting node status)"
if lab_proven; then
    set_status "$NODE" Ready
fi
log "ok: $NODE is Ready in $CLUSTER"
