#!/bin/sh
# opsgraph pack lab-cluster - job install-cni: the lab pod network.
#
# Runs on the control-plane node after init-control-plane. Authenticates with the admin
# kubeconfig artifact (its token must be the control plane's), writes the CNI configuration
# (<node>/etc/cni/net.d/10-lab.conflist, also published as <lab>/<cluster>/cni.conflist for
# nodes that join) and <node>/etc/cni.conf, and starts the node's "cni" agent (a background loop
# that beats only while the apiserver runs).
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Requires:   kubeconfig_admin (OPSGRAPH_ARTIFACT_KUBECONFIG_ADMIN)
# Parameters: pod_cidr, fail_job, fail_mode
# Provides:   lab.kubernetes.cni
# Produces:   cni_config
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node cluster
# shellcheck source-path=SCRIPTDIR source=cluster-lib.sh disable=SC1091
. "$LAB_SCRIPTS/cluster-lib.sh"

KUBECONFIG_ADMIN=${OPSGRAPH_ARTIFACT_KUBECONFIG_ADMIN:?the kubeconfig_admin artifact is required}
[ -r "$KUBECONFIG_ADMIN" ] || fail "cannot read the kubeconfig_admin artifact $KUBECONFIG_ADMIN"
POD_CIDR=${OPSGRAPH_PARAM_POD_CIDR:-10.244.0.0/16}
matches '([0-9]{1,3}\.){3}[0-9]{1,3}/[0-9]{1,2}' "$POD_CIDR" || fail "pod_cidr '$POD_CIDR' is not a CIDR"
ADMIN=$NODE_DIR/kubernetes/admin.conf
SERVER=$(kcfg "$KUBECONFIG_ADMIN" server)

[ "$(kcfg "$KUBECONFIG_ADMIN" cluster)" = "$CLUSTER" ] ||
    fail "the kubeconfig_admin artifact is for cluster '$(kcfg "$KUBECONFIG_ADMIN" cluster)', not $CLUSTER"
lab_alive apiserver "$NODE_DIR" ||
    fail "The connection to the server ${SERVER#https://} was refused - did you specify the right host or port?"
token=$(kcfg "$KUBECONFIG_ADMIN" token)
if [ -z "$token" ] || [ "$token" != "$(kcfg "$ADMIN" token)" ]; then
    fail "error: You must be logged in to the server (Unauthorized)"
fi

lab_failpoint "error: error validating \"/etc/opsgraph/calico.yaml\": error validating data: failed to download openapi: Get \"$SERVER/openapi/v2?timeout=32s\": dial tcp $(kv "$NODE_DIR/node.env" ADDRESS):6443: connect: connection refused; if you choose to ignore these errors, turn validation off with --validate=false"

mkdir -p "$NODE_DIR/etc/cni/net.d"
conflist() {
    printf '{\n  "cniVersion": "1.0.0",\n  "name": "lab-pod-network",\n'
    printf '  "plugins": [\n    {\n      "type": "lab-bridge",\n      "bridge": "cni0",\n'
    printf '      "ipam": {"type": "host-local", "subnet": "%s"}\n    }\n  ]\n}\n' "$POD_CIDR"
}
conflist | write_file "$NODE_DIR/etc/cni/net.d/10-lab.conflist"
printf 'CNI=lab-bridge\nPOD_CIDR=%s\n' "$POD_CIDR" | write_file "$NODE_DIR/etc/cni.conf"
if lab_proven; then
    conflist | write_file "$CLUSTER_DIR/cni.conflist"
    lab_start cni "$NODE_DIR" sh "$NODE_DIR/bin/lab-daemon" cni "$NODE_DIR" apiserver
fi
conflist | lab_artifact cni_config
log "ok: pod network $POD_CIDR"
