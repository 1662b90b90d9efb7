#!/bin/sh
# opsgraph pack lab-cluster - job configure-containerd-registry-mirror (registry-unreachable remedy).
#
# Runs on each node of target_nodes. Writes the pull-through mirror for docker.io to
# <node>/registry-mirror and adds it to <node>/etc/containerd.conf (REGISTRY_MIRROR=...);
# containerd loads it when restarted (restart-containerd). While <node>/registry-mirror exists,
# init-control-plane on that node pulls through the mirror, so its registry failure (fail_mode
# exit) no longer happens.
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: registry_mirror, fail_job, fail_mode
# Provides:   lab.container.runtime.registry_mirror
# Produces:   registry_mirror_config
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node

MIRROR=${OPSGRAPH_PARAM_REGISTRY_MIRROR:-https://mirror.gcr.io}
matches 'https?://[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?(:[0-9]{1,5})?(/[-A-Za-z0-9._~/]*)?' "$MIRROR" ||
    fail "registry_mirror '$MIRROR' is not an http(s) URL"
CONF=$NODE_DIR/etc/containerd.conf
[ -f "$CONF" ] || fail "$CONF is missing: install-runtime has not run on $NODE"

lab_failpoint "open /etc/containerd/certs.d/docker.io/hosts.toml: read-only file system"

if lab_proven; then
    printf '%s\n' "$MIRROR" | write_file "$NODE_DIR/registry-mirror"
    {
        grep -v '^REGISTRY_MIRROR=' "$CONF" || true
        printf 'REGISTRY_MIRROR=%s\n' "$MIRROR"
    } | write_file "$CONF"
fi
{
    printf 'server = "https://registry-1.docker.io"\n\n'
    printf '[host."%s"]\n  capabilities = ["pull", "resolve"]\n' "$MIRROR"
} | lab_artifact registry_mirror_config
log "ok: docker.io mirror $MIRROR"
