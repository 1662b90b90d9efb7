#!/bin/sh
# opsgraph pack kubernetes - job drain-node (action remove_node): cordon and drain a node that
# leaves the cluster.
#
# Runs on each node to remove (scope target_nodes), as root over SSH, with the cluster's admin
# kubeconfig (the kubernetes.cluster binding's credentials, KUBECONFIG). Refuses, changing
# nothing, to drain the cluster's last control-plane node: removing it would end the cluster
# (uninstall does that). A node the API no longer lists is left alone.
#
# Conventions (packs/README.md): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: drain_timeout
# Provides:   kubernetes.node.drained
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/node-lib.sh
. "$OPSGRAPH_LIB/node-lib.sh"
on_node

needs_root
DRAIN_TIMEOUT=${OPSGRAPH_PARAM_DRAIN_TIMEOUT:-5m}
matches '[0-9]+[smh]' "$DRAIN_TIMEOUT" || fail "drain_timeout '$DRAIN_TIMEOUT' is not a duration such as 5m"
needs_admin_kubeconfig
NODE=$(node_name)

nodes=$(kubectl get nodes -o name) || fail "the API server does not answer: a node cannot be drained without it"
case "$NL$nodes$NL" in
    *"${NL}node/$NODE$NL"*) ;;
    *) log "node $NODE is not in the cluster: nothing to drain"; exit 0 ;;
esac
planes=$(kubectl get nodes -l node-role.kubernetes.io/control-plane -o name) || fail "cannot list the control-plane nodes"
case "$NL$planes$NL" in
    *"${NL}node/$NODE$NL"*)
        count=$(printf '%s\n' "$planes" | grep -c '^node/')
        [ "$count" -gt 1 ] || fail "node $NODE is the cluster's last control-plane node: removing it would end the cluster (use uninstall)"
        ;;
esac
kubectl cordon "$NODE"
kubectl drain "$NODE" --ignore-daemonsets --delete-emptydir-data --timeout="$DRAIN_TIMEOUT"
log "ok: node $NODE cordoned and drained"
