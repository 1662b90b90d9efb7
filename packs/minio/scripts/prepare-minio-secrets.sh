#!/bin/sh
# opsgraph pack minio - job prepare-minio-secrets.
#
# Runs once on the control host (executor local) against the bound Kubernetes cluster.
# Creates the namespace and, only when they do not exist yet, three Secrets with values
# generated here (never printed, written to mode-0600 temporary files, then removed):
#   <release>-root    rootUser, rootPassword        (the chart's existingSecret)
#   <release>-kms     config.env with MINIO_KMS_SECRET_KEY (the chart's extraSecret): MinIO
#                     encrypts objects and its IAM data with it. It is NEVER replaced: with a
#                     new key the existing data could not be read. Back it up.
#   <release>-client  accessKey, secretKey           (the bucket's own access key)
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#   KUBECONFIG          the bound kubernetes.cluster's kubeconfig (set by the runtime)
#
# Parameters: release_name, namespace, mode
# Requires:   minio_preflight_report
# Produces:   minio_secrets_ref (names only)
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/helm-lib.sh
. "$OPSGRAPH_LIB/helm-lib.sh"

needs_out
needs_cluster
REPORT=${OPSGRAPH_ARTIFACT_MINIO_PREFLIGHT_REPORT:?the minio_preflight_report artifact is required}
grep -qx 'STATUS=ok' "$REPORT" || fail "the preflight report is not ok"
RELEASE=$(sed -n 's/^RELEASE=//p' "$REPORT")
NAMESPACE=$(sed -n 's/^NAMESPACE=//p' "$REPORT")
MODE=${OPSGRAPH_PARAM_MODE:-dedicated}
case $MODE in shared | dedicated) ;; *) fail "mode '$MODE' is not shared or dedicated" ;; esac

# random N: N characters from [A-Za-z0-9].
random() { head -c 256 /dev/urandom | LC_ALL=C tr -dc 'A-Za-z0-9' | head -c "$1"; }

umask 077
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

ensure_namespace

# create_once NAME ARGS...: creates Secret NAME from ARGS unless it exists.
create_once() {
    _name=$1
    shift
    if kubectl -n "$NAMESPACE" get secret "$_name" >/dev/null 2>&1; then
        log "secret $_name exists; kept"
        return 0
    fi
    kubectl -n "$NAMESPACE" create secret generic "$_name" "$@" >/dev/null
    kubectl -n "$NAMESPACE" label secret "$_name" --overwrite \
        app.kubernetes.io/managed-by=opsgraph "app.kubernetes.io/instance=$RELEASE" >/dev/null
    log "secret $_name created"
}

printf 'rootUser=root-%s\nrootPassword=%s\n' "$(random 8)" "$(random 40)" >"$work/root.env"
create_once "$RELEASE-root" --from-env-file="$work/root.env"

printf 'export MINIO_KMS_SECRET_KEY=%s-key:%s\n' "$RELEASE" "$(head -c 32 /dev/urandom | base64 | tr -d '\n')" >"$work/config.env"
create_once "$RELEASE-kms" --from-file=config.env="$work/config.env"
kubectl -n "$NAMESPACE" annotate secret "$RELEASE-kms" --overwrite \
    opsgraph.io/warning="MinIO's data is encrypted with this key: back it up, never replace it" >/dev/null

printf 'accessKey=%s-%s\nsecretKey=%s\n' "$MODE" "$(random 12)" "$(random 40)" >"$work/client.env"
create_once "$RELEASE-client" --from-env-file="$work/client.env"

mkdir -p "$OPSGRAPH_OUT"
{
    printf 'NAMESPACE=%s\n' "$NAMESPACE"
    printf 'RELEASE=%s\n' "$RELEASE"
    printf 'ROOT_SECRET=%s-root\n' "$RELEASE"
    printf 'KMS_SECRET=%s-kms\n' "$RELEASE"
    printf 'CLIENT_SECRET=%s-client\n' "$RELEASE"
    printf 'MODE=%s\n' "$MODE"
} >"$OPSGRAPH_OUT/minio_secrets_ref"
log "ok: namespace $NAMESPACE, secrets $RELEASE-root, $RELEASE-kms, $RELEASE-client"
