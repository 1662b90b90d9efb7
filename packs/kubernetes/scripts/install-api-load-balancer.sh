#!/bin/sh
# opsgraph pack kubernetes - job install-api-load-balancer (action create_ha_cluster): the HA
# control plane's endpoint, as kubeadm's HA guide describes it ("keepalived and haproxy as
# services on the operating system").
#
# Runs on every control-plane node (scope control_planes), as root over SSH, before kubeadm:
#   - haproxy from the distribution listens on the endpoint's port (8443 by default, never 6443,
#     where the node's own API server listens) and balances TCP over every control-plane node's
#     API server (port 6443), each checked with GET /healthz;
#   - keepalived from the distribution holds the endpoint's address (the VIP) on one node by
#     VRRP (virtual_router_id); the first node listed in control_plane_addresses has the highest
#     priority; a node whose haproxy is down loses 20, so the VIP moves to a node that serves.
# Before kubeadm init no API server answers: haproxy runs with its backends down, the VIP is
# held anyway (the check lowers priority, it does not fault), and kubeadm init through the
# endpoint reaches the first node's API server as soon as it starts.
# Idempotent: the configurations are rewritten only when they differ; a service is restarted
# only when its configuration changed (or it is not running). Each is checked before it is
# used (haproxy -c, keepalived --config-test).
#
# Conventions (packs/README.md): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: control_plane_endpoint (VIP[:port]), control_plane_addresses
#             (name=ip,name=ip,...), vrrp_router_id
# Provides:   kubernetes.api.load_balancer
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/node-lib.sh
. "$OPSGRAPH_LIB/node-lib.sh"
on_node

needs_root
ENDPOINT=${OPSGRAPH_PARAM_CONTROL_PLANE_ENDPOINT:-}
ADDRESSES=${OPSGRAPH_PARAM_CONTROL_PLANE_ADDRESSES:-}
ROUTER_ID=${OPSGRAPH_PARAM_VRRP_ROUTER_ID:-51}
SELF=${OPSGRAPH_TARGET_NAME:?OPSGRAPH_TARGET_NAME must name this node}
IPV4='(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])){3}'

[ -n "$ENDPOINT" ] || fail "control_plane_endpoint is required for an HA control plane: the VIP (and port) the nodes and clients use"
case $ENDPOINT in
    *:*) VIP=${ENDPOINT%:*} PORT=${ENDPOINT##*:} ;;
    *) VIP=$ENDPOINT PORT=8443 ;;
esac
matches "$IPV4" "$VIP" || fail "control_plane_endpoint's host '$VIP' is not an IPv4 address (keepalived holds it as the VIP)"
matches '[0-9]{1,5}' "$PORT" && [ "$PORT" -ge 1 ] && [ "$PORT" -le 65535 ] || fail "control_plane_endpoint's port '$PORT' is not a port"
[ "$PORT" -ne 6443 ] || fail "control_plane_endpoint's port is 6443, where each node's own API server listens: use another (8443)"
matches '[0-9]{1,3}' "$ROUTER_ID" && [ "$ROUTER_ID" -ge 1 ] && [ "$ROUTER_ID" -le 255 ] || fail "vrrp_router_id '$ROUTER_ID' is not 1-255"
matches "[a-z0-9][-a-z0-9.]*=$IPV4(,[a-z0-9][-a-z0-9.]*=$IPV4)*" "$ADDRESSES" ||
    fail "control_plane_addresses '$ADDRESSES' is not name=IPv4 for each control-plane node, comma-separated"

# This node's address, its place in the list (priority) and the interface that carries it.
SELF_IP=''
RANK=0
i=0
BACKENDS=
IFS_SAVE=$IFS
IFS=,
for entry in $ADDRESSES; do
    i=$((i + 1))
    name=${entry%%=*} ip=${entry#*=}
    [ "$ip" != "$VIP" ] || fail "the VIP $VIP is also $name's address"
    BACKENDS="$BACKENDS    server $name $ip:6443 check check-ssl verify none inter 3s fall 3 rise 2$NL"
    if [ "$name" = "$SELF" ]; then SELF_IP=$ip RANK=$i; fi
done
IFS=$IFS_SAVE
[ -n "$SELF_IP" ] || fail "this node ($SELF) is not in control_plane_addresses ($ADDRESSES)"
PRIORITY=$((150 - 10 * RANK))
addrs=$(ip -o -4 addr show) || fail "cannot list this node's addresses"
IFACE=$(printf '%s\n' "$addrs" | awk -v a="$SELF_IP" '{ split($4, p, "/"); if (p[1] == a) { print $2; exit } }')
[ -n "$IFACE" ] || fail "no interface of this node has $SELF_IP (control_plane_addresses gives it for $SELF)"

export DEBIAN_FRONTEND=noninteractive
missing=
for pkg in haproxy keepalived; do
    [ -n "$(installed_version "$pkg")" ] || missing="$missing $pkg"
done
if [ -n "$missing" ]; then
    apt_get update
    # shellcheck disable=SC2086 # one word per package
    apt_install $missing
    log "installed$missing"
fi

config=$(mktemp)
trap 'rm -f "$config"' EXIT
cat >"$config" <<CFG
# managed by opsgraph (pack kubernetes, job install-api-load-balancer)
global
    maxconn 4000
defaults
    mode tcp
    timeout connect 5s
    timeout client 1h
    timeout server 1h
frontend kube-apiserver
    bind *:$PORT
    default_backend kube-apiserver
backend kube-apiserver
    option httpchk GET /healthz
    http-check expect status 200
    balance roundrobin
$BACKENDS
CFG
haproxy -c -q -f "$config" || fail "haproxy rejects the configuration it was given"
write_file /etc/haproxy/haproxy.cfg 0644 <"$config"
haproxy_changed=$WROTE

cat >"$config" <<CFG
# managed by opsgraph (pack kubernetes, job install-api-load-balancer)
global_defs {
    router_id opsgraph-$SELF
    enable_script_security
    script_user root
}
vrrp_script haproxy_serves {
    script "/usr/bin/systemctl is-active --quiet haproxy"
    interval 2
    weight -20
    fall 2
    rise 2
}
vrrp_instance kube_api {
    state BACKUP
    interface $IFACE
    virtual_router_id $ROUTER_ID
    priority $PRIORITY
    advert_int 1
    virtual_ipaddress {
        $VIP/32 dev $IFACE
    }
    track_script {
        haproxy_serves
    }
}
CFG
keepalived --config-test -f "$config" || fail "keepalived rejects the configuration it was given"
install -d -m 0755 /etc/keepalived
write_file /etc/keepalived/keepalived.conf 0644 <"$config"
keepalived_changed=$WROTE

for unit in haproxy keepalived; do
    systemctl enable --quiet "$unit"
    changed=$haproxy_changed
    [ "$unit" = haproxy ] || changed=$keepalived_changed
    if [ "$changed" = yes ] || ! systemctl is-active --quiet "$unit"; then
        systemctl restart "$unit"
        log "restarted $unit"
    fi
done
log "ok: haproxy on :$PORT over $i API servers; keepalived for $VIP on $IFACE (router $ROUTER_ID, priority $PRIORITY)"
