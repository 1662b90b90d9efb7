#!/bin/sh
# opsgraph pack kubernetes - job install-runtime: containerd (and runc), nothing from pkgs.k8s.io.
#
# Runs on every node of scope target_nodes, as root over SSH.
#   - kubeadm's prerequisites (conntrack, socat, ethtool, iptables) from the distribution;
#   - containerd: runtime_source auto (the default) keeps Docker's containerd.io when it is
#     installed and otherwise installs the distribution's containerd; runtime_source debian
#     installs containerd and runc from Debian's archive and refuses a node with containerd.io.
#     Configured with the systemd cgroup driver and registry hosts read from
#     /etc/containerd/certs.d (where mirror jobs drop hosts.toml). The sandbox (pause) image is
#     kubeadm's, set by install-kubeadm, which runs next and is the first job to need pkgs.k8s.io.
# Idempotent: the containerd config is rewritten (and containerd restarted) only when it differs;
# a sandbox image install-kubeadm set is kept.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#
# Parameters: runtime_source (auto | debian)
#             image_repository, image_repository_insecure (true: containerd pulls from that
#             registry over plain HTTP, through /etc/containerd/certs.d/<host:port>/hosts.toml)
# Provides:   container.runtime.containerd
# Produces:   containerd_config_snapshot
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/node-lib.sh
. "$OPSGRAPH_LIB/node-lib.sh"
on_node

needs_out
needs_root

RUNTIME_SOURCE=${OPSGRAPH_PARAM_RUNTIME_SOURCE:-auto}
case $RUNTIME_SOURCE in
    auto | debian) ;;
    *) fail "runtime_source '$RUNTIME_SOURCE' is not auto or debian" ;;
esac

REPO=${OPSGRAPH_PARAM_IMAGE_REPOSITORY:-registry.k8s.io}
REGISTRY=${REPO%%/*}
case ${OPSGRAPH_PARAM_IMAGE_REPOSITORY_INSECURE:-false} in
    true | false) ;;
    *) fail "image_repository_insecure must be true or false, not '${OPSGRAPH_PARAM_IMAGE_REPOSITORY_INSECURE}'" ;;
esac
matches '[a-z0-9]([-a-z0-9.]*[a-z0-9])?(:[0-9]{1,5})?' "$REGISTRY" ||
    fail "image_repository '$REPO' does not start with a registry host[:port]"

export DEBIAN_FRONTEND=noninteractive

# 1. Prerequisites (kubeadm preflight wants conntrack, socat, ethtool, iptables).
apt_get update
apt_install ca-certificates curl gpg conntrack socat ethtool iptables iproute2

# 2. containerd (and runc): from Debian's archive they need nothing else.
if [ -n "$(installed_version containerd.io)" ]; then
    [ "$RUNTIME_SOURCE" = auto ] \
        || fail "runtime_source debian: Docker's containerd.io is installed; remove it (apt-get remove containerd.io) or use runtime_source auto"
    CONTAINERD_PKG=containerd.io
else
    CONTAINERD_PKG=containerd
    runtime_pkgs=containerd
    [ "$RUNTIME_SOURCE" = auto ] || runtime_pkgs="containerd runc"
    for pkg in $runtime_pkgs; do
        if [ -z "$(installed_version "$pkg")" ]; then
            apt_install "$pkg"
            log "installed $pkg $(installed_version "$pkg") from the distribution's archive"
        fi
    done
fi
command -v containerd >/dev/null 2>&1 || fail "containerd binary missing after installing $CONTAINERD_PKG"

# 3. containerd's configuration; the sandbox image install-kubeadm chose is kept.
PAUSE_IMAGE=
if [ -f /etc/containerd/config.toml ]; then
    PAUSE_IMAGE=$(sed -n -e "s|^[[:space:]]*sandbox_image = \"\(.*\)\"\$|\1|p" \
        -e "s|^[[:space:]]*sandbox = '\(.*\)'\$|\1|p" /etc/containerd/config.toml | head -n 1)
fi
install -d -m 0755 /etc/containerd /etc/containerd/certs.d
config=$(mktemp)
trap 'rm -f "$config"' EXIT
{
    printf '# managed by opsgraph (pack kubernetes, jobs install-runtime and install-kubeadm): containerd\n'
    printf '# defaults plus SystemdCgroup, the kubeadm pause image, and registry hosts from /etc/containerd/certs.d\n'
    containerd config default
} >"$config"
# containerd 1.x writes "..." and 2.x '...' strings; both layouts are handled.
sed -i \
    -e 's/SystemdCgroup = false/SystemdCgroup = true/' \
    -e "s|^\([[:space:]]*config_path = \)\"\"\$|\1\"/etc/containerd/certs.d\"|" \
    -e "s|^\([[:space:]]*config_path = \)''\$|\1'/etc/containerd/certs.d'|" \
    "$config"
if [ -n "$PAUSE_IMAGE" ]; then
    sed -i \
        -e "s|^\([[:space:]]*sandbox_image = \).*|\1\"$PAUSE_IMAGE\"|" \
        -e "s|^\([[:space:]]*sandbox = \).*|\1'$PAUSE_IMAGE'|" \
        "$config"
fi
grep -Eq 'SystemdCgroup = true' "$config" || fail "cannot set SystemdCgroup in this containerd's default config"
grep -Eq "config_path = [\"']/etc/containerd/certs.d" "$config" || fail "cannot set the registry config_path"

# A plain-HTTP image repository: containerd must be told, or every pull tries HTTPS.
if [ "${OPSGRAPH_PARAM_IMAGE_REPOSITORY_INSECURE:-false}" = true ]; then
    install -d -m 0755 "/etc/containerd/certs.d/$REGISTRY"
    write_file "/etc/containerd/certs.d/$REGISTRY/hosts.toml" 0644 <<EOT
# managed by opsgraph (pack kubernetes, job install-runtime): image_repository over plain HTTP
server = "http://$REGISTRY"

[host."http://$REGISTRY"]
  capabilities = ["pull", "resolve"]
EOT
fi

if [ -f /etc/containerd/config.toml ] && ! grep -q '^# managed by opsgraph' /etc/containerd/config.toml; then
    cp -p /etc/containerd/config.toml "/etc/containerd/config.toml.opsgraph-orig.$(date +%Y%m%d%H%M%S)"
    log "kept the previous /etc/containerd/config.toml beside it"
fi
write_file /etc/containerd/config.toml 0644 <"$config"
config_changed=$WROTE

systemctl enable containerd >/dev/null 2>&1
if [ "$config_changed" = yes ] || ! systemctl is-active --quiet containerd; then
    systemctl restart containerd
    log "containerd (re)started"
fi
i=0
until ctr version >/dev/null 2>&1; do
    i=$((i + 1))
    [ "$i" -lt 30 ] || fail "containerd does not answer on its socket"
    sleep 2
done

# 4. Artifacts.
mkdir -p "$OPSGRAPH_OUT"
cp /etc/containerd/config.toml "$OPSGRAPH_OUT/containerd_config_snapshot"
log "ok: $CONTAINERD_PKG $(installed_version "$CONTAINERD_PKG"), runc $(installed_version runc)"
