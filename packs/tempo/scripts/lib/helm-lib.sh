# opsgraph packs minio, tempo - helm-lib.sh: helpers the scripts of packs that deploy onto a
# bound Kubernetes cluster source (never run on its own). Each pack lists it under `libraries:`
# in pack.yaml, so a job finds it beside its script, in the directory OPSGRAPH_LIB names
# (docs/pack-authoring.md). Every pack's copy is the same (a tidy test holds them so).
#
# Use, right after `set -eu`:
#     # shellcheck source-path=SCRIPTDIR source=lib/helm-lib.sh
#     . "$OPSGRAPH_LIB/helm-lib.sh"

# ME: the job's name in log lines (the script's file name without `.sh`).
ME=${0##*/}
ME=${ME%.sh}
errors=0

log() { printf '%s: %s\n' "$ME" "$*" >&2; }
fail() { log "ERROR: $*"; exit 1; }
# problem MESSAGE: reports one more problem; `checked` ends the script when there were any.
problem() { log "ERROR: $*"; errors=$((errors + 1)); }
checked() { [ "$errors" -eq 0 ] || { log "$errors problem(s)"; exit 1; }; }

NL='
'
# matches ERE VALUE: VALUE is one line, matched whole by the extended regular expression ERE.
matches() {
    case $2 in *"$NL"*) return 1 ;; esac
    printf '%s\n' "$2" | grep -Eqx -- "$1"
}

# ref KEY: the value of the line KEY=... of the file REF names (an artifact of KEY=VALUE lines).
ref() { sed -n "s/^$1=//p" "$REF" | head -n 1; }

# refs KEY...: sets each variable KEY (a name in capitals) to `ref KEY`.
refs() {
    for _key in "$@"; do
        case $_key in '' | [!A-Z]* | *[!A-Z0-9_]*) fail "refs: '$_key' is not a variable name in capitals" ;; esac
        _value=$(ref "$_key")
        eval "$_key=\$_value"
    done
}

# complete_refs WHAT KEY...: refs KEY..., and the script fails ("WHAT is incomplete") unless each
# has a value.
complete_refs() {
    _what=$1
    shift
    refs "$@"
    for _key in "$@"; do
        eval "_value=\$$_key"
        [ -n "$_value" ] || fail "$_what is incomplete"
    done
}

# needs_out: OPSGRAPH_OUT names the directory for produced artifacts.
needs_out() { : "${OPSGRAPH_OUT:?OPSGRAPH_OUT must name the directory for produced artifacts}"; }

# needs_cluster: KUBECONFIG names the bound cluster's kubeconfig; exported for kubectl and helm.
needs_cluster() {
    : "${KUBECONFIG:?KUBECONFIG must name the kubeconfig of the bound cluster}"
    export KUBECONFIG
}

# release_and_namespace REPORT: sets RELEASE (the release_name parameter, else the intent's name)
# and NAMESPACE (the namespace parameter, else the release); REPORT (`fail` or `problem`) says
# which is not a DNS label.
release_and_namespace() {
    RELEASE=${OPSGRAPH_PARAM_RELEASE_NAME:-${OPSGRAPH_INTENT_NAME:-}}
    NAMESPACE=${OPSGRAPH_PARAM_NAMESPACE:-$RELEASE}
    matches '[a-z0-9]([-a-z0-9]{0,41}[a-z0-9])?' "$RELEASE" ||
        "$1" "release name '$RELEASE' is not a DNS label of at most 43 characters"
    matches '[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?' "$NAMESPACE" || "$1" "namespace '$NAMESPACE' is not a DNS label"
}

# mc_image: sets MC_IMAGE, the mc_image parameter (else a pinned mc release), an image reference.
mc_image() {
    MC_IMAGE=${OPSGRAPH_PARAM_MC_IMAGE:-quay.io/minio/mc:RELEASE.2024-11-21T17-21-54Z}
    matches '[a-z0-9][-A-Za-z0-9./:_@]*' "$MC_IMAGE" || fail "mc_image '$MC_IMAGE' is not an image reference"
}

# s3_bucket NAME: the script fails unless NAME is an S3 bucket name.
s3_bucket() { matches '[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]' "$1" || fail "bucket '$1' is not an S3 bucket name"; }

