#!/bin/sh
# opsgraph pack lab-cluster - job validate-inputs: validate the lab cluster's parameters.
#
# Runs once (no scope), locally. Checks the cluster name (the intent's name), the Kubernetes
# version, the pod CIDR and the token lifetime, records them in the cluster directory
# "$OPSGRAPH_LAB_DIR/<cluster>/spec.env" and in the cluster_spec artifact.
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: kubernetes_version, pod_cidr, join_token_ttl, fail_job, fail_mode
# Produces:   cluster_spec - KEY=value lines
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init cluster

K8S_VERSION=${OPSGRAPH_PARAM_KUBERNETES_VERSION:-1.30}
K8S_VERSION=${K8S_VERSION#v}
POD_CIDR=${OPSGRAPH_PARAM_POD_CIDR:-10.244.0.0/16}
TOKEN_TTL=${OPSGRAPH_PARAM_JOIN_TOKEN_TTL:-2h}

lab_failpoint "validate-inputs: ERROR: pod CIDR $POD_CIDR overlaps the service CIDR 10.96.0.0/12"

errors=0
problem() {
    log "ERROR: $*"
    errors=$((errors + 1))
}
matches '1\.(2[4-9]|[3-9][0-9])(\.[0-9]{1,3})?' "$K8S_VERSION" ||
    problem "kubernetes_version '$K8S_VERSION' is not a supported version (1.24 or later, e.g. 1.30 or 1.30.4)"
matches '([0-9]{1,3}\.){3}[0-9]{1,3}/([89]|1[0-9]|2[0-4])' "$POD_CIDR" ||
    problem "pod_cidr '$POD_CIDR' is not an IPv4 network with a /8../24 prefix"
seconds "$TOKEN_TTL" >/dev/null || problem "join_token_ttl '$TOKEN_TTL' is not a duration such as 2h"
if [ -f "$CLUSTER_DIR/node.env" ]; then
    problem "the cluster name '$CLUSTER' is already the name of a lab node ($CLUSTER_DIR)"
fi
[ "$errors" -eq 0 ] || fail "$errors problem(s) in the cluster parameters"

spec() {
    printf 'CLUSTER_NAME=%s\n' "$CLUSTER"
    printf 'KUBERNETES_VERSION=%s\n' "$K8S_VERSION"
    printf 'POD_CIDR=%s\n' "$POD_CIDR"
    printf 'JOIN_TOKEN_TTL=%s\n' "$TOKEN_TTL"
}
if lab_proven; then
    mkdir -p "$CLUSTER_DIR/nodes"
    spec | write_file "$CLUSTER_DIR/spec.env"
fi
spec | lab_artifact cluster_spec
log "ok: cluster $CLUSTER, Kubernetes $K8S_VERSION, pods $POD_CIDR"
