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

reset_kubeadm_state
log "ok: node reset; iptables/IPVS rules left in place (see kubeadm reset's notes)"
