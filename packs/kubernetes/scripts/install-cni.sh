#!/bin/sh
# opsgraph pack kubernetes - job install-cni: the pod network (Calico or Flannel).
#
# Runs on the control-plane node (scope control_plane) over SSH, with the admin kubeconfig
# from the kubeconfig_admin artifact. Downloads the CNI's release manifest, renders the pod
# CIDR into it, applies it server-side (idempotent; no last-applied annotation size limit),
# and waits for the CNI agents and CoreDNS (which only starts once pods have a network).
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#
# Parameters: cni (calico|flannel), calico_version, flannel_version, pod_cidr,
#             cni_manifest_sha256 (optional pin of the downloaded manifest)
# Requires:   kubeconfig_admin (OPSGRAPH_ARTIFACT_KUBECONFIG_ADMIN)
# Provides:   kubernetes.cni
# Produces:   cni_manifest
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/node-lib.sh
. "$OPSGRAPH_LIB/node-lib.sh"

KUBECONFIG=${OPSGRAPH_ARTIFACT_KUBECONFIG_ADMIN:?the kubeconfig_admin artifact is required}
export KUBECONFIG
needs_out
CNI=${OPSGRAPH_PARAM_CNI:-calico}
POD_CIDR=${OPSGRAPH_PARAM_POD_CIDR:-10.244.0.0/16}
SHA256=${OPSGRAPH_PARAM_CNI_MANIFEST_SHA256:-}
matches '([0-9]{1,3}\.){3}[0-9]{1,3}/[0-9]{1,2}' "$POD_CIDR" || fail "pod_cidr '$POD_CIDR' is not a CIDR"

case $CNI in
    calico)
        VERSION=${OPSGRAPH_PARAM_CALICO_VERSION:-v3.28.1}
        URL="https://raw.githubusercontent.com/projectcalico/calico/$VERSION/manifests/calico.yaml"
        ;;
    flannel)
        VERSION=${OPSGRAPH_PARAM_FLANNEL_VERSION:-v0.25.6}
        URL="https://github.com/flannel-io/flannel/releases/download/$VERSION/kube-flannel.yml"
        ;;
    *) fail "cni '$CNI' is not supported (calico or flannel)" ;;
esac
matches 'v[0-9]+\.[0-9]+\.[0-9]+' "$VERSION" || fail "$CNI version '$VERSION' is not vX.Y.Z"

kubectl get --raw=/readyz >/dev/null || fail "the API server is not ready"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
curl -fsSL --retry 3 -o "$work/upstream.yaml" "$URL" || fail "cannot download $URL"
if [ -n "$SHA256" ]; then
    echo "$SHA256  $work/upstream.yaml" | sha256sum -c --status || fail "$URL does not have SHA-256 $SHA256"
fi

case $CNI in
    calico)
        # The manifest ships CALICO_IPV4POOL_CIDR commented out; enable it with our CIDR.
        sed -e 's|# - name: CALICO_IPV4POOL_CIDR|- name: CALICO_IPV4POOL_CIDR|' \
            -e "s|#   value: \"192.168.0.0/16\"|  value: \"$POD_CIDR\"|" \
            "$work/upstream.yaml" >"$work/manifest.yaml"
        if ! grep -Eq '^[[:space:]]*- name: CALICO_IPV4POOL_CIDR$' "$work/manifest.yaml" ||
            ! grep -Eq "^[[:space:]]*value: \"$POD_CIDR\"\$" "$work/manifest.yaml"; then
            fail "the calico $VERSION manifest has no CALICO_IPV4POOL_CIDR to set"
        fi
        ;;
    flannel)
        sed -e "s|\"Network\": \"10.244.0.0/16\"|\"Network\": \"$POD_CIDR\"|" \
            "$work/upstream.yaml" >"$work/manifest.yaml"
        grep -q "\"Network\": \"$POD_CIDR\"" "$work/manifest.yaml" ||
            fail "the flannel $VERSION manifest has no net-conf Network to set"
        ;;
esac

log "applying $CNI $VERSION with pod CIDR $POD_CIDR"
kubectl apply --server-side --force-conflicts --field-manager=opsgraph -f "$work/manifest.yaml"

case $CNI in
    calico)
        kubectl -n kube-system rollout status daemonset/calico-node --timeout=10m
        kubectl -n kube-system rollout status deployment/calico-kube-controllers --timeout=10m
        ;;
    flannel)
        kubectl -n kube-flannel rollout status daemonset/kube-flannel-ds --timeout=10m
        ;;
esac
kubectl -n kube-system rollout status deployment/coredns --timeout=10m

mkdir -p "$OPSGRAPH_OUT"
cp "$work/manifest.yaml" "$OPSGRAPH_OUT/cni_manifest"
log "ok: $CNI $VERSION ready, CoreDNS available"
