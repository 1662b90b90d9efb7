#!/bin/sh
# opsgraph pack minio - job check-minio-prerequisites.
#
# Runs once on the control host (executor local) against the bound Kubernetes cluster.
# Read-only: API reachable, the rights the install needs, helm 3.8+, a StorageClass.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#   KUBECONFIG          the bound kubernetes.cluster's kubeconfig (set by the runtime)
#   OPSGRAPH_INTENT_NAME the release name when release_name is not given
#
# Parameters: release_name, namespace, storage_class
# Produces:   minio_preflight_report
set -eu

log() { printf 'check-minio-prerequisites: %s\n' "$*" >&2; }
errors=0
problem() { log "ERROR: $*"; errors=$((errors + 1)); }

NL='
'
matches() {
    case $2 in *"$NL"*) return 1 ;; esac
    printf '%s\n' "$2" | grep -Eqx -- "$1"
}

: "${OPSGRAPH_OUT:?OPSGRAPH_OUT must name the directory for produced artifacts}"
: "${KUBECONFIG:?KUBECONFIG must name the kubeconfig of the bound cluster}"
export KUBECONFIG
RELEASE=${OPSGRAPH_PARAM_RELEASE_NAME:-${OPSGRAPH_INTENT_NAME:-}}
NAMESPACE=${OPSGRAPH_PARAM_NAMESPACE:-$RELEASE}
STORAGE_CLASS=${OPSGRAPH_PARAM_STORAGE_CLASS:-}
matches '[a-z0-9]([-a-z0-9]{0,41}[a-z0-9])?' "$RELEASE" || problem "release name '$RELEASE' is not a DNS label of at most 43 characters"
matches '[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?' "$NAMESPACE" || problem "namespace '$NAMESPACE' is not a DNS label"

for tool in kubectl helm; do
    command -v "$tool" >/dev/null 2>&1 || problem "$tool is not installed on the control host"
done
[ "$errors" -eq 0 ] || exit 1

server=$(kubectl get --raw /version 2>/dev/null | sed -n 's/.*"gitVersion": *"\([^"]*\)".*/\1/p' | head -n 1)
[ -n "$server" ] || { log "ERROR: the cluster's API does not answer"; exit 1; }
helm_version=$(helm version --short 2>/dev/null | sed 's/+.*//')
case $helm_version in
    v3.[0-7].*) problem "helm $helm_version is too old (3.8 or later)" ;;
    v3.*) ;;
    *) problem "helm $helm_version is not helm 3" ;;
esac

if ! kubectl get namespace "$NAMESPACE" >/dev/null 2>&1; then
    [ "$(kubectl auth can-i create namespaces)" = yes ] || problem "may not create namespace $NAMESPACE"
fi
for resource in secrets configmaps services deployments statefulsets persistentvolumeclaims jobs serviceaccounts; do
    [ "$(kubectl auth can-i create "$resource" -n "$NAMESPACE")" = yes ] ||
        problem "may not create $resource in namespace $NAMESPACE"
done

if [ -n "$STORAGE_CLASS" ]; then
    kubectl get storageclass "$STORAGE_CLASS" >/dev/null 2>&1 || problem "StorageClass $STORAGE_CLASS does not exist"
    chosen=$STORAGE_CLASS
else
    chosen=$(kubectl get storageclass -o jsonpath='{range .items[?(@.metadata.annotations.storageclass\.kubernetes\.io/is-default-class=="true")]}{.metadata.name}{"\n"}{end}' | head -n 1)
    [ -n "$chosen" ] || problem "no default StorageClass; set the storage_class parameter"
fi

[ "$errors" -eq 0 ] || { log "$errors problem(s)"; exit 1; }
mkdir -p "$OPSGRAPH_OUT"
{
    printf 'SERVER_VERSION=%s\n' "$server"
    printf 'HELM_VERSION=%s\n' "$helm_version"
    printf 'RELEASE=%s\n' "$RELEASE"
    printf 'NAMESPACE=%s\n' "$NAMESPACE"
    printf 'STORAGE_CLASS=%s\n' "$chosen"
    printf 'STATUS=ok\n'
} >"$OPSGRAPH_OUT/minio_preflight_report"
log "ok: Kubernetes $server, helm $helm_version, StorageClass $chosen, namespace $NAMESPACE"
