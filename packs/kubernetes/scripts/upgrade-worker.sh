#!/bin/sh
# opsgraph pack kubernetes - jobs upgrade-worker and upgrade-control-plane-member (action
# upgrade): one node at a time, after the first control-plane node (controls.rollout: one_at_a_time);
# the same steps on a worker and on a further control-plane node of an HA cluster.
#
# Runs on each node of its scope (workers, control_plane_members), as root over SSH. The cluster's admin kubeconfig is the
# kubernetes.cluster binding's credentials (KUBECONFIG, copied here for the job): it drains and
# uncordons this node. The steps kubeadm documents for a worker: kubeadm at the target version,
# `kubeadm upgrade node`, the node drained, kubelet and kubectl upgraded, kubelet restarted, the
# node uncordoned once it is Ready again. Idempotent: a worker at the target is only uncordoned.
#
# Conventions (packs/README.md): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: kubernetes_version (the exact target), drain_timeout
# Provides:   kubernetes.node.upgraded
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/node-lib.sh
. "$OPSGRAPH_LIB/node-lib.sh"
on_node

needs_root
upgrade_params
needs_admin_kubeconfig
[ -r /etc/kubernetes/kubelet.conf ] || fail "/etc/kubernetes/kubelet.conf not found: this node has not joined the cluster"
NODE=$(node_name)

upgrade_kubeadm

if kubelet_outdated; then
    kubeadm upgrade node >&2
    upgrade_kubelet kubectl
fi

kubectl wait --for=condition=Ready "node/$NODE" --timeout=5m >/dev/null ||
    fail "node $NODE is not Ready after its kubelet was upgraded: it stays cordoned (see journalctl -u kubelet)"
kubectl uncordon "$NODE"
log "ok: node $NODE at $K8S_VERSION, Ready and uncordoned"
