#!/bin/sh
# opsgraph pack tempo - job verify-tempo.
#
# Runs once on the control host (executor local) against the bound Kubernetes cluster.
# Read-only: the StatefulSet is rolled out, Tempo's /ready (port 3100) answers "ready"
# through the API server's pod proxy (so it works without network access to the pods),
# and the Service exposes the OTLP ports. Writes the in-cluster endpoints.
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
# Provides:   observability.tracing
# Produces:   tempo_endpoints
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/helm-lib.sh
. "$OPSGRAPH_LIB/helm-lib.sh"

needs_out
needs_cluster
release_and_namespace fail

kubectl -n "$NAMESPACE" rollout status "statefulset/$RELEASE" --timeout=5m

i=0
while :; do
    answer=$(kubectl get --raw "/api/v1/namespaces/$NAMESPACE/pods/$RELEASE-0:3100/proxy/ready" 2>/dev/null || true)
    [ "$answer" = ready ] && break
    i=$((i + 1))
    [ "$i" -lt 30 ] || fail "Tempo's /ready answers '${answer:-nothing}' (ingester ring not ready or storage unreachable: see kubectl logs $RELEASE-0)"
    sleep 10
done
log "/ready: ready"

# The chart's Service names differ between versions (<release>, <release>-headless): find
# them by the release label and prefer the non-headless one.
services=$(kubectl -n "$NAMESPACE" get service -l "app.kubernetes.io/instance=$RELEASE" \
    -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
SERVICE=
for s in $services; do
    case $s in *-headless) [ -n "$SERVICE" ] || SERVICE=$s ;; *) SERVICE=$s; break ;; esac
done
[ -n "$SERVICE" ] || fail "no Service of release $RELEASE in $NAMESPACE"
ports=$(kubectl -n "$NAMESPACE" get service "$SERVICE" -o jsonpath='{range .spec.ports[*]}{.port}{" "}{end}')
for p in 4317 4318; do
    case " $ports " in *" $p "*) ;; *) fail "service $SERVICE does not expose OTLP port $p" ;; esac
done

HOST="$SERVICE.$NAMESPACE.svc"
mkdir -p "$OPSGRAPH_OUT"
{
    printf 'OTLP_GRPC=%s:4317\n' "$HOST"
    printf 'OTLP_HTTP=http://%s:4318\n' "$HOST"
    printf 'JAEGER_GRPC=%s:14250\n' "$HOST"
    printf 'ZIPKIN=http://%s:9411\n' "$HOST"
    printf 'QUERY_HTTP=http://%s:3100\n' "$HOST"
} >"$OPSGRAPH_OUT/tempo_endpoints"
log "ok: Tempo ready; OTLP at $HOST:4317 (gRPC) and :4318 (HTTP)"
