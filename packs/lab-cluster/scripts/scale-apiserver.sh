#!/bin/sh
# opsgraph pack lab-cluster - job scale-apiserver: the control plane's API server replicas.
#
# Runs on the control-plane node of an existing cluster. Replica 1 is the apiserver itself
# (init-control-plane started it; it is left alone); replicas 2..N are lab daemons named
# apiserver-2, apiserver-3, ... that beat while the node's containerd runs. Starts the missing
# ones up to apiserver_replicas and stops those above it. Idempotent.
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: apiserver_replicas, fail_job, fail_mode
# Provides:   lab.kubernetes.control_plane.scaled
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node

REPLICAS=${OPSGRAPH_PARAM_APISERVER_REPLICAS:-}
matches '[1-9][0-9]?' "$REPLICAS" || fail "apiserver_replicas '$REPLICAS' is not a count from 1 to 99"
[ -f "$NODE_DIR/kubernetes/admin.conf" ] ||
    fail "$NODE is not a control plane ($NODE_DIR/kubernetes/admin.conf is missing)"
lab_alive apiserver "$NODE_DIR" || fail "the apiserver of $NODE is not running: repair the control plane first"

lab_failpoint "error: the API server of $NODE could not be scaled to $REPLICAS replicas"

if lab_proven; then
    i=2
    while [ "$i" -le "$REPLICAS" ]; do
        lab_start "apiserver-$i" "$NODE_DIR" sh "$NODE_DIR/bin/lab-daemon" "apiserver-$i" "$NODE_DIR" containerd
        i=$((i + 1))
    done
    for pidfile in "$NODE_DIR"/run/apiserver-*.pid; do
        [ -f "$pidfile" ] || continue
        name=${pidfile##*/}
        name=${name%.pid}
        n=${name#apiserver-}
        if ! matches '[0-9]+' "$n" || [ "$n" -gt "$REPLICAS" ]; then
            lab_stop "$name" "$NODE_DIR"
        fi
    done
fi
log "ok: $REPLICAS API server replica(s) on $NODE"
