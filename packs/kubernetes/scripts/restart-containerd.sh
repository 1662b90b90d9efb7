#!/bin/sh
# opsgraph pack kubernetes - job restart-containerd (remedy registry-unreachable).
#
# Runs on every node of scope target_nodes, as root over SSH. Restarts containerd so a
# changed config.toml takes effect, and waits until its CRI answers. Running containers
# survive a containerd restart (the shims keep them); kubelet reconnects by itself.
#
# Conventions (packs/README.md):
#   run with `sh -eu`; POSIX sh; idempotent (safe to run again)
#   parameters          OPSGRAPH_PARAM_<NAME>, NAME uppercased
#   required artifacts  path in OPSGRAPH_ARTIFACT_<ID>, ID uppercased, '.' and '-' -> '_'
#   produced artifacts  written to "$OPSGRAPH_OUT/<artifact-id>"
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/node-lib.sh
. "$OPSGRAPH_LIB/node-lib.sh"
on_node

needs_root

systemctl restart containerd
i=0
until crictl --runtime-endpoint unix:///run/containerd/containerd.sock info >/dev/null 2>&1; do
    i=$((i + 1))
    if [ "$i" -ge 30 ]; then
        log "ERROR: containerd's CRI does not answer after the restart"
        journalctl -u containerd -n 30 --no-pager >&2 || true
        exit 1
    fi
    sleep 2
done
log "ok: containerd restarted"
