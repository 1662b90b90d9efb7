#!/bin/sh
# opsgraph pack kubernetes - job refresh-kubernetes-apt-key: a fix job the apt-key-missing remedy
# inserts before install-kubeadm when apt refuses pkgs.k8s.io (NO_PUBKEY, EXPKEYSIG: the project
# rotated its signing key, and install-kubeadm keeps an existing keyring).
#
# Runs on every node of scope target_nodes, as root over SSH. The stale keyring is kept beside
# it (kubernetes-apt-keyring.gpg.opsgraph-stale.<time>), the current key of the minor is fetched
# from pkgs.k8s.io over HTTPS (as install-kubeadm does) and apt's lists are updated; the evidence
# (kubernetes_apt_repository_verified) checks that apt now verifies the repository. Running it
# again fetches the key again.
#
# Conventions (packs/README.md): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: kubernetes_version (1.30 or 1.30.4)
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/node-lib.sh
. "$OPSGRAPH_LIB/node-lib.sh"
on_node
needs_root

k8s_version
KEYRING=/etc/apt/keyrings/kubernetes-apt-keyring.gpg
if [ -e "$KEYRING" ]; then
    mv -f "$KEYRING" "$KEYRING.opsgraph-stale.$(date +%Y%m%d%H%M%S)"
    log "kept the stale keyring beside it"
fi
k8s_repo
log "ok: the pkgs.k8s.io signing key for v$MINOR fetched again"
