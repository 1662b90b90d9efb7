#!/bin/sh
# opsgraph pack kubernetes - job remove-node (action remove_node; DESTRUCTIVE): a drained node
# leaves the cluster.
#
# Runs on each node to remove (scope target_nodes), as root over SSH, behind the gate
# confirm-remove-node, after drain-node. kubeadm reset (on a control-plane node this also removes
# its etcd member), the CNI configuration and kubelet state removed; then the Node object deleted
# with the cluster's admin kubeconfig (KUBECONFIG), after the reset so that no kubelet registers
# it again. Packages and containerd stay. Idempotent.
#
# Conventions (packs/README.md): run with `sh -eu`; POSIX sh; idempotent.
# Provides:   kubernetes.node.removed
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/node-lib.sh
. "$OPSGRAPH_LIB/node-lib.sh"
on_node

needs_root
needs_admin_kubeconfig
NODE=$(node_name)

reset_kubeadm_state
kubectl delete node "$NODE" --ignore-not-found >&2
log "ok: node $NODE reset and deleted from the cluster"
