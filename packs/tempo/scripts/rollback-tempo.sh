#!/bin/sh
# opsgraph pack tempo - job rollback-tempo: the rollback of upgrade-tempo (`opsgraph rollback`).
#
# Runs once on the control host (executor local) against the bound Kubernetes cluster:
# `helm rollback` of the release to the revision before the upgrade, waiting for it.
#
# Conventions (packs/README.md): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: release_name, namespace
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/helm-lib.sh
. "$OPSGRAPH_LIB/helm-lib.sh"

needs_cluster
rollback_release
