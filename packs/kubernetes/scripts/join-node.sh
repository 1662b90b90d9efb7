#!/bin/sh
# opsgraph pack kubernetes - jobs join-workers and join-node: kubeadm join as a worker.
#
# Runs on each node of its scope (workers, or the new target_nodes), as root over SSH.
# The join command artifact is parsed, checked against strict patterns, and turned into a
# JoinConfiguration file (mode 0600, removed afterwards) so the token never appears in a
# process list or a log. Idempotent: a node that already has /etc/kubernetes/kubelet.conf
# for the same API endpoint is left as it is (kubelet is started if it is not running); a
# node that belongs to a different cluster is an error.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#
# Requires: join_command (OPSGRAPH_ARTIFACT_JOIN_COMMAND)
# Provides: kubernetes.node.joined
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/node-lib.sh
. "$OPSGRAPH_LIB/node-lib.sh"
on_node

JOIN=${OPSGRAPH_ARTIFACT_JOIN_COMMAND:?the join_command artifact is required}
[ -r "$JOIN" ] || fail "cannot read $JOIN"
needs_root

# word N following WORD in the join command.
after_word() { awk -v w="$1" '{ for (i = 1; i < NF; i++) if ($i == w) { print $(i + 1); exit } }' "$JOIN"; }
ENDPOINT=$(after_word join)
TOKEN=$(after_word --token)
CA_HASH=$(after_word --discovery-token-ca-cert-hash)
matches '[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?:[0-9]{1,5}' "$ENDPOINT" || fail "join command has no valid API endpoint"
matches '[a-z0-9]{6}\.[a-z0-9]{16}' "$TOKEN" || fail "join command has no valid bootstrap token"
matches 'sha256:[a-f0-9]{64}' "$CA_HASH" || fail "join command has no valid CA certificate hash"

KUBELET_CONF=/etc/kubernetes/kubelet.conf
if [ -f "$KUBELET_CONF" ]; then
    server=$(sed -n 's/^ *server: *//p' "$KUBELET_CONF" | head -n 1)
    [ "$server" = "https://$ENDPOINT" ] || fail "this node already belongs to the cluster at $server, not https://$ENDPOINT"
    log "already joined to $ENDPOINT"
    systemctl is-active --quiet kubelet || systemctl restart kubelet
else
    [ -z "$(ls -A /etc/kubernetes/manifests 2>/dev/null)" ] ||
        fail "/etc/kubernetes/manifests is not empty: leftovers of an earlier kubeadm run; run reset-node first"
    minor=$(kubeadm version -o short | sed 's/^v//' | cut -d. -f2)
    if [ "$minor" -ge 31 ]; then API=kubeadm.k8s.io/v1beta4; else API=kubeadm.k8s.io/v1beta3; fi

    install -d -m 0700 /etc/kubernetes/opsgraph
    CONFIG=/etc/kubernetes/opsgraph/kubeadm-join.yaml
    trap 'rm -f "$CONFIG"' EXIT
    umask 077
    cat >"$CONFIG" <<CONF
apiVersion: $API
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: "$ENDPOINT"
    token: "$TOKEN"
    caCertHashes:
      - "$CA_HASH"
nodeRegistration:
  criSocket: unix:///run/containerd/containerd.sock
CONF
    umask 022
    log "kubeadm join $ENDPOINT"
    kubeadm join --config "$CONFIG"
fi

i=0
until systemctl is-active --quiet kubelet && [ -s "$KUBELET_CONF" ]; do
    i=$((i + 1))
    [ "$i" -lt 30 ] || fail "kubelet is not running after the join"
    sleep 2
done
log "ok: joined $ENDPOINT"
