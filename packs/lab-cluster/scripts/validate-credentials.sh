#!/bin/sh
# opsgraph pack lab-cluster - job validate-credentials: check the lab's "registry access".
#
# Runs once (no scope). The lab has no registry: this checks what the lab's credentials need
# (a readable /dev/urandom for tokens, sha256sum or cksum for hashes), records the image
# repository the nodes would pull from in "$OPSGRAPH_LAB_DIR/<cluster>/credentials.report" and
# writes the same report (no secret material) as the credentials_report artifact.
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Requires:   cluster_spec (OPSGRAPH_ARTIFACT_CLUSTER_SPEC)
# Parameters: image_repository, fail_job, fail_mode
# Produces:   credentials_report - KEY=value lines
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init cluster

SPEC=${OPSGRAPH_ARTIFACT_CLUSTER_SPEC:?the cluster_spec artifact is required}
[ -r "$SPEC" ] || fail "cannot read the cluster_spec artifact $SPEC"
REPO=${OPSGRAPH_PARAM_IMAGE_REPOSITORY:-registry.k8s.io}
matches '[a-z0-9][-a-z0-9.:/_]*' "$REPO" || fail "image_repository '$REPO' is not a repository"

lab_failpoint "Error response from daemon: Get \"https://$REPO/v2/\": net/http: request canceled while waiting for connection (Client.Timeout exceeded while awaiting headers)" \
    "validate-credentials: ERROR: $REPO does not answer the registry API"

[ -r /dev/urandom ] || fail "/dev/urandom is not readable: the lab cannot make tokens"
token=$(random_hex 16)
matches '[0-9a-f]{16}' "$token" || fail "od cannot read random bytes from /dev/urandom"
if command -v sha256sum >/dev/null 2>&1; then HASH="sha256sum"; else HASH="cksum"; fi

report() {
    printf 'IMAGE_REPOSITORY=%s\n' "$REPO"
    printf 'ANONYMOUS_PULL=ok\n'
    printf 'TOKEN_SOURCE=/dev/urandom\n'
    printf 'HASH_TOOL=%s\n' "$HASH"
}
if lab_proven; then
    mkdir -p "$CLUSTER_DIR"
    report | write_file "$CLUSTER_DIR/credentials.report"
fi
report | lab_artifact credentials_report
log "ok: $REPO (lab), tokens from /dev/urandom"
