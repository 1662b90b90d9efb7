#!/bin/sh
# opsgraph pack kubernetes - job verify: the cluster as a whole.
#
# Runs on the control-plane node (scope control_plane), as root over SSH, with that node's
# /etc/kubernetes/admin.conf. (It does not take the kubeconfig_admin artifact: requiring it
# would add an init-control-plane -> verify edge to the plan graph; the file it would get is
# this same one.) Read-only: waits for the API, every node Ready, every DaemonSet fully
# ready and CoreDNS available, then writes a report.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#
# Provides: kubernetes.cluster
# Produces: cluster_report
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/node-lib.sh
. "$OPSGRAPH_LIB/node-lib.sh"

needs_out
KUBECONFIG=/etc/kubernetes/admin.conf
export KUBECONFIG
[ -r "$KUBECONFIG" ] || fail "$KUBECONFIG not found: run this on the control-plane node"

# wait_for SECONDS DESCRIPTION COMMAND...: retries COMMAND every 10s until it succeeds.
wait_for() {
    _deadline=$(($(date +%s) + $1))
    _what=$2
    shift 2
    until "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -lt "$_deadline" ] || fail "timed out waiting for $_what"
        sleep 10
    done
    log "$_what: ok"
}
not_ready_nodes() { kubectl get nodes --no-headers | awk '$2 !~ /^Ready/ { bad++ } END { print bad + 0 }'; }
unready_daemonsets() { kubectl get daemonsets -A --no-headers | awk '$3 != $5 { bad++ } END { print bad + 0 }'; }
nodes_ready() { [ "$(kubectl get nodes --no-headers | wc -l)" -gt 0 ] && [ "$(not_ready_nodes)" = 0 ]; }
daemonsets_ready() { [ "$(unready_daemonsets)" = 0 ]; }

wait_for 300 "API /readyz" kubectl get --raw=/readyz
wait_for 900 "all nodes Ready" nodes_ready
wait_for 600 "all DaemonSets ready" daemonsets_ready
kubectl -n kube-system rollout status deployment/coredns --timeout=10m >/dev/null
log "CoreDNS: ok"

if [ -n "${OPSGRAPH_PARAM_EXPECTED_NODES:-}" ]; then
    count=$(kubectl get nodes --no-headers | wc -l)
    [ "$count" -ge "$OPSGRAPH_PARAM_EXPECTED_NODES" ] ||
        fail "$count nodes registered, $OPSGRAPH_PARAM_EXPECTED_NODES expected"
fi

mkdir -p "$OPSGRAPH_OUT"
{
    echo "# cluster report, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "## version"
    kubectl version
    echo "## nodes"
    kubectl get nodes -o wide
    echo "## kube-system"
    kubectl -n kube-system get deployments,daemonsets,pods -o wide
} >"$OPSGRAPH_OUT/cluster_report" 2>&1
log "ok: $(kubectl get nodes --no-headers | wc -l) node(s) Ready"
