#!/bin/sh
# opsgraph pack tempo - job render-helm-values: values for the grafana/tempo chart.
#
# Runs once on the control host (executor local). Pure rendering, no cluster calls.
#   - S3 backend: bucket, endpoint, region, insecure/path-style from s3_credentials_ref;
#     access_key/secret_key are ${S3_ACCESS_KEY}/${S3_SECRET_KEY}, expanded by Tempo
#     (-config.expand-env=true) from the <release>-s3 Secret given as envFrom - so the
#     values (and the rendered ConfigMap) hold no secret;
#   - a pod annotation with the credentials checksum, so rotated keys roll the pod;
#   - retention, a persistent WAL volume, usage reporting off.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#
# Parameters: retention_days, wal_storage_size
# Requires:   s3_credentials_ref
# Produces:   tempo_helm_values
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/helm-lib.sh
. "$OPSGRAPH_LIB/helm-lib.sh"

needs_out
REF=${OPSGRAPH_ARTIFACT_S3_CREDENTIALS_REF:?the s3_credentials_ref artifact is required}
complete_refs s3_credentials_ref RELEASE SECRET ENDPOINT INSECURE REGION BUCKET FORCE_PATH_STYLE CREDENTIALS_CHECKSUM
DAYS=${OPSGRAPH_PARAM_RETENTION_DAYS:-14}
WAL_SIZE=${OPSGRAPH_PARAM_WAL_STORAGE_SIZE:-10Gi}
if ! matches '[0-9]{1,4}' "$DAYS" || [ "$DAYS" -lt 1 ]; then
    fail "retention_days '$DAYS' is not a positive number"
fi
matches '[0-9]+(Mi|Gi|Ti)' "$WAL_SIZE" || fail "wal_storage_size '$WAL_SIZE' is not a quantity such as 10Gi"

mkdir -p "$OPSGRAPH_OUT"
tmp="$OPSGRAPH_OUT/.tempo_helm_values.$$"
trap 'rm -f "$tmp"' EXIT
cat >"$tmp" <<VALUES
# rendered by opsgraph (pack tempo, job render-helm-values)
fullnameOverride: $RELEASE
replicas: 1
podAnnotations:
  opsgraph.io/s3-credentials-checksum: "$CREDENTIALS_CHECKSUM"
persistence:
  enabled: true
  size: $WAL_SIZE
tempo:
  reportingEnabled: false
  retention: $((DAYS * 24))h
  server:
    http_listen_port: 3100
  extraArgs:
    config.expand-env: "true"
  extraEnvFrom:
    - secretRef:
        name: $SECRET
  storage:
    trace:
      backend: s3
      s3:
        bucket: "$BUCKET"
        endpoint: "$ENDPOINT"
        region: "$REGION"
        insecure: $INSECURE
        forcepathstyle: $FORCE_PATH_STYLE
        access_key: \${S3_ACCESS_KEY}
        secret_key: \${S3_SECRET_KEY}
      wal:
        path: /var/tempo/wal
VALUES
mv -f "$tmp" "$OPSGRAPH_OUT/tempo_helm_values"
log "ok: values for $RELEASE - s3://$BUCKET at $ENDPOINT, retention ${DAYS}d"
