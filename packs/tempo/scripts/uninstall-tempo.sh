#!/bin/sh
# opsgraph pack tempo - job uninstall-tempo (action uninstall; DESTRUCTIVE).
#
# Runs once on the control host (executor local) against the bound Kubernetes cluster, behind
# the gate confirm-uninstall-tempo: `helm uninstall` of the release. Its WAL volumes and the
# storage credentials Secret are kept unless purge is true; the traces in the bucket are never
# touched here (they belong to the bound object storage).
#
# Conventions (packs/README.md): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: release_name, namespace, purge
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/helm-lib.sh
. "$OPSGRAPH_LIB/helm-lib.sh"

needs_cluster
RELEASE=${OPSGRAPH_PARAM_RELEASE_NAME:-${OPSGRAPH_INTENT_NAME:-}}
uninstall_release "app.kubernetes.io/instance=$RELEASE"
