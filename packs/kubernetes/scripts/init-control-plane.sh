#!/bin/sh
# opsgraph pack kubernetes - job init-control-plane: kubeadm init on the control-plane node.
#
# Runs on the single node of scope control_plane, as root over SSH, after containerd is up
# on every node. Idempotent:
#   - no /etc/kubernetes/admin.conf: writes a kubeadm config, pre-pulls the images (so a
#     registry problem fails early with kubeadm's "failed to pull image" message), runs
#     kubeadm init;
#   - admin.conf present and the API ready: checks it is the same cluster and only
#     re-exports the artifacts;
#   - admin.conf present but no API: stops. Half-initialised state needs a person (and
#     perhaps the destructive reset-node job), not a blind retry.
# The bootstrap token is never printed: kubeadm init runs with --skip-token-print and the
# join command goes only to the join_command artifact (a secret).
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#   OPSGRAPH_INTENT_NAME the cluster's name when cluster_name is not given
#
# Parameters: kubernetes_version, cluster_name, pod_cidr, service_cidr,
#             control_plane_endpoint, image_repository, join_token_ttl, upload_certs
# Provides:   kubernetes.control_plane
# Produces:   kubeconfig_admin (secret), join_command (secret); with upload_certs true (HA),
#             control_plane_join_command (secret)
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/node-lib.sh
. "$OPSGRAPH_LIB/node-lib.sh"
on_node

needs_out
needs_root

CLUSTER_NAME=${OPSGRAPH_PARAM_CLUSTER_NAME:-${OPSGRAPH_INTENT_NAME:-}}
POD_CIDR=${OPSGRAPH_PARAM_POD_CIDR:-10.244.0.0/16}
SERVICE_CIDR=${OPSGRAPH_PARAM_SERVICE_CIDR:-10.96.0.0/12}
ENDPOINT=${OPSGRAPH_PARAM_CONTROL_PLANE_ENDPOINT:-}
IMAGE_REPOSITORY=${OPSGRAPH_PARAM_IMAGE_REPOSITORY:-registry.k8s.io}
TOKEN_TTL=${OPSGRAPH_PARAM_JOIN_TOKEN_TTL:-2h}
UPLOAD_CERTS=${OPSGRAPH_PARAM_UPLOAD_CERTS:-false}
case $UPLOAD_CERTS in true | false) ;; *) fail "upload_certs must be true or false, not '$UPLOAD_CERTS'" ;; esac
K8S_VERSION=${OPSGRAPH_PARAM_KUBERNETES_VERSION:-1.30}
K8S_VERSION=${K8S_VERSION#v}

matches '[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?' "$CLUSTER_NAME" || fail "cluster name '$CLUSTER_NAME' is not a DNS label"
matches '([0-9]{1,3}\.){3}[0-9]{1,3}/[0-9]{1,2}' "$POD_CIDR" || fail "pod_cidr '$POD_CIDR' is not a CIDR"
matches '([0-9]{1,3}\.){3}[0-9]{1,3}/[0-9]{1,2}' "$SERVICE_CIDR" || fail "service_cidr '$SERVICE_CIDR' is not a CIDR"
matches '[0-9]+[smh]' "$TOKEN_TTL" || fail "join_token_ttl '$TOKEN_TTL' is not a duration such as 2h"
matches '[a-z0-9][-a-z0-9.:/_]*' "$IMAGE_REPOSITORY" || fail "image_repository '$IMAGE_REPOSITORY' is not a repository"

ADMIN=/etc/kubernetes/admin.conf
kubectl_admin() { kubectl --kubeconfig "$ADMIN" "$@"; }
api_ready() { kubectl_admin get --raw=/readyz >/dev/null 2>&1; }

KUBEADM_VERSION=$(kubeadm version -o short)
case ${KUBEADM_VERSION#v} in
    "$K8S_VERSION" | "$K8S_VERSION".*) ;;
    *) fail "installed kubeadm is $KUBEADM_VERSION, kubernetes_version is $K8S_VERSION" ;;
esac
minor=$(printf '%s\n' "${KUBEADM_VERSION#v}" | cut -d. -f2)
if [ "$minor" -ge 31 ]; then API=kubeadm.k8s.io/v1beta4; else API=kubeadm.k8s.io/v1beta3; fi

