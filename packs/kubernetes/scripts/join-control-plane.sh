#!/bin/sh
# opsgraph pack kubernetes - job join-control-plane (action create_ha_cluster): kubeadm join
# --control-plane on each further control-plane node, one at a time (controls.rollout), through
# the HA endpoint.
#
# Runs on each node of scope control_plane_members, as root over SSH, after the first node's
# kubeadm init. The join command (control_plane_join_command, a secret) carries the bootstrap
# token and the key of the certificates the first node uploaded; it is never printed. The node
# advertises its address from control_plane_addresses. Idempotent: a node that already runs a
# control plane of this endpoint is only checked.
#
# Conventions (packs/README.md): run with `sh -eu`; POSIX sh; idempotent.
# Requires:   control_plane_join_command (OPSGRAPH_ARTIFACT_CONTROL_PLANE_JOIN_COMMAND)
# Parameters: control_plane_addresses
# Provides:   kubernetes.control_plane.member
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/node-lib.sh
. "$OPSGRAPH_LIB/node-lib.sh"
on_node

needs_root
JOIN=${OPSGRAPH_ARTIFACT_CONTROL_PLANE_JOIN_COMMAND:?the control_plane_join_command artifact is required}
[ -r "$JOIN" ] || fail "cannot read $JOIN"
SELF=${OPSGRAPH_TARGET_NAME:?OPSGRAPH_TARGET_NAME must name this node}
ADDRESSES=${OPSGRAPH_PARAM_CONTROL_PLANE_ADDRESSES:-}

after_word() { awk -v w="$1" '{ for (i = 1; i < NF; i++) if ($i == w) { print $(i + 1); exit } }' "$JOIN"; }
ENDPOINT=$(after_word join)
TOKEN=$(after_word --token)
CA_HASH=$(after_word --discovery-token-ca-cert-hash)
KEY=$(after_word --certificate-key)
matches '[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?:[0-9]{1,5}' "$ENDPOINT" || fail "the join command has no valid API endpoint"
matches '[a-z0-9]{6}\.[a-z0-9]{16}' "$TOKEN" || fail "the join command has no valid bootstrap token"
matches 'sha256:[a-f0-9]{64}' "$CA_HASH" || fail "the join command has no valid CA certificate hash"
matches '[a-f0-9]{64}' "$KEY" || fail "the join command has no certificate key: it is not a control-plane join command"

SELF_IP=''
IFS_SAVE=$IFS
IFS=,
for entry in $ADDRESSES; do
    if [ "${entry%%=*}" = "$SELF" ]; then SELF_IP=${entry#*=}; fi
done
IFS=$IFS_SAVE
[ -n "$SELF_IP" ] || fail "this node ($SELF) is not in control_plane_addresses ($ADDRESSES)"

ADMIN=/etc/kubernetes/admin.conf
if [ -f "$ADMIN" ] && [ -f /etc/kubernetes/kubelet.conf ]; then
    server=$(sed -n 's/^ *server: *//p' /etc/kubernetes/kubelet.conf | head -n 1)
    [ "$server" = "https://$ENDPOINT" ] || fail "this node already belongs to the cluster at $server, not https://$ENDPOINT"
    log "already a control-plane node of the cluster at $ENDPOINT"
else
    [ ! -f /etc/kubernetes/kubelet.conf ] || fail "this node is a worker of a cluster (kubelet.conf exists): reset it before it joins as a control-plane node"
    log "kubeadm join $ENDPOINT --control-plane (advertising $SELF_IP)"
    kubeadm join "$ENDPOINT" --token "$TOKEN" --discovery-token-ca-cert-hash "$CA_HASH" \
        --control-plane --certificate-key "$KEY" --apiserver-advertise-address "$SELF_IP" \
        --cri-socket unix:///run/containerd/containerd.sock >&2
fi

wait_api_ready "this node's API server is not ready 5 minutes after the join"
install -d -m 0700 /root/.kube
if ! cmp -s "$ADMIN" /root/.kube/config; then
    install -m 0600 "$ADMIN" /root/.kube/config
fi
log "ok: $SELF runs a control plane of the cluster at $ENDPOINT"
