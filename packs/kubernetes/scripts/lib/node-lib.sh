# opsgraph pack kubernetes - node-lib.sh: helpers every script of the pack sources (never run on
# its own). The pack lists it under `libraries:` in pack.yaml, so a job finds it beside its
# script, in the directory OPSGRAPH_LIB names, on the control host and on a node over SSH alike
# (docs/pack-authoring.md).
#
# Use, right after `set -eu`:
#     # shellcheck source-path=SCRIPTDIR source=lib/node-lib.sh
#     . "$OPSGRAPH_LIB/node-lib.sh"
#     on_node      # for a script that works on a node: its log lines name the node

# ME: the job's name in log lines (the script's file name without `.sh`); WHO: ME, and the node.
ME=${0##*/}
ME=${ME%.sh}
WHO=$ME
errors=0

log() { printf '%s: %s\n' "$WHO" "$*" >&2; }
fail() { log "ERROR: $*"; exit 1; }
# problem MESSAGE: reports one more problem; the script ends later when there were any.
problem() { log "ERROR: $*"; errors=$((errors + 1)); }

# on_node: log lines name the target node (its id, else this host's name).
on_node() { WHO="${ME}[${OPSGRAPH_TARGET_ID:-$(hostname)}]"; }

# needs_root: the script must run as root.
needs_root() { [ "$(id -u)" -eq 0 ] || fail "must run as root"; }

# needs_out: OPSGRAPH_OUT names the directory for produced artifacts.
needs_out() { : "${OPSGRAPH_OUT:?OPSGRAPH_OUT must name the directory for produced artifacts}"; }

NL='
'
# matches REGEX VALUE: VALUE is a single line that matches the extended REGEX as a whole.
matches() {
    case $2 in *"$NL"*) return 1 ;; esac
    printf '%s\n' "$2" | grep -Eqx -- "$1"
}

# write_file PATH MODE < content: replaces PATH atomically when the content differs and
# sets WROTE=yes; leaves it alone (WROTE=no) when it is already up to date.
# shellcheck disable=SC2034 # WROTE is for callers that care
write_file() {
    WROTE=no
    _tmp=$(mktemp "$1.opsgraph.XXXXXX")
    cat >"$_tmp"
    if [ -f "$1" ] && cmp -s "$_tmp" "$1"; then
        rm -f "$_tmp"
        return 0
    fi
    chmod "$2" "$_tmp"
    mv -f "$_tmp" "$1"
    WROTE=yes
    log "wrote $1"
}

# apt_get ARGS: apt-get, one at a time on this node: two jobs of a plan may run here at once
# (install-runtime and install-api-load-balancer), and `apt-get update` does not wait for the
# lists lock as dpkg's lock timeout makes installs wait. flock (util-linux) serialises opsgraph's
# own apt runs; DPkg::Lock::Timeout still waits for anyone else's.
apt_get() { flock -w 900 /run/lock/opsgraph-apt.lock apt-get -q -o DPkg::Lock::Timeout=600 "$@"; }
# apt_mark ARGS: apt-mark under the same lock (hold and unhold write dpkg's selections).
apt_mark() { flock -w 900 /run/lock/opsgraph-apt.lock apt-mark "$@"; }
apt_install() {
    apt_get install -y --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@"
}
# installed_version PACKAGE: its version when installed, else nothing.
installed_version() {
    dpkg-query -W -f='${Status} ${Version}\n' "$1" 2>/dev/null | awk '$3 == "installed" { print $4 }'
}

