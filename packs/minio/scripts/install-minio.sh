#!/bin/sh
# opsgraph pack minio - jobs install-minio, upgrade-minio and scale-minio: helm upgrade
# --install of charts.min.io/minio.
#
# Runs once on the control host (executor local) against the bound Kubernetes cluster.
# Values: the generated Secrets by name (existingSecret, extraSecret for the KMS key), NO
# chart-made users, policies or buckets (the chart's defaults include a console user with a
# well-known password), persistence, a memory request. `helm upgrade --install --wait` is
# idempotent; a failed release is left in place for diagnosis rather than rolled back.
# An existing distributed release keeps its shape: fewer pools than it has (a pool leaves only by
# `mc admin decommission`) or another number of pods per pool (its erasure sets) is refused
# before helm runs.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#   KUBECONFIG          the bound kubernetes.cluster's kubeconfig (set by the runtime)
#
# Parameters: chart_version, deployment_mode, replicas, pools, storage_size, storage_class,
#             memory_request, mode
# Requires:   minio_secrets_ref
# Provides:   minio.server
# Produces:   minio_helm_values
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/helm-lib.sh
. "$OPSGRAPH_LIB/helm-lib.sh"

needs_out
needs_cluster
REF=${OPSGRAPH_ARTIFACT_MINIO_SECRETS_REF:?the minio_secrets_ref artifact is required}
refs NAMESPACE RELEASE ROOT_SECRET KMS_SECRET MODE

CHART_VERSION=${OPSGRAPH_PARAM_CHART_VERSION:-5.4.0}
DEPLOYMENT_MODE=${OPSGRAPH_PARAM_DEPLOYMENT_MODE:-standalone}
REPLICAS=${OPSGRAPH_PARAM_REPLICAS:-4}
POOLS=${OPSGRAPH_PARAM_POOLS:-1}
SIZE=${OPSGRAPH_PARAM_STORAGE_SIZE:-100Gi}
STORAGE_CLASS=${OPSGRAPH_PARAM_STORAGE_CLASS:-}
MEMORY=${OPSGRAPH_PARAM_MEMORY_REQUEST:-1Gi}
matches '[0-9]+\.[0-9]+\.[0-9]+' "$CHART_VERSION" || fail "chart_version '$CHART_VERSION' is not X.Y.Z"
matches '[0-9]+(Mi|Gi|Ti)' "$SIZE" || fail "storage_size '$SIZE' is not a quantity such as 100Gi"
matches '[0-9]+(Mi|Gi)' "$MEMORY" || fail "memory_request '$MEMORY' is not a quantity such as 1Gi"
[ -z "$STORAGE_CLASS" ] || matches '[a-z0-9]([-a-z0-9.]*[a-z0-9])?' "$STORAGE_CLASS" || fail "storage_class '$STORAGE_CLASS' is not a name"
case $DEPLOYMENT_MODE in
    standalone) ;;
    distributed)
        if ! matches '[0-9]+' "$REPLICAS" || [ "$REPLICAS" -lt 4 ]; then
            fail "distributed mode needs replicas >= 4 (erasure coding)"
        fi
        matches '[1-9][0-9]*' "$POOLS" || fail "pools '$POOLS' is not a whole number of at least 1"
        ;;
    *) fail "deployment_mode '$DEPLOYMENT_MODE' is not standalone or distributed" ;;
esac
[ "$DEPLOYMENT_MODE" = distributed ] || [ "$POOLS" = 1 ] || fail "pools $POOLS: a standalone MinIO has no server pools"

# The release as it is: listed first (a failing helm fails the job), then its values' shape.
listed=$(helm -n "$NAMESPACE" list -q --filter "^$RELEASE\$") || fail "helm cannot list releases in $NAMESPACE"
if [ -n "$listed" ]; then
    values=$(helm -n "$NAMESPACE" get values "$RELEASE") || fail "helm cannot read the values of release $RELEASE"
    was_mode=$(printf '%s\n' "$values" | sed -n 's/^mode: *//p')
    was_pools=$(printf '%s\n' "$values" | sed -n 's/^pools: *//p')
    was_replicas=$(printf '%s\n' "$values" | sed -n 's/^replicas: *//p')
    if [ "$was_mode" = distributed ]; then
        [ "$DEPLOYMENT_MODE" = distributed ] || fail "release $RELEASE is distributed; it cannot become $DEPLOYMENT_MODE in place"
        if [ -n "$was_pools" ] && [ "$POOLS" -lt "$was_pools" ]; then
            fail "release $RELEASE has $was_pools server pools; $POOLS would drop a pool that holds data (decommission it with mc admin decommission first)"
        fi
        if [ -n "$was_replicas" ] && [ "$REPLICAS" != "$was_replicas" ]; then
            fail "release $RELEASE has $was_replicas pods per pool; $REPLICAS would break its erasure sets (add a pool instead)"
        fi
    elif [ "$was_mode" = standalone ] && [ "$DEPLOYMENT_MODE" != standalone ]; then
        fail "release $RELEASE is standalone; it cannot become $DEPLOYMENT_MODE in place"
    fi
fi

for s in "$ROOT_SECRET" "$KMS_SECRET"; do
    kubectl -n "$NAMESPACE" get secret "$s" >/dev/null 2>&1 || fail "secret $s is missing in $NAMESPACE"
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
{
    printf '# rendered by opsgraph (pack minio, job install-minio)\n'
    printf 'fullnameOverride: %s\n' "$RELEASE"
    printf 'mode: %s\n' "$DEPLOYMENT_MODE"
    if [ "$DEPLOYMENT_MODE" = distributed ]; then
        printf 'replicas: %s\ndrivesPerNode: 1\npools: %s\n' "$REPLICAS" "$POOLS"
    fi
    printf 'existingSecret: %s\n' "$ROOT_SECRET"
    printf 'extraSecret: %s\n' "$KMS_SECRET"
    printf 'users: []\npolicies: []\nbuckets: []\nsvcaccts: []\ncustomCommands: []\n'
    printf 'persistence:\n  enabled: true\n  size: %s\n' "$SIZE"
    [ -z "$STORAGE_CLASS" ] || printf '  storageClass: %s\n' "$STORAGE_CLASS"
    printf 'resources:\n  requests:\n    memory: %s\n' "$MEMORY"
    printf 'additionalLabels:\n  app.kubernetes.io/managed-by: opsgraph\n  opsgraph.io/access-mode: %s\n' "$MODE"
    printf 'podLabels:\n  opsgraph.io/access-mode: %s\n' "$MODE"
} >"$work/values.yaml"

log "helm upgrade --install $RELEASE (minio chart $CHART_VERSION, $DEPLOYMENT_MODE, pools $POOLS) in $NAMESPACE"
helm upgrade --install "$RELEASE" minio \
    --repo https://charts.min.io/ --version "$CHART_VERSION" \
    --namespace "$NAMESPACE" --values "$work/values.yaml" \
    --history-max 5 --wait --timeout 15m

kubectl -n "$NAMESPACE" wait --for=condition=Ready pod -l "app=minio,release=$RELEASE" --timeout=5m

mkdir -p "$OPSGRAPH_OUT"
cp "$work/values.yaml" "$OPSGRAPH_OUT/minio_helm_values"
log "ok: release $RELEASE deployed"
