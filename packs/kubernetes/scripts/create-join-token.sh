#!/bin/sh
# opsgraph pack kubernetes - job create-join-token: a join command for new nodes.
#
# Runs on the control-plane node (scope control_plane) of the existing cluster, as root
# over SSH, using its /etc/kubernetes/admin.conf. Checks first that the cluster's kubeadm
# clusterName is the one the intent names, so a token is never made on the wrong cluster.
# Each run makes a new bootstrap token; tokens expire after join_token_ttl (no cleanup
# needed), which is what makes repeating the job harmless.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#   OPSGRAPH_INTENT_NAME the cluster's name when cluster_name is not given
#
# Parameters: join_token_ttl (1h), cluster_name
# Produces:   join_command (secret)
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/node-lib.sh
. "$OPSGRAPH_LIB/node-lib.sh"

needs_out
needs_root
TTL=${OPSGRAPH_PARAM_JOIN_TOKEN_TTL:-1h}
matches '[0-9]+[smh]' "$TTL" || fail "join_token_ttl '$TTL' is not a duration such as 1h"
CLUSTER_NAME=${OPSGRAPH_PARAM_CLUSTER_NAME:-${OPSGRAPH_INTENT_NAME:-}}

ADMIN=/etc/kubernetes/admin.conf
[ -f "$ADMIN" ] || fail "$ADMIN not found: this is not a kubeadm control-plane node"
kubectl --kubeconfig "$ADMIN" get --raw=/readyz >/dev/null || fail "the API server is not ready"

actual=$(kubectl --kubeconfig "$ADMIN" -n kube-system get configmap kubeadm-config \
    -o jsonpath='{.data.ClusterConfiguration}' | sed -n 's/^clusterName: *//p')
if [ -n "$CLUSTER_NAME" ] && [ "$actual" != "$CLUSTER_NAME" ]; then
    fail "this control plane runs cluster '$actual', the intent names '$CLUSTER_NAME'"
fi

join=$(kubeadm token create --kubeconfig "$ADMIN" --ttl "$TTL" \
    --description "opsgraph add_node ${OPSGRAPH_OPERATION_ID:-}" --print-join-command)
matches 'kubeadm join [^ ]+ --token [a-z0-9]{6}\.[a-z0-9]{16} --discovery-token-ca-cert-hash sha256:[a-f0-9]{64} *' "$join" ||
    fail "kubeadm printed an unexpected join command"

mkdir -p "$OPSGRAPH_OUT"
umask 077
printf '%s\n' "$join" >"$OPSGRAPH_OUT/join_command.tmp"
mv -f "$OPSGRAPH_OUT/join_command.tmp" "$OPSGRAPH_OUT/join_command"
log "ok: join command for cluster $actual written (token ttl $TTL)"
