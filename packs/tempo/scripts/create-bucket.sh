#!/bin/sh
# opsgraph pack tempo - job create-bucket: the trace bucket in the bound S3 storage.
#
# Runs once on the control host (executor local). The S3 calls run inside the cluster, in a
# Job with the mc image and the credentials from the <release>-s3 Secret (so endpoints
# that only resolve in the cluster work and the keys stay there):
#   - the bucket exists (stat) -> used as it is (a provisioned bucket's key may not be
#     allowed to create buckets or change their encryption);
#   - else it is created in the region, with SSE-S3 default encryption;
#   - then a probe object is written, read and deleted: Tempo needs exactly that.
# Idempotent; the previous run of the Job is deleted first.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#   KUBECONFIG          the bound kubernetes.cluster's kubeconfig (set by the runtime)
#
# Parameters: mc_image
# Requires:   s3_credentials_ref
# Provides:   tempo.storage.bucket
set -eu

log() { printf 'create-bucket: %s\n' "$*" >&2; }
fail() { log "ERROR: $*"; exit 1; }

NL='
'
matches() {
    case $2 in *"$NL"*) return 1 ;; esac
    printf '%s\n' "$2" | grep -Eqx -- "$1"
}

: "${KUBECONFIG:?KUBECONFIG must name the kubeconfig of the bound cluster}"
export KUBECONFIG
REF=${OPSGRAPH_ARTIFACT_S3_CREDENTIALS_REF:?the s3_credentials_ref artifact is required}
ref() { sed -n "s/^$1=//p" "$REF" | head -n 1; }
NAMESPACE=$(ref NAMESPACE)
RELEASE=$(ref RELEASE)
SECRET=$(ref SECRET)
ENDPOINT_URL=$(ref ENDPOINT_URL)
REGION=$(ref REGION)
BUCKET=$(ref BUCKET)
PATH_STYLE=$(ref FORCE_PATH_STYLE)
MC_IMAGE=${OPSGRAPH_PARAM_MC_IMAGE:-quay.io/minio/mc:RELEASE.2024-11-21T17-21-54Z}
matches '[a-z0-9][-A-Za-z0-9./:_@]*' "$MC_IMAGE" || fail "mc_image '$MC_IMAGE' is not an image reference"
for v in "$NAMESPACE" "$RELEASE" "$SECRET" "$ENDPOINT_URL" "$REGION" "$BUCKET"; do
    [ -n "$v" ] || fail "s3_credentials_ref is incomplete"
done
# mc --path: on = path-style (MinIO), off = virtual-host style.
if [ "$PATH_STYLE" = true ]; then LOOKUP=on; else LOOKUP=off; fi
JOB="$RELEASE-opsgraph-bucket"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/run.sh" <<'RUN'
set -eu
mc alias set store "$S3_ENDPOINT_URL" "$S3_ACCESS_KEY" "$S3_SECRET_KEY" --api S3v4 --path "$S3_LOOKUP" >/dev/null
if mc stat "store/$BUCKET" >/dev/null 2>&1; then
    echo "bucket $BUCKET exists; used as it is"
else
    mc mb --region "$S3_REGION" "store/$BUCKET"
    mc encrypt set sse-s3 "store/$BUCKET"
    echo "bucket $BUCKET created with SSE-S3"
fi
probe="store/$BUCKET/.opsgraph-probe-$(date +%s)"
echo "opsgraph probe" | mc pipe "$probe"
[ "$(mc cat "$probe")" = "opsgraph probe" ] || { echo "probe read back differs" >&2; exit 1; }
mc rm "$probe" >/dev/null
echo "write, read, delete in $BUCKET: ok"
RUN
kubectl -n "$NAMESPACE" create configmap "$JOB" --from-file=run.sh="$work/run.sh" \
    --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl -n "$NAMESPACE" delete job "$JOB" --ignore-not-found --wait=true >/dev/null
kubectl apply -f - >/dev/null <<JOBSPEC
apiVersion: batch/v1
kind: Job
metadata:
  name: $JOB
  namespace: $NAMESPACE
  labels: {app.kubernetes.io/managed-by: opsgraph, app.kubernetes.io/instance: $RELEASE}
spec:
  backoffLimit: 3
  ttlSecondsAfterFinished: 86400
  template:
    metadata:
      labels: {app.kubernetes.io/managed-by: opsgraph}
    spec:
      restartPolicy: Never
      securityContext: {runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000, seccompProfile: {type: RuntimeDefault}}
      containers:
        - name: mc
          image: "$MC_IMAGE"
          command: [/bin/sh, /opsgraph/run.sh]
          env:
            - {name: MC_CONFIG_DIR, value: /tmp/.mc}
            - {name: S3_ENDPOINT_URL, value: "$ENDPOINT_URL"}
            - {name: S3_REGION, value: "$REGION"}
            - {name: S3_LOOKUP, value: "$LOOKUP"}
            - {name: BUCKET, value: "$BUCKET"}
          envFrom:
            - secretRef: {name: "$SECRET"}
          securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
          volumeMounts:
            - {name: script, mountPath: /opsgraph, readOnly: true}
            - {name: tmp, mountPath: /tmp}
      volumes:
        - {name: script, configMap: {name: "$JOB"}}
        - {name: tmp, emptyDir: {}}
JOBSPEC

deadline=$(($(date +%s) + 480))
while :; do
    succeeded=$(kubectl -n "$NAMESPACE" get job "$JOB" -o jsonpath='{.status.succeeded}')
    failed=$(kubectl -n "$NAMESPACE" get job "$JOB" -o jsonpath='{.status.conditions[?(@.type=="Failed")].status}')
    [ "${succeeded:-0}" -ge 1 ] && break
    if [ "$failed" = True ] || [ "$(date +%s)" -ge "$deadline" ]; then
        kubectl -n "$NAMESPACE" logs "job/$JOB" --all-containers --tail=50 >&2 || true
        fail "job $JOB did not succeed"
    fi
    sleep 5
done
kubectl -n "$NAMESPACE" logs "job/$JOB" --tail=10 >&2 || true
log "ok: bucket $BUCKET at $ENDPOINT_URL is usable"
