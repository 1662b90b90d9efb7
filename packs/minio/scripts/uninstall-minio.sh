#!/bin/sh
# opsgraph pack minio - job uninstall-minio (action uninstall; DESTRUCTIVE).
#
# Runs once on the control host (executor local) against the bound Kubernetes cluster, behind
# the gate confirm-uninstall-minio: `helm uninstall` of the release. Its volumes (the objects)
# and its Secrets (the root user, the KMS key without which the objects cannot be read, the
# client key) are kept unless purge is true.
#
# Conventions (packs/README.md): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: release_name, namespace, purge
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/helm-lib.sh
. "$OPSGRAPH_LIB/helm-lib.sh"

needs_cluster
RELEASE=${OPSGRAPH_PARAM_RELEASE_NAME:-${OPSGRAPH_INTENT_NAME:-}}
uninstall_release "app=minio,release=$RELEASE"
