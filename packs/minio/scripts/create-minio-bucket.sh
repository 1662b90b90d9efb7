#!/bin/sh
# opsgraph pack minio - job create-minio-bucket.
#
# Runs once on the control host (executor local) against the bound Kubernetes cluster. The
# S3 work happens inside the cluster, in a Job running the mc image with the root
# credentials from their Secret (so they never leave the cluster):
#   - the bucket (kept if it exists) with SSE-S3 default encryption (the KMS key);
#   - a policy limited to that bucket, and the <release>-client access key attached to it.
# All of it is idempotent. The job's previous run is deleted before a new one starts.
# The bucket's access key (not root) is exported as the minio_credentials secret artifact.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#   KUBECONFIG          the bound kubernetes.cluster's kubeconfig (set by the runtime)
#   OPSGRAPH_INTENT_NAME the release name when release_name is not given
#
# Parameters: release_name, namespace, bucket, mc_image
# Provides:   minio.bucket
# Produces:   minio_credentials (secret)
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/helm-lib.sh
. "$OPSGRAPH_LIB/helm-lib.sh"

needs_out
needs_cluster
minio_bucket_job
JOB="$RELEASE-opsgraph-bucket"
POLICY="$RELEASE-$BUCKET-rw"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The script the Job runs (values come from its environment).
cat >"$work/run.sh" <<'RUN'
set -eu
mc alias set target "$MINIO_URL" "$MINIO_ROOT_USER" "$MINIO_ROOT_PASSWORD" >/dev/null
if mc stat "target/$BUCKET" >/dev/null 2>&1; then
    echo "bucket $BUCKET exists"
else
    mc mb "target/$BUCKET"
fi
mc encrypt set sse-s3 "target/$BUCKET"
cat >/tmp/policy.json <<JSON
{"Version": "2012-10-17", "Statement": [
  {"Effect": "Allow", "Action": ["s3:GetBucketLocation", "s3:ListBucket", "s3:ListBucketMultipartUploads"],
   "Resource": ["arn:aws:s3:::$BUCKET"]},
  {"Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
   "Resource": ["arn:aws:s3:::$BUCKET/*"]}]}
JSON
mc admin policy create target "$POLICY" /tmp/policy.json
mc admin user add target "$CLIENT_ACCESS_KEY" "$CLIENT_SECRET_KEY"
if ! mc admin policy entities target --user "$CLIENT_ACCESS_KEY" | grep -qw -- "$POLICY"; then
    mc admin policy attach target "$POLICY" --user "$CLIENT_ACCESS_KEY"
fi
echo "bucket $BUCKET ready, policy $POLICY attached to the client key"
RUN

mc_job "$JOB" "$work/run.sh" 3 <<ENV
            - {name: MINIO_URL, value: "$ENDPOINT"}
            - {name: BUCKET, value: "$BUCKET"}
            - {name: POLICY, value: "$POLICY"}
            - {name: MINIO_ROOT_USER, valueFrom: {secretKeyRef: {name: "$RELEASE-root", key: rootUser}}}
            - {name: MINIO_ROOT_PASSWORD, valueFrom: {secretKeyRef: {name: "$RELEASE-root", key: rootPassword}}}
            - {name: CLIENT_ACCESS_KEY, valueFrom: {secretKeyRef: {name: "$RELEASE-client", key: accessKey}}}
            - {name: CLIENT_SECRET_KEY, valueFrom: {secretKeyRef: {name: "$RELEASE-client", key: secretKey}}}
ENV
wait_job "$JOB" 480 "job $JOB" 20

secret_value() {
    kubectl -n "$NAMESPACE" get secret "$RELEASE-client" -o jsonpath="{.data.$1}" | base64 -d
}
mkdir -p "$OPSGRAPH_OUT"
umask 077
{
    printf 'ENDPOINT=%s\n' "$ENDPOINT"
    printf 'REGION=us-east-1\n'
    printf 'BUCKET=%s\n' "$BUCKET"
    printf 'FORCE_PATH_STYLE=true\n'
    printf 'ACCESS_KEY=%s\n' "$(secret_value accessKey)"
    printf 'SECRET_KEY=%s\n' "$(secret_value secretKey)"
} >"$OPSGRAPH_OUT/minio_credentials.tmp"
mv -f "$OPSGRAPH_OUT/minio_credentials.tmp" "$OPSGRAPH_OUT/minio_credentials"
log "ok: bucket $BUCKET (SSE-S3) and its access key ready at $ENDPOINT"
