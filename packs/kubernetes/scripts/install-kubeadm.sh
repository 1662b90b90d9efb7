#!/bin/sh
# opsgraph pack kubernetes - job install-kubeadm: kubelet, kubeadm, kubectl from pkgs.k8s.io.
#
# Runs on every node of scope target_nodes, as root over SSH, after install-runtime (containerd
# is installed and answers). The first job of the pack that needs pkgs.k8s.io: where it is
# unreachable, it fails here saying so (remedy package-repository-unreachable).
#   - the pkgs.k8s.io repository of the requested minor and its signing key;
#   - kubelet, kubeadm, kubectl (and cri-tools, their dependency) at one version, held;
#   - containerd's sandbox image set to kubeadm's pause image (containerd restarted when it
#     changed), crictl pointed at containerd, kubelet enabled.
# Idempotent: an installed kubeadm of the same minor is kept at its version. A different minor
# already installed is an error: upgrades are a separate action.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#
# Parameters: kubernetes_version (1.30 or 1.30.4), image_repository (registry.k8s.io)
# Provides:   kubernetes.node.kubeadm
# Produces:   package_install_report
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/node-lib.sh
. "$OPSGRAPH_LIB/node-lib.sh"
on_node

needs_out
needs_root

k8s_version
IMAGE_REPOSITORY=${OPSGRAPH_PARAM_IMAGE_REPOSITORY:-registry.k8s.io}
matches '[a-z0-9][-a-z0-9.:/_]*' "$IMAGE_REPOSITORY" || fail "image_repository '$IMAGE_REPOSITORY' is not a repository"
[ -f /etc/containerd/config.toml ] || fail "/etc/containerd/config.toml is missing: install-runtime has not run"

export DEBIAN_FRONTEND=noninteractive

# 1. The pkgs.k8s.io repository of this minor.
k8s_repo

# 2. kubelet, kubeadm, kubectl at one version.
current=$(installed_version kubeadm)
if [ -n "$current" ]; then
    case $current in
        "$MINOR".*) ;;
        *) fail "kubeadm $current is installed; this job installs $MINOR (use the upgrade action)" ;;
    esac
    if [ -n "$PATCH" ]; then
        case $current in
            "$MINOR.$PATCH"-*) ;;
            *) fail "kubeadm $current is installed; $MINOR.$PATCH was asked for (use the upgrade action)" ;;
        esac
    fi
fi
if [ -n "$current" ]; then
    pkgver=$current
else
    pkgver=$(k8s_package_version kubeadm) || fail "apt-cache cannot list kubeadm"
    [ -n "$pkgver" ] || fail "no kubeadm $K8S_VERSION in $REPO_URL: the package repository is unreachable or does not have it (see apt-get update above)"
fi
missing=
for pkg in kubelet kubeadm kubectl; do
    [ "$(installed_version "$pkg")" = "$pkgver" ] || missing="$missing $pkg=$pkgver"
done
if [ -n "$missing" ]; then
    # shellcheck disable=SC2086 # one word per package
    apt_install --allow-change-held-packages $missing
    log "installed$missing"
fi
apt_mark hold kubelet kubeadm kubectl >/dev/null

# 3. containerd's sandbox image is kubeadm's pause image.
KUBEADM_VERSION=$(kubeadm version -o short)
PAUSE_IMAGE=$(kubeadm config images list --kubernetes-version "$KUBEADM_VERSION" \
    --image-repository "$IMAGE_REPOSITORY" | grep '/pause:' | head -n 1)
[ -n "$PAUSE_IMAGE" ] || fail "kubeadm lists no pause image"
config=$(mktemp)
trap 'rm -f "$config"' EXIT
sed -e "s|^\([[:space:]]*sandbox_image = \).*|\1\"$PAUSE_IMAGE\"|" \
    -e "s|^\([[:space:]]*sandbox = \).*|\1'$PAUSE_IMAGE'|" \
    /etc/containerd/config.toml >"$config"
grep -Fq "$PAUSE_IMAGE" "$config" || fail "cannot set the sandbox image in /etc/containerd/config.toml"
write_file /etc/containerd/config.toml 0644 <"$config"
if [ "$WROTE" = yes ] || ! systemctl is-active --quiet containerd; then
    systemctl restart containerd
    log "containerd restarted with sandbox image $PAUSE_IMAGE"
fi

write_file /etc/crictl.yaml 0644 <<'CRICTL'
# managed by opsgraph (pack kubernetes, job install-kubeadm)
runtime-endpoint: unix:///run/containerd/containerd.sock
image-endpoint: unix:///run/containerd/containerd.sock
timeout: 10
CRICTL

# kubelet restarts in a loop until kubeadm init/join writes its configuration: expected.
systemctl enable kubelet >/dev/null 2>&1

i=0
until crictl --runtime-endpoint unix:///run/containerd/containerd.sock info >/dev/null 2>&1; do
    i=$((i + 1))
    [ "$i" -lt 30 ] || fail "containerd's CRI does not answer"
    sleep 2
done

# 4. Artifacts.
mkdir -p "$OPSGRAPH_OUT"
{
    printf 'NODE=%s\n' "$(hostname)"
    printf 'KUBEADM_VERSION=%s\n' "$KUBEADM_VERSION"
    printf 'PAUSE_IMAGE=%s\n' "$PAUSE_IMAGE"
    for pkg in containerd containerd.io runc kubelet kubeadm kubectl cri-tools kubernetes-cni; do
        printf 'PACKAGE %s=%s\n' "$pkg" "$(installed_version "$pkg")"
    done
    printf 'HELD=%s\n' "$(apt_mark showhold | tr '\n' ' ')"
} >"$OPSGRAPH_OUT/package_install_report"
log "ok: kubeadm $KUBEADM_VERSION, sandbox image $PAUSE_IMAGE"