# minio_bucket_job: the parameters of a job of pack minio on the release's bucket: RELEASE and
# NAMESPACE (release_and_namespace fail), BUCKET (the bucket parameter, else `data`), MC_IMAGE
# (mc_image), and ENDPOINT, the S3 URL of the MinIO release inside the cluster.
minio_bucket_job() {
    release_and_namespace fail
    BUCKET=${OPSGRAPH_PARAM_BUCKET:-data}
    s3_bucket "$BUCKET"
    mc_image
    # shellcheck disable=SC2034 # ENDPOINT is for the scripts
    ENDPOINT="http://$RELEASE.$NAMESPACE.svc:9000"
}

# preflight RESOURCE...: kubectl and helm are installed, the API answers (SERVER: its version),
# helm is 3.8 or later (HELM_VERSION), and this identity may create the namespace when it is
# missing and each RESOURCE in it. Problems are reported with `problem`.
preflight() {
    for tool in kubectl helm; do
        command -v "$tool" >/dev/null 2>&1 || problem "$tool is not installed on the control host"
    done
    checked
    SERVER=$(kubectl get --raw /version 2>/dev/null | sed -n 's/.*"gitVersion": *"\([^"]*\)".*/\1/p' | head -n 1)
    [ -n "$SERVER" ] || fail "the cluster's API does not answer"
    HELM_VERSION=$(helm version --short 2>/dev/null | sed 's/+.*//')
    case $HELM_VERSION in
        v3.[0-7].*) problem "helm $HELM_VERSION is too old (3.8 or later)" ;;
        v3.*) ;;
        *) problem "helm $HELM_VERSION is not helm 3" ;;
    esac
    if ! kubectl get namespace "$NAMESPACE" >/dev/null 2>&1; then
        [ "$(kubectl auth can-i create namespaces)" = yes ] || problem "may not create namespace $NAMESPACE"
    fi
    for resource in "$@"; do
        [ "$(kubectl auth can-i create "$resource" -n "$NAMESPACE")" = yes ] ||
            problem "may not create $resource in namespace $NAMESPACE"
    done
}

# default_storage_class: prints the name of the cluster's default StorageClass (nothing: none).
default_storage_class() {
    kubectl get storageclass -o jsonpath='{range .items[?(@.metadata.annotations.storageclass\.kubernetes\.io/is-default-class=="true")]}{.metadata.name}{"\n"}{end}' | head -n 1
}

# preflight_report FILE STORAGE_CLASS: after `checked`, what the preflight found (SERVER_VERSION,
# HELM_VERSION, RELEASE, NAMESPACE, STORAGE_CLASS, STATUS=ok) as the artifact OPSGRAPH_OUT/FILE.
preflight_report() {
    mkdir -p "$OPSGRAPH_OUT"
    {
        printf 'SERVER_VERSION=%s\n' "$SERVER"
        printf 'HELM_VERSION=%s\n' "$HELM_VERSION"
        printf 'RELEASE=%s\n' "$RELEASE"
        printf 'NAMESPACE=%s\n' "$NAMESPACE"
        printf 'STORAGE_CLASS=%s\n' "$2"
        printf 'STATUS=ok\n'
    } >"$OPSGRAPH_OUT/$1"
}

# ensure_namespace: NAMESPACE exists, labelled as managed by opsgraph.
ensure_namespace() {
    if ! kubectl get namespace "$NAMESPACE" >/dev/null 2>&1; then
        kubectl create namespace "$NAMESPACE"
    fi
    kubectl label namespace "$NAMESPACE" --overwrite app.kubernetes.io/managed-by=opsgraph >/dev/null
}

# mc_job JOB SCRIPT BACKOFF < ENV: runs the file SCRIPT with /bin/sh in the image MC_IMAGE as the
# Job JOB in NAMESPACE (its previous run deleted first), unprivileged, with a read-only root
# filesystem and a writable /tmp. Standard input holds the container's further `env:` entries
# (and an `envFrom:` after them), indented by 12 spaces.
mc_job() {
    env=$(cat)
    kubectl -n "$NAMESPACE" create configmap "$1" --from-file=run.sh="$2" \
        --dry-run=client -o yaml | kubectl apply -f - >/dev/null
    kubectl -n "$NAMESPACE" delete job "$1" --ignore-not-found --wait=true >/dev/null
    kubectl apply -f - >/dev/null <<JOBSPEC
apiVersion: batch/v1
kind: Job
metadata:
  name: $1
  namespace: $NAMESPACE
  labels: {app.kubernetes.io/managed-by: opsgraph, app.kubernetes.io/instance: $RELEASE}
spec:
  backoffLimit: $3
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
$env
          securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
          volumeMounts:
            - {name: script, mountPath: /opsgraph, readOnly: true}
            - {name: tmp, mountPath: /tmp}
      volumes:
        - {name: script, configMap: {name: "$1"}}
        - {name: tmp, emptyDir: {}}
JOBSPEC
}