if [ -f "$ADMIN" ]; then
    api_ready || fail "$ADMIN exists but the API is not ready: an earlier init stopped half-way; inspect the node (journalctl -u kubelet, crictl ps -a), fix it or run reset-node, then retry"
    existing=$(kubectl_admin -n kube-system get configmap kubeadm-config -o jsonpath='{.data.ClusterConfiguration}' |
        sed -n 's/^clusterName: *//p')
    [ "$existing" = "$CLUSTER_NAME" ] || fail "this node already runs cluster '$existing', not '$CLUSTER_NAME'"
    log "cluster $CLUSTER_NAME is already initialised here; exporting artifacts again"
else
    ADVERTISE=$(ip -4 route get 1.1.1.1 2>/dev/null | awk '{ for (i = 1; i < NF; i++) if ($i == "src") { print $(i + 1); exit } }')
    [ -n "$ADVERTISE" ] || fail "cannot find this node's primary IPv4 address"
    [ -n "$ENDPOINT" ] || ENDPOINT=$ADVERTISE
    case $ENDPOINT in *:*) ;; *) ENDPOINT=$ENDPOINT:6443 ;; esac

    install -d -m 0700 /etc/kubernetes/opsgraph
    CONFIG=/etc/kubernetes/opsgraph/kubeadm-init.yaml
    umask 077
    cat >"$CONFIG" <<CONF
# written by opsgraph (pack kubernetes, job init-control-plane)
apiVersion: $API
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: "$ADVERTISE"
  bindPort: 6443
nodeRegistration:
  criSocket: unix:///run/containerd/containerd.sock
---
apiVersion: $API
kind: ClusterConfiguration
clusterName: "$CLUSTER_NAME"
kubernetesVersion: "$KUBEADM_VERSION"
controlPlaneEndpoint: "$ENDPOINT"
imageRepository: "$IMAGE_REPOSITORY"
networking:
  podSubnet: "$POD_CIDR"
  serviceSubnet: "$SERVICE_CIDR"
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
CONF
    umask 022

    log "pulling control-plane images from $IMAGE_REPOSITORY"
    kubeadm config images pull --config "$CONFIG"
    log "kubeadm init: cluster $CLUSTER_NAME, endpoint $ENDPOINT, Kubernetes $KUBEADM_VERSION"
    kubeadm init --config "$CONFIG" --skip-token-print
fi

wait_api_ready "the API server did not become ready"

# root's kubectl on this node.
install -d -m 0700 /root/.kube
if ! cmp -s "$ADMIN" /root/.kube/config; then
    install -m 0600 "$ADMIN" /root/.kube/config
fi

# Artifacts (secrets): the admin kubeconfig and a join command with a fresh, short-lived token.
mkdir -p "$OPSGRAPH_OUT"
umask 077
install -m 0600 "$ADMIN" "$OPSGRAPH_OUT/kubeconfig_admin"
join=$(kubeadm token create --ttl "$TOKEN_TTL" --description "opsgraph join-workers ${OPSGRAPH_OPERATION_ID:-}" --print-join-command)
matches 'kubeadm join [^ ]+ --token [a-z0-9]{6}\.[a-z0-9]{16} --discovery-token-ca-cert-hash sha256:[a-f0-9]{64} *' "$join" ||
    fail "kubeadm printed an unexpected join command"
printf '%s\n' "$join" >"$OPSGRAPH_OUT/join_command.tmp"
mv -f "$OPSGRAPH_OUT/join_command.tmp" "$OPSGRAPH_OUT/join_command"

# An HA control plane (upload_certs true): the certificates go to the cluster, encrypted with a
# fresh key (kubeadm deletes them after 2 h), and the other control-plane nodes get a join
# command with that key (control_plane_join_command, a secret).
if [ "$UPLOAD_CERTS" = true ]; then
    uploaded=$(kubeadm init phase upload-certs --upload-certs) || fail "kubeadm could not upload the control-plane certificates"
    key=$(printf '%s\n' "$uploaded" | tail -n 1)
    matches '[a-f0-9]{64}' "$key" || fail "kubeadm printed no certificate key"
    printf '%s --control-plane --certificate-key %s\n' "$join" "$key" >"$OPSGRAPH_OUT/control_plane_join_command.tmp"
    mv -f "$OPSGRAPH_OUT/control_plane_join_command.tmp" "$OPSGRAPH_OUT/control_plane_join_command"
    log "control-plane certificates uploaded; control_plane_join_command written"
fi
log "ok: control plane ready; kubeconfig_admin and join_command (token ttl $TOKEN_TTL) written"
