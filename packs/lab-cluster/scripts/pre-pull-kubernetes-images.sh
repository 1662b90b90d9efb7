#!/bin/sh
# opsgraph pack lab-cluster - job pre-pull-kubernetes-images (registry-unreachable remedy).
#
# Runs on each node of target_nodes once the mirror is configured and containerd restarted.
# "Pulls" the seven images kubeadm needs through the mirror containerd loaded: one file per
# image in <node>/images (kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy,
# etcd, coredns, pause).
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: kubernetes_version, image_repository, fail_job, fail_mode
# Provides:   lab.kubernetes.images.cached
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node

K8S_VERSION=${OPSGRAPH_PARAM_KUBERNETES_VERSION:-1.30}
K8S_VERSION=${K8S_VERSION#v}
REPO=${OPSGRAPH_PARAM_IMAGE_REPOSITORY:-registry.k8s.io}
matches '1\.[0-9]{2}(\.[0-9]{1,3})?' "$K8S_VERSION" || fail "kubernetes_version '$K8S_VERSION' is not a version"
matches '[a-z0-9][-a-z0-9.:/_]*' "$REPO" || fail "image_repository '$REPO' is not a repository"
case $K8S_VERSION in *.*.*) TAG=v$K8S_VERSION ;; *) TAG=v$K8S_VERSION.0 ;; esac

lab_wait_fresh containerd "$NODE_DIR" || fail "containerd is not running on $NODE"
MIRROR=$(kv "$NODE_DIR/run/containerd.loaded" REGISTRY_MIRROR)
[ -n "$MIRROR" ] || fail "containerd on $NODE has not loaded a registry mirror: run restart-containerd"

lab_failpoint "E0101 00:00:00.000000 failed to pull image \"$REPO/kube-apiserver:$TAG\": rpc error: code = DeadlineExceeded desc = failed to pull and unpack image: context deadline exceeded"

mkdir -p "$NODE_DIR/images"
pulled=0
for image in "kube-apiserver:$TAG" "kube-controller-manager:$TAG" "kube-scheduler:$TAG" \
    "kube-proxy:$TAG" etcd:3.5.15-0 coredns:v1.11.1 pause:3.9; do
    file=$NODE_DIR/images/$(printf '%s' "$image" | tr ':' '_')
    if [ ! -f "$file" ]; then
        printf '%s/%s via %s\n' "$REPO" "$image" "$MIRROR" >"$file"
        pulled=$((pulled + 1))
    fi
    lab_proven || rm -f "$file"
done
log "ok: $pulled image(s) pulled through $MIRROR"