# wait_job JOB SECONDS WHAT TAIL: waits for the Job JOB in NAMESPACE to succeed (its last TAIL log
# lines then go to stderr); when it failed or SECONDS passed, its logs go to stderr and the script
# fails with "WHAT did not succeed". (kubectl wait alone would sit out the timeout on failure.)
wait_job() {
    deadline=$(($(date +%s) + $2))
    while :; do
        succeeded=$(kubectl -n "$NAMESPACE" get job "$1" -o jsonpath='{.status.succeeded}')
        failed=$(kubectl -n "$NAMESPACE" get job "$1" -o jsonpath='{.status.conditions[?(@.type=="Failed")].status}')
        [ "${succeeded:-0}" -ge 1 ] && break
        if [ "$failed" = True ] || [ "$(date +%s)" -ge "$deadline" ]; then
            kubectl -n "$NAMESPACE" logs "job/$1" --all-containers --tail=50 >&2 || true
            fail "$3 did not succeed"
        fi
        sleep 5
    done
    kubectl -n "$NAMESPACE" logs "job/$1" --tail="$4" >&2 || true
}

# rollback_release: the release (release_and_namespace) back to the revision before its newest
# (`helm rollback` without a revision), waiting for it; the `rollback` of an upgrade.
rollback_release() {
    release_and_namespace fail
    helm -n "$NAMESPACE" history "$RELEASE" --max 2 >&2 || fail "release $RELEASE has no history in $NAMESPACE"
    helm -n "$NAMESPACE" rollback "$RELEASE" --wait --timeout 10m
    log "ok: release $RELEASE rolled back to its previous revision"
}

# unlock_release: a release stuck in pending-install/-upgrade/-rollback (an interrupted helm run)
# rolled back to its last deployed (or superseded) revision, waiting for it; a release that is not
# pending is left alone; one that never deployed fails (uninstalling it is a person's decision).
unlock_release() {
    release_and_namespace fail
    _history=$(helm -n "$NAMESPACE" history "$RELEASE" --max 20 -o yaml) ||
        fail "release $RELEASE has no history in $NAMESPACE"
    _status=$(printf '%s\n' "$_history" | awk '$1 == "status:" { s = $2 } END { print s }')
    case $_status in
        pending-install | pending-upgrade | pending-rollback) ;;
        *)
            log "release $RELEASE is $_status, not pending: nothing to unlock"
            return 0
            ;;
    esac
    _good=$(printf '%s\n' "$_history" |
        awk '$1 == "revision:" { r = $2 } $1 == "status:" && ($2 == "deployed" || $2 == "superseded") { g = r } END { print g }')
    [ -n "$_good" ] || fail "release $RELEASE is $_status and never deployed: helm -n $NAMESPACE uninstall $RELEASE is for a person"
    helm -n "$NAMESPACE" rollback "$RELEASE" "$_good" --wait --timeout 10m
    log "ok: release $RELEASE ($_status) rolled back to revision $_good"
}

# uninstall_release PVC_SELECTOR: `helm uninstall --wait` of the release (one that is not
# installed is left alone). With the purge parameter true, the release's persistent volume
# claims (PVC_SELECTOR) and the Secrets opsgraph made for it go too; by default both are kept.
uninstall_release() {
    release_and_namespace fail
    _purge=${OPSGRAPH_PARAM_PURGE:-false}
    case $_purge in true | false) ;; *) fail "purge must be true or false, not '$_purge'" ;; esac
    _listed=$(helm -n "$NAMESPACE" list -q --filter "^$RELEASE\$") || fail "helm cannot list the releases in $NAMESPACE"
    if [ -n "$_listed" ]; then
        helm -n "$NAMESPACE" uninstall "$RELEASE" --wait --timeout 10m
        log "release $RELEASE uninstalled"
    else
        log "release $RELEASE is not installed in $NAMESPACE"
    fi
    if [ "$_purge" = true ]; then
        kubectl -n "$NAMESPACE" delete pvc -l "$1" --ignore-not-found --wait=true
        kubectl -n "$NAMESPACE" delete secret --ignore-not-found \
            -l "app.kubernetes.io/instance=$RELEASE,app.kubernetes.io/managed-by=opsgraph"
        log "purged: the release's volumes and secrets are deleted"
    else
        log "kept: the release's volumes and secrets (purge: false)"
    fi
}
