#!/bin/sh
# opsgraph pack kubernetes - job validate-nodes: check one node and record its facts.
#
# Runs on every node of scope target_nodes, as root over SSH. Changes nothing on the node.
# Reports every problem before failing.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#   OPSGRAPH_TARGET_ID  the resource this instance runs on (compute_node/worker-1)
#
# Requires: cluster_spec (OPSGRAPH_ARTIFACT_CLUSTER_SPEC)
# Produces: node_inventory - this node's facts as KEY=value lines
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/node-lib.sh
. "$OPSGRAPH_LIB/node-lib.sh"
on_node

first=
problem() {
    log "ERROR: $*"
    errors=$((errors + 1))
    [ -n "$first" ] || first=$*
}
warn() { log "warning: $*"; }

# in_cidr IP CIDR: the address lies inside the network.
in_cidr() {
    printf '%s %s\n' "$1" "$2" | awk '{
        split($1, a, "."); split($2, n, "[./]")
        ip = ((a[1] * 256 + a[2]) * 256 + a[3]) * 256 + a[4]
        s = ((n[1] * 256 + n[2]) * 256 + n[3]) * 256 + n[4]
        exit !(ip >= s && ip < s + 2 ^ (32 - n[5]))
    }'
}

SPEC=${OPSGRAPH_ARTIFACT_CLUSTER_SPEC:?the cluster_spec artifact is required}
needs_out
[ -r "$SPEC" ] || { log "cannot read cluster spec $SPEC"; exit 1; }
spec_get() { sed -n "s/^$1=//p" "$SPEC" | head -n 1; }
POD_CIDR=$(spec_get POD_CIDR)
SERVICE_CIDR=$(spec_get SERVICE_CIDR)

needs_root

# Operating system: Debian or Ubuntu (apt, pkgs.k8s.io .deb packages) under systemd.
# shellcheck disable=SC1091
. /etc/os-release
case " ${ID:-} ${ID_LIKE:-} " in
    *" debian "* | *" ubuntu "*) ;;
    *) problem "unsupported OS '${PRETTY_NAME:-unknown}': this pack needs Debian or Ubuntu" ;;
esac
command -v apt-get >/dev/null 2>&1 || problem "apt-get not found"
[ -d /run/systemd/system ] || problem "systemd is not the init system"
for tool in ip ss sysctl; do
    command -v "$tool" >/dev/null 2>&1 || problem "required tool '$tool' not found"
done
# modprobe only matters for a module the kernel does not already offer (prepare-network's rule).
if ! grep -qw overlay /proc/filesystems || [ ! -e /proc/sys/net/bridge/bridge-nf-call-iptables ]; then
    command -v modprobe >/dev/null 2>&1 || problem "required tool 'modprobe' not found (overlay or br_netfilter must be loaded)"
fi

ARCH=$(dpkg --print-architecture 2>/dev/null || uname -m)
case $ARCH in
    amd64 | arm64 | ppc64el | s390x) ;;
    *) problem "architecture $ARCH has no Kubernetes packages" ;;
esac

# Resources kubeadm's preflight insists on.
CPUS=$(nproc)
[ "$CPUS" -ge 2 ] || problem "$CPUS CPU(s); kubeadm needs at least 2"
MEM_MB=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 }' /proc/meminfo)
[ "$MEM_MB" -ge 1700 ] || problem "${MEM_MB} MiB of memory; kubeadm needs at least 1700 MiB"
ROOT_FREE_MB=$(df -Pm /var/lib | awk 'NR == 2 { print $4 }')
[ "$ROOT_FREE_MB" -ge 10240 ] || warn "only ${ROOT_FREE_MB} MiB free under /var/lib; images and etcd need room"

if [ -f /sys/fs/cgroup/cgroup.controllers ]; then CGROUP=v2; else CGROUP=v1; fi
[ "$CGROUP" = v2 ] || warn "cgroup v1: deprecated by Kubernetes 1.31 and later"

# Node name: kubeadm uses the lowercased hostname; it must be a DNS subdomain.
NODE_NAME=$(hostname | tr '[:upper:]' '[:lower:]')
matches '[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?' "$NODE_NAME" || problem "hostname '$NODE_NAME' is not a valid node name"
getent hosts "$(hostname)" >/dev/null 2>&1 || warn "hostname $(hostname) does not resolve; kubeadm warns about it"