# k8s_version: reads kubernetes_version (1.30 or 1.30.4; a leading v is dropped) into
# K8S_VERSION, MINOR (1.30) and PATCH (4; empty when only a minor was given).
k8s_version() {
    K8S_VERSION=${OPSGRAPH_PARAM_KUBERNETES_VERSION:-1.30}
    K8S_VERSION=${K8S_VERSION#v}
    matches '1\.[0-9]{2}(\.[0-9]{1,3})?' "$K8S_VERSION" || fail "kubernetes_version '$K8S_VERSION' is not 1.<minor>[.<patch>]"
    MINOR=$(printf '%s\n' "$K8S_VERSION" | cut -d. -f1-2)
    PATCH=$(printf '%s\n' "$K8S_VERSION" | cut -s -d. -f3)
}

# k8s_repo: apt reads the pkgs.k8s.io repository of MINOR (its signing key installed); sets
# KEYRING and REPO_URL. Fails, saying so, where the repository is unreachable.
k8s_repo() {
    KEYRING=/etc/apt/keyrings/kubernetes-apt-keyring.gpg
    REPO_URL="https://pkgs.k8s.io/core:/stable:/v${MINOR}/deb/"
    install -d -m 0755 /etc/apt/keyrings
    if [ ! -s "$KEYRING" ] || ! grep -qsF "$REPO_URL" /etc/apt/sources.list.d/kubernetes.list; then
        _key=$(mktemp)
        curl -fsSL --retry 3 -o "$_key" "${REPO_URL}Release.key" \
            || fail "the package repository $REPO_URL is unreachable (curl exit $?): kubelet, kubeadm and kubectl cannot be installed"
        gpg --batch --yes --dearmor -o "$KEYRING.tmp" "$_key"
        rm -f "$_key"
        chmod 0644 "$KEYRING.tmp"
        mv -f "$KEYRING.tmp" "$KEYRING"
        log "installed the pkgs.k8s.io signing key for v$MINOR"
    fi
    write_file /etc/apt/sources.list.d/kubernetes.list 0644 <<LIST
# managed by opsgraph (pack kubernetes)
deb [signed-by=$KEYRING] $REPO_URL /
LIST
    apt_get update
}

# k8s_package_version PACKAGE: the package version apt offers for K8S_VERSION (the exact patch
# when PATCH is set, else the newest of MINOR); nothing when there is none.
k8s_package_version() {
    _madison=$(apt-cache madison "$1") || return 1
    if [ -n "$PATCH" ]; then
        printf '%s\n' "$_madison" | awk -v v="$MINOR.$PATCH" '$3 ~ ("^" v "-") { print $3; exit }'
    else
        printf '%s\n' "$_madison" | awk '{ print $3; exit }'
    fi
}

# node_name: this node's name in the cluster (its host name, lowercased, as kubeadm registers it).
node_name() { hostname | tr '[:upper:]' '[:lower:]'; }

# reset_kubeadm_state: undoes kubeadm init/join on this node (DESTRUCTIVE): kubeadm reset, the
# CNI configuration and the kubelet's state. Packages, containerd and its images stay; so do
# iptables/IPVS rules (kubeadm reset prints how to clean those; flushing them blindly could drop
# the host's own firewall). A node without kubeadm state is left as it is.
reset_kubeadm_state() {
    if [ -e /etc/kubernetes/admin.conf ] || [ -e /etc/kubernetes/kubelet.conf ] ||
        [ -n "$(ls -A /etc/kubernetes/manifests 2>/dev/null)" ] || [ -d /var/lib/etcd/member ]; then
        if [ -f /root/.kube/config ] && [ -f /etc/kubernetes/admin.conf ] &&
            cmp -s /root/.kube/config /etc/kubernetes/admin.conf; then
            rm -f /root/.kube/config
        fi
        kubeadm reset --force --cri-socket unix:///run/containerd/containerd.sock
        log "kubeadm reset done"
    else
        log "no kubeadm state on this node"
    fi
    # kubeadm reset leaves the CNI configuration and some kubelet state behind.
    rm -rf /etc/cni/net.d/* /var/lib/kubelet/pki /etc/kubernetes/opsgraph
    for _link in cni0 flannel.1 vxlan.calico; do
        if ip link show "$_link" >/dev/null 2>&1; then ip link delete "$_link"; fi
    done
    systemctl restart containerd
}

# needs_admin_kubeconfig: KUBECONFIG names the cluster's admin kubeconfig, which the job gets as
# the kubernetes.cluster binding's credentials (copied to the node for the job).
needs_admin_kubeconfig() {
    if [ -z "${KUBECONFIG:-}" ] || [ ! -r "$KUBECONFIG" ]; then
        fail "no admin kubeconfig: the kubernetes.cluster binding gave no credentials${OPSGRAPH_BINDING_KUBERNETES_CLUSTER_CREDENTIALS_ERROR:+ ($OPSGRAPH_BINDING_KUBERNETES_CLUSTER_CREDENTIALS_ERROR)}"
    fi
    export KUBECONFIG
}

# wait_api_ready WHY: waits up to 5 minutes for this node's API server (/readyz, with the node's
# /etc/kubernetes/admin.conf); fails with WHY when it is not ready by then.
wait_api_ready() {
    _i=0
    until kubectl --kubeconfig /etc/kubernetes/admin.conf get --raw=/readyz >/dev/null 2>&1; do
        _i=$((_i + 1))
        [ "$_i" -lt 60 ] || fail "$1"
        sleep 5
    done
}

# upgrade_params: kubernetes_version must name an exact target (K8S_VERSION, MINOR, PATCH), and
# drain_timeout a duration (DRAIN_TIMEOUT): the parameters of every upgrade job.
upgrade_params() {
    k8s_version
    [ -n "$PATCH" ] || fail "kubernetes_version '$K8S_VERSION' names no patch: an upgrade names its exact target (1.31.2)"
    DRAIN_TIMEOUT=${OPSGRAPH_PARAM_DRAIN_TIMEOUT:-5m}
    matches '[0-9]+[smh]' "$DRAIN_TIMEOUT" || fail "drain_timeout '$DRAIN_TIMEOUT' is not a duration such as 5m"
}

# upgrade_kubeadm: kubeadm at the target version (pkgver, the package version of K8S_VERSION in
# the Kubernetes apt repository), installed when another one is and held: the first step of
# every upgrade job, on the control plane and on workers alike.
upgrade_kubeadm() {
    export DEBIAN_FRONTEND=noninteractive
    k8s_repo
    pkgver=$(k8s_package_version kubeadm) || fail "apt-cache cannot list kubeadm"
    [ -n "$pkgver" ] || fail "kubeadm $K8S_VERSION is not in $REPO_URL"
    if [ "$(installed_version kubeadm)" != "$pkgver" ]; then
        apt_install --allow-change-held-packages "kubeadm=$pkgver"
        log "installed kubeadm $pkgver"
    fi
    apt_mark hold kubeadm >/dev/null
}

# kubelet_outdated: kubelet or kubectl on this node is not at pkgver (upgrade_kubeadm).
kubelet_outdated() { [ "$(installed_version kubelet)" != "$pkgver" ] || [ "$(installed_version kubectl)" != "$pkgver" ]; }

# upgrade_kubelet KUBECTL: the node NODE drained with the command KUBECTL (`kubectl`, or one with
# the admin kubeconfig) within DRAIN_TIMEOUT, kubelet and kubectl installed at pkgver and held,
# and the kubelet restarted; the node stays cordoned (the job uncordons it when it is Ready).
upgrade_kubelet() {
    "$1" drain "$NODE" --ignore-daemonsets --delete-emptydir-data --timeout="$DRAIN_TIMEOUT"
    apt_install --allow-change-held-packages "kubelet=$pkgver" "kubectl=$pkgver"
    apt_mark hold kubelet kubectl >/dev/null
    systemctl daemon-reload
    systemctl restart kubelet
    log "kubelet and kubectl $pkgver"
}
