#!/bin/sh
# opsgraph pack kubernetes - job reset-node: undo kubeadm init/join on a node (DESTRUCTIVE).
#
# Rollback job of init-control-plane, join-workers and join-node. Runs on the nodes of
# scope target_nodes as root over SSH, behind a destructive_action gate. On a control-plane
# node this deletes the cluster's etcd data. Removes: kubeadm state (kubeadm reset), CNI
# configuration, the kubelet's state, root's kubeconfig if it is this cluster's. Keeps:
# installed packages, containerd and its images, iptables rules (kubeadm reset prints how
# to clean those; flushing them blindly could drop the host's own firewall).
# Idempotent: a node without kubeadm state is left as it is.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/node-lib.sh
. "$OPSGRAPH_LIB/node-lib.sh"
on_node

needs_root

if [ -e /etc/kubernetes/admin.conf ] || [ -e /etc/kubernetes/kubelet.conf ] ||
    [ -n "$(ls -A /etc/kubernetes/manifests 2>/dev/null)" ] || [ -d /var/lib/etcd/member ]; then
    if [ -f /root/.kube/config ] && [ -f /etc/kubernetes/admin.conf ] &&
        cmp -s /root/.kube/config /etc/kubernetes/admin.conf; then
        rm -f /root/.kube/config
    fi
    kubeadm reset --force --cri-socket unix:///run/containerd/containerd.sock
    log "kubeadm reset done"
else
    log "no kubeadm state on this node"
fi

# kubeadm reset leaves the CNI configuration and some kubelet state behind.
rm -rf /etc/cni/net.d/* /var/lib/kubelet/pki /etc/kubernetes/opsgraph
if ip link show cni0 >/dev/null 2>&1; then ip link delete cni0; fi
if ip link show flannel.1 >/dev/null 2>&1; then ip link delete flannel.1; fi
if ip link show vxlan.calico >/dev/null 2>&1; then ip link delete vxlan.calico; fi
systemctl restart containerd
log "ok: node reset; iptables/IPVS rules left in place (see kubeadm reset's notes)"
