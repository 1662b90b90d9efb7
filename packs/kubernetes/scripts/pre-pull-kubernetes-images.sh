#!/bin/sh
# opsgraph pack kubernetes - job pre-pull-kubernetes-images (remedy registry-unreachable).
#
# Runs on every node of scope target_nodes, as root over SSH, after the mirrors are in
# place. Pulls the control-plane images of the installed kubeadm version and, for Calico,
# the CNI images, so the retried kubeadm init and the CNI rollout find them locally.
# Idempotent: images already present are not downloaded again.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#
# Parameters: image_repository, cni, calico_version
# Provides:   kubernetes.images.cached
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/node-lib.sh
. "$OPSGRAPH_LIB/node-lib.sh"
on_node

needs_root
SOCK=unix:///run/containerd/containerd.sock
IMAGE_REPOSITORY=${OPSGRAPH_PARAM_IMAGE_REPOSITORY:-registry.k8s.io}
CNI=${OPSGRAPH_PARAM_CNI:-calico}
CALICO_VERSION=${OPSGRAPH_PARAM_CALICO_VERSION:-v3.28.1}
matches '[a-z0-9][-a-z0-9.:/_]*' "$IMAGE_REPOSITORY" || fail "image_repository '$IMAGE_REPOSITORY' is not a repository"
matches 'v[0-9]+\.[0-9]+\.[0-9]+' "$CALICO_VERSION" || fail "calico_version '$CALICO_VERSION' is not vX.Y.Z"
VERSION=$(kubeadm version -o short)

# pull IMAGE: pulls unless present, three attempts.
pull() {
    if crictl --runtime-endpoint "$SOCK" inspecti "$1" >/dev/null 2>&1; then
        return 0
    fi
    for attempt in 1 2 3; do
        if crictl --runtime-endpoint "$SOCK" pull "$1" >/dev/null; then
            log "pulled $1"
            return 0
        fi
        log "pull of $1 failed (attempt $attempt)"
        sleep $((attempt * 10))
    done
    fail "cannot pull $1"
}

for image in $(kubeadm config images list --kubernetes-version "$VERSION" --image-repository "$IMAGE_REPOSITORY"); do
    pull "$image"
done
if [ "$CNI" = calico ]; then
    for name in cni node kube-controllers; do
        pull "docker.io/calico/$name:$CALICO_VERSION"
    done
fi
log "ok: images for Kubernetes $VERSION present"
