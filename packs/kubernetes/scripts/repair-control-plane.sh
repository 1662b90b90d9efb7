#!/bin/sh
# opsgraph pack kubernetes - job repair-control-plane (action repair; low risk).
#
# Runs on the cluster's first control-plane node (scope control_plane), as root over SSH.
# Planned by the operations policy's `repair` when a verification finds the cluster degraded
# (docs/day2.md): containerd and the kubelet are enabled and started where they stopped (the
# kubelet brings the control plane's static pods back), then the job waits until the API server
# is ready. Running services are left alone; no configuration, certificate or manifest changes.
#
# Conventions (packs/README.md): run with `sh -eu`; POSIX sh; idempotent.
# Provides:   kubernetes.control_plane.running
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/node-lib.sh
. "$OPSGRAPH_LIB/node-lib.sh"
on_node

needs_root
ADMIN=/etc/kubernetes/admin.conf
[ -r "$ADMIN" ] || fail "$ADMIN not found: this is not an initialised control-plane node (create the cluster)"
for unit in containerd kubelet; do
    systemctl enable --quiet "$unit"
    if systemctl is-active --quiet "$unit"; then
        log "$unit already runs"
    else
        systemctl start "$unit"
        log "started $unit"
    fi
done
wait_api_ready "the API server is not ready 5 minutes after containerd and the kubelet run (see crictl ps -a, journalctl -u kubelet)"
log "ok: the API server is ready"
