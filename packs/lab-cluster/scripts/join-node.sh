#!/bin/sh
# opsgraph pack lab-cluster - jobs join-workers and join-node: "kubeadm join" a lab node.
#
# Runs on each node of its scope (workers, or the new target_nodes). Reads the join_token
# artifact, checks it like kubeadm does against the control plane (its apiserver runs, the
# token is one of its unexpired bootstrap tokens, the CA hash is its own), writes the node's
# kubelet kubeconfig, copies the cluster's CNI configuration, starts the node's "kubelet" (a
# background loop that beats only while the node's containerd runs) and registers the node in
# <lab>/<cluster>/nodes/<node>. Idempotent: a node already joined to this cluster only gets its
# kubelet started; a node of another cluster is an error.
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Requires:   join_token (OPSGRAPH_ARTIFACT_JOIN_TOKEN)
# Parameters: fail_job, fail_mode
# Provides:   lab.kubernetes.node.joined
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node cluster
# shellcheck source-path=SCRIPTDIR source=cluster-lib.sh disable=SC1091
. "$LAB_SCRIPTS/cluster-lib.sh"

JOIN=${OPSGRAPH_ARTIFACT_JOIN_TOKEN:?the join_token artifact is required}
[ -r "$JOIN" ] || fail "cannot read the join_token artifact $JOIN"
JOIN_CLUSTER=$(kv "$JOIN" CLUSTER)
kvs "$JOIN" CONTROL_PLANE API_SERVER TOKEN CA_CERT_HASH
[ "$JOIN_CLUSTER" = "$CLUSTER" ] || fail "the join token is for cluster '$JOIN_CLUSTER', not $CLUSTER"
matches "$LAB_NAME_RE" "$CONTROL_PLANE" || fail "the join token names no valid control-plane node"
matches "$LAB_NAME_RE:[0-9]{1,5}" "$API_SERVER" || fail "the join token has no valid API server endpoint"
matches '[0-9a-f]{6}\.[0-9a-f]{16}' "$TOKEN" || fail "the join token has no valid bootstrap token"
matches 'sha256:[0-9a-f]{64}' "$CA_CERT_HASH" || fail "the join token has no valid CA certificate hash"
CP_DIR=$LAB/$CONTROL_PLANE

lab_alive containerd "$NODE_DIR" ||
    fail "[ERROR CRI]: container runtime is not running on $NODE: install-runtime has not run or containerd stopped"
[ -x "$NODE_DIR/bin/lab-daemon" ] || fail "$NODE_DIR/bin/lab-daemon is missing: install-runtime has not run"

lab_failpoint "[preflight] Running pre-flight checks" \
    "error execution phase preflight: couldn't validate the identity of the API Server: could not find a JWS signature in the cluster-info ConfigMap for token ID \"${TOKEN%%.*}\""

KUBELET_CONF=$NODE_DIR/kubernetes/kubelet.conf
if [ -f "$KUBELET_CONF" ]; then
    member=$(kcfg "$KUBELET_CONF" cluster)
    [ "$member" = "$CLUSTER" ] || fail "node $NODE already belongs to cluster '$member': run lab-reset on it first"
    log "already joined to $CLUSTER"
else
    lab_alive apiserver "$CP_DIR" ||
        fail "error execution phase preflight: couldn't validate the identity of the API Server: Get \"https://$API_SERVER/api/v1/namespaces/kube-public/configmaps/cluster-info?timeout=10s\": dial tcp $API_SERVER: connect: connection refused"
    token_valid "$CP_DIR/kubernetes/tokens" "$TOKEN" ||
        fail "error execution phase preflight: couldn't validate the identity of the API Server: could not find a JWS signature in the cluster-info ConfigMap for token ID \"${TOKEN%%.*}\" (the token is unknown or expired)"
    [ "$(kcfg "$CP_DIR/kubernetes/admin.conf" certificate-authority-hash)" = "$CA_CERT_HASH" ] ||
        fail "error execution phase preflight: cluster CA found in cluster-info ConfigMap is invalid: none of the public keys \"$CA_CERT_HASH\" are pinned"
    mkdir -p "$NODE_DIR/kubernetes"
    log "joining $CLUSTER at $API_SERVER"
    write_kubeconfig "$KUBELET_CONF" "system:node:$NODE" "$API_SERVER" "$CA_CERT_HASH" "$(random_hex 32)"
fi
if [ -f "$CLUSTER_DIR/cni.conflist" ]; then
    mkdir -p "$NODE_DIR/etc/cni/net.d"
    write_file "$NODE_DIR/etc/cni/net.d/10-lab.conflist" <"$CLUSTER_DIR/cni.conflist"
else
    log "warning: the cluster has no pod network yet"
fi
if lab_proven; then
    lab_start kubelet "$NODE_DIR" sh "$NODE_DIR/bin/lab-daemon" kubelet "$NODE_DIR" containerd
    [ -f "$CLUSTER_DIR/nodes/$NODE" ] || register_node worker Joined
fi
log "ok: $NODE joined $CLUSTER"
