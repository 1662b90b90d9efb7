#!/bin/sh
# opsgraph pack lab-cluster - job verify: the lab cluster is up.
#
# Runs on the control-plane node after every worker joined. Checks the apiserver and the CNI
# agent run, and that every node registered in <lab>/<cluster>/nodes has a fresh kubelet
# heartbeat (waiting up to 3 s for each); marks them Ready, records the cluster's status in
# <lab>/<cluster>/status.env and writes the cluster_report artifact.
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: fail_job, fail_mode
# Provides:   lab.kubernetes.cluster
# Produces:   cluster_report
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node cluster
# shellcheck source-path=SCRIPTDIR source=cluster-lib.sh disable=SC1091
. "$LAB_SCRIPTS/cluster-lib.sh"

lab_alive apiserver "$NODE_DIR" || fail "The connection to the server $NODE:6443 was refused - did you specify the right host or port?"
[ "$(kcfg "$NODE_DIR/kubernetes/admin.conf" cluster)" = "$CLUSTER" ] || fail "$NODE is not the control plane of $CLUSTER"
lab_alive cni "$NODE_DIR" || fail "the pod network agent is not running on $NODE"

first_worker=$(grep -l '^ROLE=worker$' "$CLUSTER_DIR"/nodes/* 2>/dev/null | head -n 1 || true)
lab_failpoint "error: timed out waiting for the condition on nodes/${first_worker##*/}"

report=$(mktemp)
trap 'rm -f "$report"' EXIT
printf '%-24s %-14s %-10s %s\n' NAME ROLE STATUS ADDRESS >"$report"
total=0
bad=""
for file in "$CLUSTER_DIR"/nodes/*; do
    [ -f "$file" ] || continue
    n=${file##*/}
    total=$((total + 1))
    if lab_wait_fresh kubelet "$LAB/$n"; then status=Ready; else status=NotReady; bad="$bad $n"; fi
    printf '%-24s %-14s %-10s %s\n' "$n" "$(kv "$file" ROLE)" "$status" "$(kv "$file" ADDRESS)" >>"$report"
done
cat "$report" >&2
[ "$total" -gt 0 ] || fail "no node is registered in $CLUSTER_DIR/nodes"
[ -z "$bad" ] || fail "error: timed out waiting for the condition on nodes:$bad (kubelet stopped posting node status)"

if lab_proven; then
    for file in "$CLUSTER_DIR"/nodes/*; do
        set_status "${file##*/}" Ready
    done
    {
        printf 'CLUSTER=%s\n' "$CLUSTER"
        printf 'CONTROL_PLANE=%s\n' "$NODE"
        printf 'NODES=%s\n' "$total"
        printf 'STATUS=Ready\n'
    } | write_file "$CLUSTER_DIR/status.env"
fi
lab_artifact cluster_report <"$report"
log "ok: $CLUSTER has $total Ready node(s)"
