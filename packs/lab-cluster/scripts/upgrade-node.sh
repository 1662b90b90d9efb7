#!/bin/sh
# opsgraph pack lab-cluster - jobs upgrade-node and revert-node-version: "kubeadm upgrade node".
#
# Runs on each node of an existing cluster (target_nodes). Sets the node's version.env to
# kubernetes_version and restarts its kubelet, as an upgrade of the node's packages would; the
# node then reports that version (evidence lab_node_version; the cluster's observed version
# comes from the control plane's version.env). revert-node-version, the rollback of
# upgrade-node, runs this script with the version the cluster's record had before the upgrade.
# Idempotent: a node already at the version only gets its kubelet started if it stopped.
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: kubernetes_version, fail_job, fail_mode
# Provides:   lab.kubernetes.node.upgraded (upgrade-node)
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node

K8S_VERSION=${OPSGRAPH_PARAM_KUBERNETES_VERSION:-}
K8S_VERSION=${K8S_VERSION#v}
matches '1\.[0-9]{2}(\.[0-9]{1,3})?' "$K8S_VERSION" || fail "kubernetes_version '$K8S_VERSION' is not a version"
VERSION_ENV=$NODE_DIR/kubernetes/version.env
[ -f "$VERSION_ENV" ] || fail "kubeadm is not installed on $NODE ($VERSION_ENV is missing): it is not a node of the cluster"
[ -f "$NODE_DIR/kubernetes/kubelet.conf" ] || [ -f "$NODE_DIR/kubernetes/admin.conf" ] ||
    fail "$NODE has not joined a cluster: nothing to upgrade"
FROM=$(kv "$VERSION_ENV" KUBERNETES_VERSION)

lab_failpoint "[upgrade/node] FATAL: failed to pull images for Kubernetes v$K8S_VERSION on $NODE"

if [ "$FROM" = "$K8S_VERSION" ]; then
    log "$NODE already runs Kubernetes $K8S_VERSION"
elif lab_proven; then
    log "$NODE: Kubernetes $FROM -> $K8S_VERSION"
    printf 'KUBERNETES_VERSION=%s\n' "$K8S_VERSION" | write_file "$VERSION_ENV"
    lab_stop kubelet "$NODE_DIR"
fi
if lab_proven; then
    lab_start kubelet "$NODE_DIR" sh "$NODE_DIR/bin/lab-daemon" kubelet "$NODE_DIR" containerd
fi
log "ok: $NODE reports Kubernetes $(kv "$VERSION_ENV" KUBERNETES_VERSION)"
