#!/bin/sh
# opsgraph pack lab-cluster - job prepare-network: write a lab node's network configuration.
#
# Runs on each node of target_nodes, after validate-nodes on the same node and
# validate-credentials. Writes <node>/etc/network.conf: the node's lab address, the pod
# network, and the settings kubelet wants (forwarding, bridged traffic through iptables, swap
# off) - what the kubernetes pack sets with sysctl and swapoff.
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Requires:   node_inventory (this node's), credentials_report
# Parameters: pod_cidr, fail_job, fail_mode
# Provides:   lab.node.network_ready
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node

INVENTORY=${OPSGRAPH_ARTIFACT_NODE_INVENTORY:?the node_inventory artifact is required}
REPORT=${OPSGRAPH_ARTIFACT_CREDENTIALS_REPORT:?the credentials_report artifact is required}
[ -r "$INVENTORY" ] || fail "cannot read the node_inventory artifact $INVENTORY"
[ -r "$REPORT" ] || fail "cannot read the credentials_report artifact $REPORT"
[ "$(kv "$INVENTORY" NODE)" = "$NODE" ] ||
    fail "the node_inventory artifact describes node '$(kv "$INVENTORY" NODE)', not $NODE"
[ "$(kv "$REPORT" ANONYMOUS_PULL)" = ok ] || fail "the credentials report does not allow pulling images"
ADDRESS=$(kv "$INVENTORY" ADDRESS)
matches '([0-9]{1,3}\.){3}[0-9]{1,3}' "$ADDRESS" || fail "node_inventory has no valid ADDRESS"
POD_CIDR=${OPSGRAPH_PARAM_POD_CIDR:-10.244.0.0/16}
matches '([0-9]{1,3}\.){3}[0-9]{1,3}/[0-9]{1,2}' "$POD_CIDR" || fail "pod_cidr '$POD_CIDR' is not a CIDR"
[ -d "$NODE_DIR" ] || fail "node directory $NODE_DIR is missing: validate-nodes has not run"

lab_failpoint "modprobe: FATAL: Module br_netfilter not found in directory /lib/modules/$(uname -r)" \
    "sysctl: cannot stat /proc/sys/net/bridge/bridge-nf-call-iptables: No such file or directory"

if lab_proven; then
    mkdir -p "$NODE_DIR/etc"
    {
        printf 'NODE=%s\n' "$NODE"
        printf 'ADDRESS=%s\n' "$ADDRESS"
        printf 'POD_CIDR=%s\n' "$POD_CIDR"
        printf 'IP_FORWARD=1\n'
        printf 'BRIDGE_NF_CALL_IPTABLES=1\n'
        printf 'SWAP=off\n'
    } | write_file "$NODE_DIR/etc/network.conf"
fi
log "ok: $ADDRESS, forwarding on, swap off"
