#!/bin/sh
# opsgraph pack lab-cluster - job install-runtime: "containerd" and "kubeadm" on a lab node.
#
# Runs on each node of target_nodes once its network is prepared. Installs the lab daemon as
# <node>/bin/lab-daemon, writes <node>/etc/containerd.conf (with the registry mirror when
# <node>/registry-mirror exists) and <node>/kubernetes/version.env ("kubeadm" of the version),
# and starts the node's "containerd": a background loop writing <node>/run/containerd.heartbeat
# every second (pid in <node>/run/containerd.pid). Idempotent: a running containerd is kept.
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: kubernetes_version, fail_job, fail_mode
# Provides:   lab.container.runtime, lab.node.kubeadm
# Produces:   containerd_config_snapshot
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node

K8S_VERSION=${OPSGRAPH_PARAM_KUBERNETES_VERSION:-1.30}
K8S_VERSION=${K8S_VERSION#v}
matches '1\.[0-9]{2}(\.[0-9]{1,3})?' "$K8S_VERSION" || fail "kubernetes_version '$K8S_VERSION' is not a version"
[ "$(kv "$NODE_DIR/etc/network.conf" IP_FORWARD)" = 1 ] ||
    fail "$NODE_DIR/etc/network.conf is missing or has no forwarding: prepare-network has not run"

lab_failpoint "E: Failed to fetch https://download.docker.com/linux/debian/dists/bookworm/InRelease  Could not connect to download.docker.com:443 (18.154.132.17), connection timed out" \
    "E: Unable to locate package containerd.io"

mkdir -p "$NODE_DIR/bin" "$NODE_DIR/etc" "$NODE_DIR/kubernetes" "$NODE_DIR/run" "$NODE_DIR/log"
write_file "$NODE_DIR/bin/lab-daemon" 0755 <"$LAB_SCRIPTS/lab-daemon.sh"
MIRROR=$(head -n 1 "$NODE_DIR/registry-mirror" 2>/dev/null || true)
{
    printf 'NODE=%s\n' "$NODE"
    printf 'SYSTEMD_CGROUP=true\n'
    printf 'SANDBOX_IMAGE=registry.k8s.io/pause:3.9\n'
    if [ -n "$MIRROR" ]; then printf 'REGISTRY_MIRROR=%s\n' "$MIRROR"; fi
} | write_file "$NODE_DIR/etc/containerd.conf"
printf 'KUBERNETES_VERSION=%s\n' "$K8S_VERSION" | write_file "$NODE_DIR/kubernetes/version.env"

if lab_proven; then
    lab_start containerd "$NODE_DIR" sh "$NODE_DIR/bin/lab-daemon" containerd "$NODE_DIR"
fi
lab_artifact containerd_config_snapshot <"$NODE_DIR/etc/containerd.conf"
log "ok: containerd and kubeadm $K8S_VERSION on $NODE"
