#!/bin/sh
# opsgraph pack tempo - job install-tempo: helm upgrade --install of grafana/tempo.
#
# Runs once on the control host (executor local) against the bound Kubernetes cluster,
# with the values from render-helm-values. `helm upgrade --install --wait` is idempotent;
# a failed release is left as it is for diagnosis (no --atomic rollback).
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#   KUBECONFIG          the bound kubernetes.cluster's kubeconfig (set by the runtime)
#   OPSGRAPH_INTENT_NAME the release name when release_name is not given
#
# Parameters: release_name, namespace, chart_version
# Requires:   tempo_helm_values
# Provides:   tempo.release.deployed
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/helm-lib.sh
. "$OPSGRAPH_LIB/helm-lib.sh"

needs_cluster
VALUES=${OPSGRAPH_ARTIFACT_TEMPO_HELM_VALUES:?the tempo_helm_values artifact is required}
[ -r "$VALUES" ] || fail "cannot read $VALUES"
release_and_namespace fail
CHART_VERSION=${OPSGRAPH_PARAM_CHART_VERSION:-1.10.1}
matches '[0-9]+\.[0-9]+\.[0-9]+' "$CHART_VERSION" || fail "chart_version '$CHART_VERSION' is not X.Y.Z"
grep -qx "fullnameOverride: $RELEASE" "$VALUES" || fail "the values were rendered for another release"

log "helm upgrade --install $RELEASE (grafana/tempo $CHART_VERSION) in $NAMESPACE"
helm upgrade --install "$RELEASE" tempo \
    --repo https://grafana.github.io/helm-charts --version "$CHART_VERSION" \
    --namespace "$NAMESPACE" --values "$VALUES" \
    --history-max 5 --wait --timeout 10m
helm -n "$NAMESPACE" status "$RELEASE" | grep -q '^STATUS: deployed' || fail "release $RELEASE is not deployed"
log "ok: release $RELEASE deployed"
