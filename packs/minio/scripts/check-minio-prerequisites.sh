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
# shellcheck source-path=SCRIPTDIR source=lib/helm-lib.sh
. "$OPSGRAPH_LIB/helm-lib.sh"

needs_out
needs_cluster
release_and_namespace problem
STORAGE_CLASS=${OPSGRAPH_PARAM_STORAGE_CLASS:-}
preflight secrets configmaps services deployments statefulsets persistentvolumeclaims jobs serviceaccounts

if [ -n "$STORAGE_CLASS" ]; then
    kubectl get storageclass "$STORAGE_CLASS" >/dev/null 2>&1 || problem "StorageClass $STORAGE_CLASS does not exist"
    chosen=$STORAGE_CLASS
else
    chosen=$(default_storage_class)
    [ -n "$chosen" ] || problem "no default StorageClass; set the storage_class parameter"
fi

checked
preflight_report minio_preflight_report "$chosen"
log "ok: Kubernetes $SERVER, helm $HELM_VERSION, StorageClass $chosen, namespace $NAMESPACE"
