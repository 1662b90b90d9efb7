#!/bin/sh
# configure-etcd-member (executor: ssh, as root, one instance per member): /etc/default/etcd.
# Parameters: cluster_name, member_addresses. Target: OPSGRAPH_TARGET_NAME (the member's name).
# Provides: etcd.configured. Leaves /var/lib/opsgraph/etcd.restart when the file changed, for
# start-etcd-member.
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/etcd-lib.sh
. "$OPSGRAPH_LIB/etcd-lib.sh"

member=${OPSGRAPH_TARGET_NAME:?OPSGRAPH_TARGET_NAME is not set: the job is scoped to members}
cluster_name
check_member_addresses
write_etcd_config "$member" new
