#!/bin/sh
# opsgraph pack kubernetes - job prepare-network: kernel networking and swap for kubelet.
#
# Runs on every node of scope target_nodes, as root over SSH. Idempotent: files are only
# rewritten when their content differs; swap entries are commented out once, with a backup.
#
# Inside a container host (systemd-detect-virt --container; a fleet host in its own namespaces)
# the kernel is the machine's: a module it already has (loaded or built in) is used as it is,
# and a sysctl that already has the needed value is left alone. Anything else that cannot be
# done from inside - a module the kernel lacks, a sysctl that cannot be written, swap that cannot
# be turned off - fails with a message that says to do it on the machine. Nothing kubelet needs
# is skipped.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
#
# Requires: node_inventory (this node's), credentials_report
# Provides: kubernetes.node.network_ready - swap off, overlay + br_netfilter loaded,
#           net.bridge.bridge-nf-call-ip{,6}tables=1, net.ipv4.ip_forward=1
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/node-lib.sh
. "$OPSGRAPH_LIB/node-lib.sh"
on_node

INVENTORY=${OPSGRAPH_ARTIFACT_NODE_INVENTORY:?the node_inventory artifact is required}
REPORT=${OPSGRAPH_ARTIFACT_CREDENTIALS_REPORT:?the credentials_report artifact is required}
needs_root

# The inventory must be this node's (the planner pairs instances per node).
inv_node=$(sed -n 's/^NODE_NAME=//p' "$INVENTORY" | head -n 1)
this_node=$(hostname | tr '[:upper:]' '[:lower:]')
[ "$inv_node" = "$this_node" ] || fail "node_inventory describes '$inv_node', this is '$this_node'"
grep -qx 'STATUS=ok' "$REPORT" || fail "credentials_report is not ok"

CONTAINER=$(systemd-detect-virt --container 2>/dev/null || true)
[ "$CONTAINER" != none ] || CONTAINER=
on_machine() {
    [ -n "$CONTAINER" ] && printf ' (this node is a %s container: the kernel is the machine'"'"'s, so %s on the machine that runs it)' "$CONTAINER" "$1"
    return 0
}

# 1. Swap off, now and after reboot.
if [ -n "$(swapon --noheadings --show=NAME 2>/dev/null)" ]; then
    swapoff -a || fail "swap is on and cannot be turned off$(on_machine 'run swapoff -a')"
    log "swap turned off"
fi
if awk '$1 !~ /^#/ && $3 == "swap" { found = 1 } END { exit !found }' /etc/fstab; then
    cp -p /etc/fstab "/etc/fstab.opsgraph.$(date +%Y%m%d%H%M%S)"
    sed -i -E 's|^([^#[:space:]][^[:space:]]*[[:space:]]+[^[:space:]]+[[:space:]]+swap[[:space:]].*)$|# disabled by opsgraph (kubelet needs swap off): \1|' /etc/fstab
    log "swap entries in /etc/fstab commented out (backup kept beside it)"
fi
# Swap units that do not come from fstab (zram, GPT auto-discovery).
systemctl list-units --type=swap --all --plain --no-legend 2>/dev/null | awk '{ print $1 }' |
    while read -r unit; do
        [ -n "$unit" ] || continue
        if [ "$(systemctl is-enabled "$unit" 2>/dev/null || true)" != masked ]; then
            systemctl mask --now "$unit"
            log "masked $unit"
        fi
    done

# 2. Kernel modules for the container runtime and bridged pod traffic.
write_file /etc/modules-load.d/kubernetes.conf 0644 <<'CONF'
# managed by opsgraph (pack kubernetes, job prepare-network)
overlay
br_netfilter
CONF
# What each module gives, however the kernel has it (loaded, built in): nothing to load then.
module_ready() {
    case $1 in
        overlay) grep -qw overlay /proc/filesystems ;;
        br_netfilter) [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ] ;;
        *) return 1 ;;
    esac
}
for module in overlay br_netfilter; do
    module_ready "$module" && continue
    modprobe "$module" || fail "kernel module $module is not loaded and cannot be loaded$(on_machine "run modprobe $module")"
done

# 3. Sysctls.
write_file /etc/sysctl.d/99-kubernetes.conf 0644 <<'CONF'
# managed by opsgraph (pack kubernetes, job prepare-network)
net.bridge.bridge-nf-call-iptables = 1
net.bridge.bridge-nf-call-ip6tables = 1
net.ipv4.ip_forward = 1
CONF
for setting in net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1 net.ipv4.ip_forward=1; do
    key=${setting%=*}
    want=${setting#*=}
    [ "$(sysctl -n "$key" 2>/dev/null || true)" != "$want" ] || continue
    sysctl -q -w "$setting" || fail "cannot set $key to $want$(on_machine "set it")"
done

# 4. Firewalls are the site's business; say what kubeadm will need if one is on.
if command -v ufw >/dev/null 2>&1 && ufw status 2>/dev/null | grep -q '^Status: active'; then
    log "warning: ufw is active; allow 6443, 2379-2380, 10250, 10257, 10259 (control plane), 10250 and 30000-32767 (workers), and the CNI's ports"
fi

for key in net.bridge.bridge-nf-call-iptables net.ipv4.ip_forward; do
    [ "$(sysctl -n "$key")" = 1 ] || fail "$key is not 1 after applying /etc/sysctl.d/99-kubernetes.conf"
done
log "ok"
