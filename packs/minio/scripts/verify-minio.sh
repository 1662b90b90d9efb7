#!/bin/sh
# opsgraph pack minio - job verify-minio.
#
# Runs once on the control host (executor local) against the bound Kubernetes cluster.
#   1. MinIO's readiness endpoint, through the API server's service proxy;
#   2. a smoke test inside the cluster with the bucket's own access key: put an object,
#      check the server stored it encrypted (SSE-S3), read it back, remove it.
# Leaves nothing behind but the finished Job (kept a day for the evidence check).
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#   KUBECONFIG          the bound kubernetes.cluster's kubeconfig (set by the runtime)
#   OPSGRAPH_INTENT_NAME the release name when release_name is not given
#
# Parameters: release_name, namespace, bucket, mc_image, mode
# Provides:   object_storage.s3 (encryption: true, access_mode: <mode>)
# Produces:   minio_connection
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/helm-lib.sh
. "$OPSGRAPH_LIB/helm-lib.sh"

needs_out
needs_cluster
minio_bucket_job
MODE=${OPSGRAPH_PARAM_MODE:-dedicated}
JOB="$RELEASE-opsgraph-smoke"

# 1. Readiness.
i=0
until kubectl get --raw "/api/v1/namespaces/$NAMESPACE/services/$RELEASE:9000/proxy/minio/health/ready" >/dev/null 2>&1; do
    i=$((i + 1))
    [ "$i" -lt 30 ] || fail "MinIO's /minio/health/ready does not answer 200"
    sleep 5
done
log "health: ready"

# 2. Smoke test with the client key.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/run.sh" <<'RUN'
set -eu
mc alias set client "$MINIO_URL" "$ACCESS_KEY" "$SECRET_KEY" >/dev/null
object="client/$BUCKET/.opsgraph-smoke-$(date +%s)"
echo "opsgraph smoke test" | mc pipe "$object"
mc stat --json "$object" | grep -Eq 'AES256|SSE-S3' || { echo "object is not stored with SSE-S3" >&2; exit 1; }
[ "$(mc cat "$object")" = "opsgraph smoke test" ] || { echo "read back differs" >&2; exit 1; }
mc rm "$object" >/dev/null
echo "put, SSE-S3, get, delete: ok"
RUN
mc_job "$JOB" "$work/run.sh" 2 <<ENV
            - {name: MINIO_URL, value: "$ENDPOINT"}
            - {name: BUCKET, value: "$BUCKET"}
            - {name: ACCESS_KEY, valueFrom: {secretKeyRef: {name: "$RELEASE-client", key: accessKey}}}
            - {name: SECRET_KEY, valueFrom: {secretKeyRef: {name: "$RELEASE-client", key: secretKey}}}
ENV
wait_job "$JOB" 300 "smoke test job $JOB" 5

mkdir -p "$OPSGRAPH_OUT"
{
    printf 'ENDPOINT=%s\n' "$ENDPOINT"
    printf 'REGION=us-east-1\n'
    printf 'BUCKET=%s\n' "$BUCKET"
    printf 'ACCESS_MODE=%s\n' "$MODE"
    printf 'ENCRYPTION=sse-s3\n'
    printf 'CREDENTIALS_SECRET=%s/%s-client\n' "$NAMESPACE" "$RELEASE"
} >"$OPSGRAPH_OUT/minio_connection"
log "ok: $ENDPOINT bucket $BUCKET ($MODE, SSE-S3)"
