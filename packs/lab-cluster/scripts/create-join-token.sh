#!/bin/sh
# opsgraph pack lab-cluster - job create-join-token: a bootstrap token for new lab nodes.
#
# Runs on the control-plane node of an existing lab cluster (add_node). Checks the node is the
# control plane of the intended cluster (the intent's name), that its apiserver runs and that
# the cluster's Kubernetes minor is the requested one, then adds a short-lived bootstrap token
# (reused within the operation) and writes the join_token artifact.
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: kubernetes_version, join_token_ttl, fail_job, fail_mode
# Produces:   join_token (secret)
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node cluster
# shellcheck source-path=SCRIPTDIR source=cluster-lib.sh disable=SC1091
. "$LAB_SCRIPTS/cluster-lib.sh"

K8S_VERSION=${OPSGRAPH_PARAM_KUBERNETES_VERSION:-1.30}
K8S_VERSION=${K8S_VERSION#v}
TOKEN_TTL=${OPSGRAPH_PARAM_JOIN_TOKEN_TTL:-1h}
TTL=$(seconds "$TOKEN_TTL") || fail "join_token_ttl '$TOKEN_TTL' is not a duration such as 1h"
ADMIN=$NODE_DIR/kubernetes/admin.conf
TOKENS=$NODE_DIR/kubernetes/tokens

[ -f "$ADMIN" ] || fail "$NODE is not the control plane of a lab cluster (no $ADMIN)"
[ "$(kcfg "$ADMIN" cluster)" = "$CLUSTER" ] ||
    fail "the control plane $NODE runs cluster '$(kcfg "$ADMIN" cluster)', not $CLUSTER"
lab_alive apiserver "$NODE_DIR" ||
    fail "The connection to the server $NODE:6443 was refused - did you specify the right host or port?"
cluster_version=$(kv "$NODE_DIR/kubernetes/version.env" KUBERNETES_VERSION)
minor() { printf '%s\n' "$1" | cut -d. -f1,2; }
[ "$(minor "$cluster_version")" = "$(minor "$K8S_VERSION")" ] ||
    fail "$CLUSTER runs Kubernetes $cluster_version; new nodes must get the same minor, not $K8S_VERSION"

lab_failpoint "failed to create or update bootstrap token with name bootstrap-token-$(random_hex 6): Unauthorized"

bootstrap_token "$TOKENS" "$TTL"
{
    printf 'CLUSTER=%s\n' "$CLUSTER"
    printf 'CONTROL_PLANE=%s\n' "$NODE"
    printf 'API_SERVER=%s\n' "$NODE:6443"
    printf 'TOKEN=%s\n' "$BOOTSTRAP_TOKEN"
    printf 'CA_CERT_HASH=%s\n' "$(kcfg "$ADMIN" certificate-authority-hash)"
    printf 'EXPIRES=%s\n' "$TOKEN_EXPIRES"
} | lab_artifact join_token
log "ok: bootstrap token ${BOOTSTRAP_TOKEN%%.*} for $CLUSTER, valid $TOKEN_TTL"
