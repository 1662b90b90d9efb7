#!/bin/sh
# opsgraph pack kubernetes - job validate-inputs: validate the cluster parameters.
#
# Runs once, on the control host (executor local). Reads only parameters; writes the
# cluster spec that validate-nodes and validate-credentials check against.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased (OPSGRAPH_PARAM_POD_CIDR)
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#   OPSGRAPH_INTENT_NAME the name of the resource the operation creates (the cluster)
#
# Parameters: kubernetes_version, cluster_name, pod_cidr, service_cidr, cni,
#             control_plane_endpoint
# Produces:   cluster_spec - KEY=value lines, every value matched against a strict pattern
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/node-lib.sh
. "$OPSGRAPH_LIB/node-lib.sh"

# cidr_range CIDR: prints "first end" (end exclusive) as integers.
cidr_range() {
    printf '%s\n' "$1" | awk -F'[./]' '{
        s = (($1 * 256 + $2) * 256 + $3) * 256 + $4
        printf "%.0f %.0f\n", s, s + 2 ^ (32 - $5)
    }'
}

# cidr_ok CIDR MINPREFIX MAXPREFIX: an IPv4 network address with its prefix in range.
cidr_ok() {
    matches '([0-9]{1,3}\.){3}[0-9]{1,3}/[0-9]{1,2}' "$1" || return 1
    printf '%s\n' "$1" | awk -F'[./]' -v lo="$2" -v hi="$3" '{
        for (i = 1; i <= 4; i++) if ($i > 255) exit 1
        if ($5 < lo || $5 > hi) exit 1
        s = (($1 * 256 + $2) * 256 + $3) * 256 + $4
        size = 2 ^ (32 - $5)
        if (s % size != 0) exit 1
    }'
}

needs_out

CLUSTER_NAME=${OPSGRAPH_PARAM_CLUSTER_NAME:-${OPSGRAPH_INTENT_NAME:-}}
K8S_VERSION=${OPSGRAPH_PARAM_KUBERNETES_VERSION:-1.30}
K8S_VERSION=${K8S_VERSION#v}
POD_CIDR=${OPSGRAPH_PARAM_POD_CIDR:-10.244.0.0/16}
SERVICE_CIDR=${OPSGRAPH_PARAM_SERVICE_CIDR:-10.96.0.0/12}
CNI=${OPSGRAPH_PARAM_CNI:-calico}
ENDPOINT=${OPSGRAPH_PARAM_CONTROL_PLANE_ENDPOINT:-}

# Cluster name: a DNS-1123 label (it ends up in kubeconfig contexts and certificates).
if ! matches '[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?' "$CLUSTER_NAME"; then
    problem "cluster name '$CLUSTER_NAME' is not a DNS label (set the intent's name or cluster_name)"
fi

# Version: a supported minor (pkgs.k8s.io serves v1.24 and later), optionally with a patch.
if matches '1\.(2[4-9]|[3-9][0-9])(\.[0-9]{1,3})?' "$K8S_VERSION"; then
    K8S_MINOR=$(printf '%s\n' "$K8S_VERSION" | cut -d. -f1-2)
    K8S_PATCH=$(printf '%s\n' "$K8S_VERSION" | cut -s -d. -f3)
else
    problem "kubernetes_version '$K8S_VERSION' is not 1.<minor> or 1.<minor>.<patch> with minor >= 24"
    K8S_MINOR=
    K8S_PATCH=
fi

# Networks: the pod network must leave room for per-node /24s; the API server accepts a
# service range of at most /12.
cidr_ok "$POD_CIDR" 8 22 || problem "pod_cidr '$POD_CIDR' is not an IPv4 network between /8 and /22"
cidr_ok "$SERVICE_CIDR" 12 28 || problem "service_cidr '$SERVICE_CIDR' is not an IPv4 network between /12 and /28"
if cidr_ok "$POD_CIDR" 8 22 && cidr_ok "$SERVICE_CIDR" 12 28; then
    # shellcheck disable=SC2046 # two numbers each, split on purpose
    set -- $(cidr_range "$POD_CIDR") $(cidr_range "$SERVICE_CIDR")
    if awk -v a="$1" -v b="$2" -v c="$3" -v d="$4" 'BEGIN { exit !(a < d && c < b) }'; then
        problem "pod_cidr $POD_CIDR overlaps service_cidr $SERVICE_CIDR"
    fi
fi

case $CNI in
    calico | flannel) ;;
    *) problem "cni '$CNI' is not supported (calico or flannel)" ;;
esac

if [ -n "$ENDPOINT" ] && ! matches '[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?(:[0-9]{1,5})?' "$ENDPOINT"; then
    problem "control_plane_endpoint '$ENDPOINT' is not host or host:port"
fi

if [ "$errors" -gt 0 ]; then
    log "$errors problem(s); nothing written"
    exit 1
fi

mkdir -p "$OPSGRAPH_OUT"
tmp="$OPSGRAPH_OUT/.cluster_spec.$$"
trap 'rm -f "$tmp"' EXIT
{
    printf 'CLUSTER_NAME=%s\n' "$CLUSTER_NAME"
    printf 'KUBERNETES_MINOR=%s\n' "$K8S_MINOR"
    printf 'KUBERNETES_PATCH=%s\n' "$K8S_PATCH"
    printf 'POD_CIDR=%s\n' "$POD_CIDR"
    printf 'SERVICE_CIDR=%s\n' "$SERVICE_CIDR"
    printf 'CNI=%s\n' "$CNI"
    printf 'CONTROL_PLANE_ENDPOINT=%s\n' "$ENDPOINT"
} >"$tmp"
mv -f "$tmp" "$OPSGRAPH_OUT/cluster_spec"
log "ok: cluster $CLUSTER_NAME, Kubernetes $K8S_VERSION, pods $POD_CIDR, services $SERVICE_CIDR, $CNI"
