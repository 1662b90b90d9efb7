#!/bin/sh
# opsgraph pack kubernetes - job configure-containerd-registry-mirror (remedy
# registry-unreachable): pull-through mirrors for containerd.
#
# Runs on every node of scope target_nodes, as root over SSH. Writes containerd's
# per-registry hosts.toml files (docker.io -> registry_mirror; registry.k8s.io ->
# k8s_registry_mirror when given); the upstream stays the fallback. Makes sure config.toml
# reads /etc/containerd/certs.d (install-runtime already sets it). containerd reads
# hosts.toml on each pull; restart-containerd applies a changed config.toml.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#
# Parameters: registry_mirror (https://mirror.gcr.io), k8s_registry_mirror (optional)
# Provides:   container.runtime.registry_mirror
# Produces:   registry_mirror_config
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/node-lib.sh
. "$OPSGRAPH_LIB/node-lib.sh"
on_node

needs_out
needs_root
MIRROR=${OPSGRAPH_PARAM_REGISTRY_MIRROR:-https://mirror.gcr.io}
K8S_MIRROR=${OPSGRAPH_PARAM_K8S_REGISTRY_MIRROR:-}
URL_RE='https?://[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?(:[0-9]{1,5})?(/[-A-Za-z0-9._/]*)?'
matches "$URL_RE" "$MIRROR" || fail "registry_mirror '$MIRROR' is not an http(s) URL"
[ -z "$K8S_MIRROR" ] || matches "$URL_RE" "$K8S_MIRROR" || fail "k8s_registry_mirror '$K8S_MIRROR' is not an http(s) URL"

# hosts_toml UPSTREAM MIRROR: the hosts.toml that tries MIRROR first, then UPSTREAM.
hosts_toml() {
    printf '# managed by opsgraph (pack kubernetes, job configure-containerd-registry-mirror)\n'
    printf 'server = "%s"\n\n' "$1"
    printf '[host."%s"]\n' "$2"
    printf '  capabilities = ["pull", "resolve"]\n'
}

install -d -m 0755 /etc/containerd/certs.d/docker.io
hosts_toml https://registry-1.docker.io "$MIRROR" | write_file /etc/containerd/certs.d/docker.io/hosts.toml 0644
if [ -n "$K8S_MIRROR" ]; then
    install -d -m 0755 /etc/containerd/certs.d/registry.k8s.io
    hosts_toml https://registry.k8s.io "$K8S_MIRROR" | write_file /etc/containerd/certs.d/registry.k8s.io/hosts.toml 0644
fi

# containerd must read certs.d. Older hand-made configs may lack it.
CONFIG=/etc/containerd/config.toml
if ! grep -Eq "config_path = [\"'][^\"']*/etc/containerd/certs.d" "$CONFIG"; then
    grep -Eq "config_path = (\"\"|'')\$" "$CONFIG" ||
        fail "$CONFIG has no empty registry config_path to set; configure it by hand"
    cp -p "$CONFIG" "$CONFIG.opsgraph.$(date +%Y%m%d%H%M%S)"
    sed -i -e "s|^\([[:space:]]*config_path = \)\"\"\$|\1\"/etc/containerd/certs.d\"|" \
        -e "s|^\([[:space:]]*config_path = \)''\$|\1'/etc/containerd/certs.d'|" "$CONFIG"
    log "set config_path in $CONFIG (restart-containerd applies it)"
fi

mkdir -p "$OPSGRAPH_OUT"
for f in /etc/containerd/certs.d/*/hosts.toml; do
    [ -f "$f" ] || continue
    printf '### %s\n' "$f"
    cat "$f"
done >"$OPSGRAPH_OUT/registry_mirror_config"
log "ok: docker.io via $MIRROR${K8S_MIRROR:+, registry.k8s.io via $K8S_MIRROR}"
