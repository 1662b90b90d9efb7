#!/bin/sh
# opsgraph pack lab-cluster - job restart-containerd (registry-unreachable remedy).
#
# Runs on each node of target_nodes. Stops the node's "containerd" and starts it again, so it
# loads <node>/etc/containerd.conf (it copies it to <node>/run/containerd.loaded), and waits for
# a fresh heartbeat. The node's kubelet keeps beating across the restart once containerd is back.
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: fail_job, fail_mode
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node

[ -x "$NODE_DIR/bin/lab-daemon" ] || fail "$NODE_DIR/bin/lab-daemon is missing: install-runtime has not run on $NODE"
[ -f "$NODE_DIR/etc/containerd.conf" ] || fail "$NODE_DIR/etc/containerd.conf is missing"

lab_failpoint "See \"systemctl status containerd.service\" and \"journalctl -xeu containerd.service\" for details." \
    "Job for containerd.service failed because the control process exited with error code."

lab_stop containerd "$NODE_DIR"
if lab_proven; then
    lab_start containerd "$NODE_DIR" sh "$NODE_DIR/bin/lab-daemon" containerd "$NODE_DIR"
    lab_wait_fresh containerd "$NODE_DIR" || fail "containerd does not beat after the restart"
fi
log "ok: containerd restarted"
