#!/bin/sh
# opsgraph pack lab-cluster - job init-control-plane: "kubeadm init" on the lab control plane.
#
# Runs on the single node of scope control_plane once every node has its runtime. Checks the
# node's containerd, "pulls" the control-plane images, writes the cluster's admin kubeconfig
# (<node>/kubernetes/admin.conf: cluster, server, CA hash, admin token; kept on later runs), a
# bootstrap token (<node>/kubernetes/tokens), starts the "apiserver" and the node's "kubelet"
# (background loops that beat only while containerd runs), and registers the node as the
# cluster's control plane in <lab>/<cluster>/nodes/<node>.
#
# Failure switch (scripts/lib/lab-lib.sh): `exit` fails with kubeadm's image pull error from
# registry-1.docker.io (the registry-unreachable remedy's signature) unless the node has a
# registry mirror (<node>/registry-mirror, written by configure-containerd-registry-mirror);
# the switch file fails it whatever the mirror.
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: kubernetes_version, pod_cidr, image_repository, join_token_ttl, fail_job, fail_mode
# Provides:   lab.kubernetes.control_plane
# Produces:   kubeconfig_admin (secret), join_token (secret)
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node cluster
# shellcheck source-path=SCRIPTDIR source=cluster-lib.sh disable=SC1091
. "$LAB_SCRIPTS/cluster-lib.sh"

K8S_VERSION=${OPSGRAPH_PARAM_KUBERNETES_VERSION:-1.30}
K8S_VERSION=${K8S_VERSION#v}
REPO=${OPSGRAPH_PARAM_IMAGE_REPOSITORY:-registry.k8s.io}
TOKEN_TTL=${OPSGRAPH_PARAM_JOIN_TOKEN_TTL:-2h}
matches '1\.[0-9]{2}(\.[0-9]{1,3})?' "$K8S_VERSION" || fail "kubernetes_version '$K8S_VERSION' is not a version"
matches '[a-z0-9][-a-z0-9.:/_]*' "$REPO" || fail "image_repository '$REPO' is not a repository"
TTL=$(seconds "$TOKEN_TTL") || fail "join_token_ttl '$TOKEN_TTL' is not a duration such as 2h"
case $K8S_VERSION in *.*.*) TAG=v$K8S_VERSION ;; *) TAG=v$K8S_VERSION.0 ;; esac

lab_alive containerd "$NODE_DIR" ||
    fail "[ERROR CRI]: container runtime is not running: output: time=\"$(date -u '+%Y-%m-%dT%H:%M:%SZ')\" level=fatal msg=\"validate service connection: CRI v1 runtime API is not implemented for endpoint \\\"unix:///run/containerd/containerd.sock\\\"\""
[ -f "$NODE_DIR/kubernetes/version.env" ] || fail "kubeadm is not installed on $NODE: install-runtime has not run"
[ -x "$NODE_DIR/bin/lab-daemon" ] || fail "$NODE_DIR/bin/lab-daemon is missing: install-runtime has not run"

PULL_ERROR="failed to pull image \"registry-1.docker.io/library/kube-apiserver:$TAG\": failed to resolve reference: failed to do request: Head \"https://registry-1.docker.io/v2/library/kube-apiserver/manifests/$TAG\": dial tcp 54.236.113.205:443: i/o timeout"
registry_error() {
    lab_fail_now "[init] Using Kubernetes version: $TAG" \
        "[preflight] Running pre-flight checks" \
        "[preflight] Pulling images required for setting up a Kubernetes cluster" \
        "error execution phase preflight: [preflight] Some fatal errors occurred:" \
        "	[ERROR ImagePull]: $PULL_ERROR"
}
MIRROR=$(head -n 1 "$NODE_DIR/registry-mirror" 2>/dev/null || true)
case $(lab_fail_mode) in
    file) registry_error ;;
    exit)
        if [ -n "$MIRROR" ]; then
            log "registry-1.docker.io is unreachable; pulling through the mirror $MIRROR"
        else
            registry_error
        fi
        ;;
    evidence) LAB_UNPROVEN=1 ;;
    hang) lab_hang ;;
esac

# The images kubeadm pulls (already there when pre-pull-kubernetes-images ran).
mkdir -p "$NODE_DIR/images"
for image in kube-apiserver kube-controller-manager kube-scheduler kube-proxy; do
    [ -f "$NODE_DIR/images/${image}_$TAG" ] || printf '%s/%s:%s\n' "$REPO" "$image" "$TAG" >"$NODE_DIR/images/${image}_$TAG"
done

ADMIN=$NODE_DIR/kubernetes/admin.conf
TOKENS=$NODE_DIR/kubernetes/tokens
API_SERVER=$NODE:6443
if [ -f "$ADMIN" ]; then
    existing=$(kcfg "$ADMIN" cluster)
    [ "$existing" = "$CLUSTER" ] ||
        fail "$NODE is already the control plane of cluster '$existing': run lab-reset on it first"
    log "control plane of $CLUSTER already initialised"
else
    log "initialising the control plane of $CLUSTER ($TAG)"
    write_kubeconfig "$ADMIN" kubernetes-admin "$API_SERVER" "sha256:$(random_hex 64)" "$(random_hex 32)"
fi
CA_HASH=$(kcfg "$ADMIN" certificate-authority-hash)
matches 'sha256:[0-9a-f]{64}' "$CA_HASH" || fail "$ADMIN has no valid CA hash: run lab-reset on $NODE"
bootstrap_token "$TOKENS" "$TTL"

if lab_proven; then
    lab_start apiserver "$NODE_DIR" sh "$NODE_DIR/bin/lab-daemon" apiserver "$NODE_DIR" containerd
fi
# The control-plane node is a node of the cluster too.
[ -f "$NODE_DIR/kubernetes/kubelet.conf" ] ||
    write_kubeconfig "$NODE_DIR/kubernetes/kubelet.conf" "system:node:$NODE" "$API_SERVER" "$CA_HASH" "$(random_hex 32)"
lab_start kubelet "$NODE_DIR" sh "$NODE_DIR/bin/lab-daemon" kubelet "$NODE_DIR" containerd
[ -f "$CLUSTER_DIR/nodes/$NODE" ] || register_node control-plane Joined

lab_artifact kubeconfig_admin <"$ADMIN"
{
    printf 'CLUSTER=%s\n' "$CLUSTER"
    printf 'CONTROL_PLANE=%s\n' "$NODE"
    printf 'API_SERVER=%s\n' "$API_SERVER"
    printf 'TOKEN=%s\n' "$BOOTSTRAP_TOKEN"
    printf 'CA_CERT_HASH=%s\n' "$CA_HASH"
    printf 'EXPIRES=%s\n' "$TOKEN_EXPIRES"
} | lab_artifact join_token
log "ok: control plane of $CLUSTER on $NODE ($API_SERVER)"
