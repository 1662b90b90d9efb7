#!/bin/sh
# opsgraph pack tempo - job check-cluster-access.
#
# Runs once on the control host (executor local) against the bound Kubernetes cluster.
# Read-only: API reachable (1.25+), the rights the install needs in the namespace, helm
# 3.8+, a default StorageClass for Tempo's write-ahead-log volume.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#   KUBECONFIG          the bound kubernetes.cluster's kubeconfig (set by the runtime)
#   OPSGRAPH_INTENT_NAME the release name when release_name is not given
#
# Parameters: release_name, namespace
# Produces:   cluster_access_report
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/helm-lib.sh
. "$OPSGRAPH_LIB/helm-lib.sh"

needs_out
needs_cluster
release_and_namespace problem
preflight secrets configmaps services statefulsets jobs serviceaccounts
minor=$(printf '%s\n' "$SERVER" | sed -n 's/^v1\.\([0-9]*\).*/\1/p')
[ "${minor:-0}" -ge 25 ] || problem "Kubernetes $SERVER is older than 1.25"
default_sc=$(default_storage_class)
[ -n "$default_sc" ] || problem "no default StorageClass for the WAL volume"

checked
preflight_report cluster_access_report "$default_sc"
log "ok: Kubernetes $SERVER, helm $HELM_VERSION, namespace $NAMESPACE"
