#!/bin/sh
# opsgraph pack kubernetes - job validate-credentials: check the image pull path.
#
# Runs once, on the control host (executor local). The nodes pull kubeadm's images
# without credentials, so the check is that the image repository answers the registry
# API and grants an anonymous pull token for its pause image. A repository that needs
# credentials fails here, before any node is changed. The report holds no secrets.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#
# Parameters: image_repository (registry.k8s.io, or a mirror such as harbor.example/k8s)
#             image_repository_insecure (true: the repository speaks plain HTTP, e.g. a
#             registry inside the site's network; install-runtime tells containerd so)
# Requires:   cluster_spec (OPSGRAPH_ARTIFACT_CLUSTER_SPEC)
# Produces:   credentials_report - KEY=value lines, STATUS=ok on success
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/node-lib.sh
. "$OPSGRAPH_LIB/node-lib.sh"

SPEC=${OPSGRAPH_ARTIFACT_CLUSTER_SPEC:?the cluster_spec artifact is required}
needs_out
[ -r "$SPEC" ] || fail "cannot read cluster spec $SPEC"
CLUSTER_NAME=$(sed -n 's/^CLUSTER_NAME=//p' "$SPEC" | head -n 1)

REPO=${OPSGRAPH_PARAM_IMAGE_REPOSITORY:-registry.k8s.io}
matches '[a-z0-9]([-a-z0-9.]*[a-z0-9])?(:[0-9]{1,5})?(/[a-z0-9][-a-z0-9._/]*)?' "$REPO" ||
    fail "image_repository '$REPO' is not host[:port][/path]"
REGISTRY=${REPO%%/*}
case ${OPSGRAPH_PARAM_IMAGE_REPOSITORY_INSECURE:-false} in
    true) SCHEME=http ;;
    false) SCHEME=https ;;
    *) fail "image_repository_insecure must be true or false, not '${OPSGRAPH_PARAM_IMAGE_REPOSITORY_INSECURE}'" ;;
esac
case $REPO in */*) PREFIX=${REPO#*/}/ ;; *) PREFIX= ;; esac
IMAGE="${PREFIX}pause"

command -v curl >/dev/null 2>&1 || fail "curl is needed on the control host"

headers=$(mktemp)
trap 'rm -f "$headers"' EXIT

# 1. The registry API root: 200 (open) or 401 with a Bearer challenge (token auth).
code=$(curl -sS -L --max-time 20 --retry 2 -o /dev/null -D "$headers" -w '%{http_code}' \
    "$SCHEME://$REGISTRY/v2/") || fail "$SCHEME://$REGISTRY/v2/ does not answer (network or TLS)"
case $code in
    200) AUTH=anonymous ;;
    401)
        challenge=$(tr -d '\r' <"$headers" | sed -n 's/^[Ww][Ww][Ww]-[Aa]uthenticate: *[Bb]earer //p' | tail -n 1)
        [ -n "$challenge" ] || fail "$REGISTRY wants credentials (no Bearer challenge); nodes pull anonymously"
        realm=$(printf '%s\n' "$challenge" | sed -n 's/.*realm="\([^"]*\)".*/\1/p')
        service=$(printf '%s\n' "$challenge" | sed -n 's/.*service="\([^"]*\)".*/\1/p')
        [ -n "$realm" ] || fail "cannot read the token realm from $REGISTRY's challenge"
        # 2. An anonymous pull token for the pause image.
        tcode=$(curl -sS -L --max-time 20 -o /dev/null -w '%{http_code}' -G "$realm" \
            --data-urlencode "service=$service" \
            --data-urlencode "scope=repository:$IMAGE:pull") || fail "token endpoint $realm does not answer"
        [ "$tcode" = 200 ] || fail "$REGISTRY refuses an anonymous pull token for $IMAGE (HTTP $tcode)"
        AUTH=anonymous-token
        ;;
    *) fail "$SCHEME://$REGISTRY/v2/ answered HTTP $code; not a container registry" ;;
esac

mkdir -p "$OPSGRAPH_OUT"
tmp="$OPSGRAPH_OUT/.credentials_report.$$"
{
    printf 'CLUSTER_NAME=%s\n' "$CLUSTER_NAME"
    printf 'IMAGE_REPOSITORY=%s\n' "$REPO"
    printf 'REGISTRY_AUTH=%s\n' "$AUTH"
    printf 'REGISTRY_SCHEME=%s\n' "$SCHEME"
    printf 'CHECKED_AT=%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    printf 'STATUS=ok\n'
} >"$tmp"
mv -f "$tmp" "$OPSGRAPH_OUT/credentials_report"
log "ok: $REPO answers over $SCHEME ($AUTH)"
