#!/bin/sh
# opsgraph pack tempo - job unlock-helm-release: a fix job the helm-release-locked remedy inserts
# before the job helm refused ("another operation (install/upgrade/rollback) is in progress").
#
# Runs once on the control host (executor local) against the bound Kubernetes cluster: a release
# left pending-install/-upgrade/-rollback by an interrupted helm run is rolled back to its last
# deployed revision, waiting for it. A release with no deployed revision (a first install that
# never finished) is not touched: uninstalling it is for a person, and the job fails saying so.
#
# Conventions (packs/README.md): run with `sh -eu`; POSIX sh; idempotent.
# Parameters: release_name, namespace
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/helm-lib.sh
. "$OPSGRAPH_LIB/helm-lib.sh"

needs_cluster
unlock_release
