#!/bin/sh
# opsgraph pack kubernetes - job verify-node: a newly joined node is Ready.
#
# Runs on each new node (scope target_nodes), as root over SSH. Reads the node's own
# object with the kubelet's credentials (/etc/kubernetes/kubelet.conf; the node
# authorizer lets a kubelet read its own Node), so no admin credential leaves the control
# plane. Read-only.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#
# Provides: kubernetes.node.ready
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/node-lib.sh
. "$OPSGRAPH_LIB/node-lib.sh"
on_node

CONF=/etc/kubernetes/kubelet.conf
[ -r "$CONF" ] || fail "$CONF not found: the node has not joined"
NODE=$(hostname | tr '[:upper:]' '[:lower:]')

deadline=$(($(date +%s) + 600))
while :; do
    status=$(kubectl --kubeconfig "$CONF" get node "$NODE" \
        -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true)
    [ "$status" = True ] && break
    if [ "$(date +%s)" -ge "$deadline" ]; then
        reason=$(kubectl --kubeconfig "$CONF" get node "$NODE" \
            -o jsonpath='{.status.conditions[?(@.type=="Ready")].message}' 2>/dev/null || true)
        fail "node $NODE is not Ready after 10 minutes (Ready=${status:-unknown}: ${reason:-no message})"
    fi
    systemctl is-active --quiet kubelet || log "kubelet is not active; waiting"
    sleep 10
done
log "ok: node $NODE is Ready"
