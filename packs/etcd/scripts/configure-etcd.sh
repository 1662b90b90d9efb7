#!/bin/sh
# configure-etcd-member (executor: ssh, as root, one instance per member): /etc/default/etcd.
# Parameters: cluster_name, member_addresses. Target: OPSGRAPH_TARGET_NAME (the member's name).
# Provides: etcd.configured. Leaves /var/lib/opsgraph/etcd.restart when the file changed, for
# start-etcd-member.
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/etcd-lib.sh
. "$OPSGRAPH_LIB/etcd-lib.sh"

this_member members
write_etcd_config "$member" new
