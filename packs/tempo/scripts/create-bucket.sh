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
# shellcheck source-path=SCRIPTDIR source=lib/helm-lib.sh
. "$OPSGRAPH_LIB/helm-lib.sh"

needs_cluster
REF=${OPSGRAPH_ARTIFACT_S3_CREDENTIALS_REF:?the s3_credentials_ref artifact is required}
complete_refs s3_credentials_ref NAMESPACE RELEASE SECRET ENDPOINT_URL REGION BUCKET
refs FORCE_PATH_STYLE
mc_image
# mc --path: on = path-style (MinIO), off = virtual-host style.
if [ "$FORCE_PATH_STYLE" = true ]; then LOOKUP=on; else LOOKUP=off; fi
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
mc_job "$JOB" "$work/run.sh" 3 <<ENV
            - {name: S3_ENDPOINT_URL, value: "$ENDPOINT_URL"}
            - {name: S3_REGION, value: "$REGION"}
            - {name: S3_LOOKUP, value: "$LOOKUP"}
            - {name: BUCKET, value: "$BUCKET"}
          envFrom:
            - secretRef: {name: "$SECRET"}
ENV
wait_job "$JOB" 480 "job $JOB" 10
log "ok: bucket $BUCKET at $ENDPOINT_URL is usable"
