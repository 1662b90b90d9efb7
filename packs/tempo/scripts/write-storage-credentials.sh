#!/bin/sh
# opsgraph pack tempo - job write-storage-credentials.
#
# Runs once on the control host (executor local). Takes the bound object_storage.s3 - its
# attributes and its credentials file from the runtime - and writes the access key into the
# Secret <release>-s3 (keys S3_ACCESS_KEY, S3_SECRET_KEY) in Tempo's namespace, the bound
# secret.store. The keys go from a mode-0600 file to kubectl, never through argv or logs;
# re-running applies the current keys (rotation). The artifact holds no secret values.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#   KUBECONFIG          the bound kubernetes.cluster's kubeconfig (set by the runtime)
#   OPSGRAPH_BINDING_OBJECT_STORAGE_S3_<ATTRIBUTE>  attributes of the bound storage
#                       (ENDPOINT, REGION, ...); ..._CREDENTIALS is the path of its
#                       credentials file: ACCESS_KEY=, SECRET_KEY= and optionally
#                       ENDPOINT=, REGION=, BUCKET=, FORCE_PATH_STYLE= lines
#
# Parameters: bucket, s3_endpoint
# Requires:   cluster_access_report
# Produces:   s3_credentials_ref
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/helm-lib.sh
. "$OPSGRAPH_LIB/helm-lib.sh"

needs_out
needs_cluster
REPORT=${OPSGRAPH_ARTIFACT_CLUSTER_ACCESS_REPORT:?the cluster_access_report artifact is required}
CREDS=${OPSGRAPH_BINDING_OBJECT_STORAGE_S3_CREDENTIALS:?the bound object storage has no credentials file}
grep -qx 'STATUS=ok' "$REPORT" || fail "the cluster access report is not ok"
[ -r "$CREDS" ] || fail "cannot read the credentials file of the bound storage"
RELEASE=$(sed -n 's/^RELEASE=//p' "$REPORT")
NAMESPACE=$(sed -n 's/^NAMESPACE=//p' "$REPORT")
cred() { sed -n "s/^$1=//p" "$CREDS" | head -n 1; }

ACCESS_KEY=$(cred ACCESS_KEY)
SECRET_KEY=$(cred SECRET_KEY)
if [ -z "$ACCESS_KEY" ] || [ -z "$SECRET_KEY" ]; then
    fail "the credentials file lacks ACCESS_KEY or SECRET_KEY"
fi

ENDPOINT_URL=${OPSGRAPH_PARAM_S3_ENDPOINT:-$(cred ENDPOINT)}
ENDPOINT_URL=${ENDPOINT_URL:-${OPSGRAPH_BINDING_OBJECT_STORAGE_S3_ENDPOINT:-}}
REGION=$(cred REGION)
REGION=${REGION:-${OPSGRAPH_BINDING_OBJECT_STORAGE_S3_REGION:-us-east-1}}
FORCE_PATH_STYLE=$(cred FORCE_PATH_STYLE)
FORCE_PATH_STYLE=${FORCE_PATH_STYLE:-true}
BUCKET=${OPSGRAPH_PARAM_BUCKET:-$(cred BUCKET)}
# A bucket that comes with the credentials was provisioned for this key: use it as it is.
PROVISIONED=no
if [ -z "${OPSGRAPH_PARAM_BUCKET:-}" ] && [ -n "$BUCKET" ]; then PROVISIONED=yes; fi
BUCKET=${BUCKET:-$RELEASE-traces}

matches 'https?://[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?(:[0-9]{1,5})?/?' "$ENDPOINT_URL" ||
    fail "S3 endpoint '$ENDPOINT_URL' is not http(s)://host[:port] (set s3_endpoint or the binding's ENDPOINT)"
matches '[a-z0-9-]+' "$REGION" || fail "region '$REGION' is not an S3 region"
s3_bucket "$BUCKET"
case $FORCE_PATH_STYLE in true | false) ;; *) fail "FORCE_PATH_STYLE must be true or false" ;; esac
ENDPOINT_URL=${ENDPOINT_URL%/}
case $ENDPOINT_URL in
    https://*) INSECURE=false ;;
    *) INSECURE=true ;;
esac
ENDPOINT_HOST=${ENDPOINT_URL#*://}

umask 077
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf 'S3_ACCESS_KEY=%s\nS3_SECRET_KEY=%s\n' "$ACCESS_KEY" "$SECRET_KEY" >"$work/s3.env"
CHECKSUM=$(sha256sum "$work/s3.env" | cut -c1-16)

ensure_namespace
SECRET="$RELEASE-s3"
kubectl -n "$NAMESPACE" create secret generic "$SECRET" --from-env-file="$work/s3.env" \
    --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl -n "$NAMESPACE" label secret "$SECRET" --overwrite \
    app.kubernetes.io/managed-by=opsgraph "app.kubernetes.io/instance=$RELEASE" >/dev/null

mkdir -p "$OPSGRAPH_OUT"
umask 022
{
    printf 'NAMESPACE=%s\n' "$NAMESPACE"
    printf 'RELEASE=%s\n' "$RELEASE"
    printf 'SECRET=%s\n' "$SECRET"
    printf 'ENDPOINT_URL=%s\n' "$ENDPOINT_URL"
    printf 'ENDPOINT=%s\n' "$ENDPOINT_HOST"
    printf 'INSECURE=%s\n' "$INSECURE"
    printf 'REGION=%s\n' "$REGION"
    printf 'FORCE_PATH_STYLE=%s\n' "$FORCE_PATH_STYLE"
    printf 'BUCKET=%s\n' "$BUCKET"
    printf 'BUCKET_PROVISIONED=%s\n' "$PROVISIONED"
    printf 'CREDENTIALS_CHECKSUM=%s\n' "$CHECKSUM"
} >"$OPSGRAPH_OUT/s3_credentials_ref"
log "ok: secret $NAMESPACE/$SECRET for $ENDPOINT_URL, bucket $BUCKET"
