#!/bin/sh
# opsgraph pack kubernetes - job upgrade-control-plane (action upgrade): kubeadm upgrade apply.
#
# Runs on the cluster's first control-plane node (scope control_plane), as root over SSH, with
# its own /etc/kubernetes/admin.conf. The steps kubeadm documents for a control-plane node:
#   1. the pkgs.k8s.io repository of the target minor; kubeadm at the exact target version;
#   2. `kubeadm upgrade plan` (kubeadm's own checks: one minor at a time, a healthy control
#      plane), then `kubeadm upgrade apply` (the static pods, etcd, CoreDNS, kube-proxy);
#   3. the node drained, kubelet and kubectl upgraded, kubelet restarted, the node uncordoned.
# Refuses, changing nothing, a downgrade or a jump of more than one minor. Idempotent: a control
# plane already at the target only has its kubelet brought up to it (and is uncordoned).
# Workers follow in upgrade-worker, one at a time.
#
# Conventions (packs/README.md): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: kubernetes_version (the exact target, 1.31.2), drain_timeout
# Provides:   kubernetes.control_plane.upgraded
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/node-lib.sh
. "$OPSGRAPH_LIB/node-lib.sh"
on_node

needs_root
upgrade_params
ADMIN=/etc/kubernetes/admin.conf
[ -r "$ADMIN" ] || fail "$ADMIN not found: this is not the cluster's first control-plane node"
kubectl_admin() { kubectl --kubeconfig "$ADMIN" "$@"; }
NODE=$(node_name)

# The API server's version, and whether the target is a step kubeadm takes.
served=$(kubectl_admin get --raw /version) || fail "the API server does not answer: repair the cluster before upgrading it"
running=$(printf '%s\n' "$served" | sed -n 's/.*"gitVersion": *"v\([0-9.]*\)".*/\1/p')
[ -n "$running" ] || fail "cannot read the API server's version from /version"
from_minor=$(printf '%s\n' "$running" | cut -d. -f2)
to_minor=$(printf '%s\n' "$MINOR" | cut -d. -f2)
[ "$to_minor" -ge "$from_minor" ] || fail "the cluster runs $running; $K8S_VERSION is older: kubeadm does not downgrade"
[ "$to_minor" -le $((from_minor + 1)) ] ||
    fail "the cluster runs $running; kubeadm upgrades one minor at a time: upgrade to 1.$((from_minor + 1)) first"

upgrade_kubeadm

if [ "$running" != "$K8S_VERSION" ]; then
    kubeadm upgrade plan "v$K8S_VERSION" >&2
    log "kubeadm upgrade apply: $running -> $K8S_VERSION"
    kubeadm upgrade apply --yes "v$K8S_VERSION" >&2
else
    log "the control plane already runs $K8S_VERSION"
fi

if kubelet_outdated; then
    upgrade_kubelet kubectl_admin
fi
kubectl_admin uncordon "$NODE"

wait_api_ready "the API server is not ready after the upgrade"
log "ok: control plane at $K8S_VERSION; node $NODE uncordoned"
