#!/bin/sh
# opsgraph pack kubernetes - jobs teardown-worker and teardown-control-plane (action uninstall;
# DESTRUCTIVE): the node leaves no cluster state behind.
#
# Runs on each worker, then on the control-plane node (its etcd data goes with it), as root over
# SSH, behind the gate confirm-uninstall. kubeadm reset, the CNI configuration and kubelet state
# removed (containerd stays); with purge true, kubelet, kubeadm and kubectl are removed too and
# the pkgs.k8s.io repository is dropped. Idempotent.
#
# Conventions (packs/README.md): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: purge
# Provides:   kubernetes.node.torn_down
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/node-lib.sh
. "$OPSGRAPH_LIB/node-lib.sh"
on_node

needs_root
PURGE=${OPSGRAPH_PARAM_PURGE:-false}
case $PURGE in true | false) ;; *) fail "purge must be true or false, not '$PURGE'" ;; esac

reset_kubeadm_state
if [ "$PURGE" = true ]; then
    export DEBIAN_FRONTEND=noninteractive
    installed=
    for pkg in kubelet kubeadm kubectl; do
        [ -z "$(installed_version "$pkg")" ] || installed="$installed $pkg"
    done
    if [ -n "$installed" ]; then
        # shellcheck disable=SC2086 # one word per package
        apt_mark unhold $installed >/dev/null
        # shellcheck disable=SC2086
        apt_get purge -y $installed
        log "purged$installed"
    fi
    rm -f /etc/apt/sources.list.d/kubernetes.list /etc/apt/keyrings/kubernetes-apt-keyring.gpg
fi
log "ok: no kubeadm state left on this node"