PRODUCT_UUID=$(cat /sys/class/dmi/id/product_uuid 2>/dev/null || echo unknown)
MACHINE_ID=$(cat /etc/machine-id 2>/dev/null || echo unknown)
PRIMARY_IP=$(ip -4 route get 1.1.1.1 2>/dev/null | awk '{ for (i = 1; i < NF; i++) if ($i == "src") { print $(i + 1); exit } }')
[ -n "$PRIMARY_IP" ] || PRIMARY_IP=$(ip -4 -o addr show scope global | awk '{ split($4, a, "/"); print a[1]; exit }')
[ -n "$PRIMARY_IP" ] || problem "no global IPv4 address"

# No address of the node may fall inside the pod or service networks.
for addr in $(ip -4 -o addr show scope global | awk '{ split($4, a, "/"); print a[1] }'); do
    if in_cidr "$addr" "$POD_CIDR"; then problem "address $addr is inside pod_cidr $POD_CIDR"; fi
    if in_cidr "$addr" "$SERVICE_CIDR"; then problem "address $addr is inside service_cidr $SERVICE_CIDR"; fi
done

# Earlier kubeadm state: a member node is fine (re-run); half-initialised state is not.
if [ -f /etc/kubernetes/kubelet.conf ] || [ -f /etc/kubernetes/admin.conf ]; then
    KUBEADM_STATE=member
    log "node already carries kubeadm state (re-run); port checks skipped"
elif [ -n "$(ls -A /etc/kubernetes/manifests 2>/dev/null)" ] || [ -d /var/lib/etcd/member ]; then
    KUBEADM_STATE=partial
    problem "leftovers of an earlier kubeadm run (/etc/kubernetes/manifests, /var/lib/etcd); run reset-node first"
else
    KUBEADM_STATE=clean
    if [ -n "$(ss -Htln 'sport = :10250')" ]; then problem "port 10250 (kubelet) is in use"; fi
    for port in 6443 2379 2380 10257 10259; do
        if [ -n "$(ss -Htln "sport = :$port")" ]; then
            warn "port $port is in use: this node cannot be a control-plane node"
        fi
    done
fi

SWAP=$(swapon --noheadings --show=NAME 2>/dev/null | wc -l)
[ "$SWAP" -eq 0 ] || log "swap is on ($SWAP device(s)); prepare-network turns it off"

if command -v timedatectl >/dev/null 2>&1 && [ "$(timedatectl show -p NTPSynchronized --value 2>/dev/null)" != yes ]; then
    warn "clock not NTP-synchronised; certificates and etcd depend on time"
fi

if [ "$errors" -gt 0 ]; then
    log "$errors problem(s), the first: $first"
    exit 1
fi

mkdir -p "$OPSGRAPH_OUT"
tmp="$OPSGRAPH_OUT/.node_inventory.$$"
trap 'rm -f "$tmp"' EXIT
{
    printf 'TARGET_ID=%s\n' "${OPSGRAPH_TARGET_ID:-}"
    printf 'NODE_NAME=%s\n' "$NODE_NAME"
    printf 'OS_ID=%s\n' "${ID:-}"
    printf 'OS_VERSION_ID=%s\n' "${VERSION_ID:-}"
    printf 'OS_CODENAME=%s\n' "${VERSION_CODENAME:-}"
    printf 'ARCH=%s\n' "$ARCH"
    printf 'KERNEL=%s\n' "$(uname -r)"
    printf 'CPUS=%s\n' "$CPUS"
    printf 'MEM_MB=%s\n' "$MEM_MB"
    printf 'CGROUP=%s\n' "$CGROUP"
    printf 'PRIMARY_IP=%s\n' "$PRIMARY_IP"
    printf 'PRODUCT_UUID=%s\n' "$PRODUCT_UUID"
    printf 'MACHINE_ID=%s\n' "$MACHINE_ID"
    printf 'KUBEADM_STATE=%s\n' "$KUBEADM_STATE"
} >"$tmp"
mv -f "$tmp" "$OPSGRAPH_OUT/node_inventory"
log "ok: $NODE_NAME $PRIMARY_IP, ${ID:-?} ${VERSION_ID:-?} $ARCH, $CPUS CPU, ${MEM_MB} MiB, cgroup $CGROUP"
