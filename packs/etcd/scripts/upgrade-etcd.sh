#!/bin/sh
# upgrade-etcd-member (executor: ssh, as root, one instance per member; action upgrade): etcd to
# apt's candidate, rolling - one member at a time, the cluster healthy before each:
#   1. apt-get update (every member at once: it changes nothing that runs);
#   2. under the etcd lock opsgraph-upgrade/<cluster_name> (etcdctl lock, over TLS through every
#      member's endpoint, so it holds while this member restarts), which the members take in
#      turn: every endpoint of member_addresses must be healthy, else this member is left as it
#      is and the job fails; apt-get install --only-upgrade etcd-server etcd-client; the
#      installed package must be apt's candidate; etcd.service is restarted when the running
#      server is older than the installed binary; then this member and every endpoint must be
#      healthy again (up to 2 minutes) before the lock is let go.
# Debian 12 has one etcd (3.4): there, apt's candidate is what runs and nothing restarts.
# Parameters: cluster_name, member_addresses. Provides: etcd.upgraded, etcd.members.changed.
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/etcd-lib.sh
. "$OPSGRAPH_LIB/etcd-lib.sh"

[ "$(id -u)" -eq 0 ] || fail "must run as root"
cluster_name
check_member_addresses
grep -qx "ETCD_INITIAL_CLUSTER_TOKEN=$CLUSTER" /etc/default/etcd 2>/dev/null ||
  fail "this host is not a configured member of cluster $CLUSTER (/etc/default/etcd)"
export DEBIAN_FRONTEND=noninteractive
apt-get -q -o DPkg::Lock::Timeout=600 update >/dev/null

body=$(mktemp)
trap 'rm -f "$body"' EXIT
# etcdctl lock runs the body (it starts with set -eu) while this member holds the lock; sh gets
# no flags of its own, which etcdctl would read as its own.
cat >"$body" <<'BODY'
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/etcd-lib.sh
. "$OPSGRAPH_LIB/etcd-lib.sh"
ME=upgrade-etcd
all=$(client_endpoints "")
health=$(etcdctl_tls --endpoints="$all" endpoint health 2>&1) ||
  fail "the cluster is not healthy; this member is not upgraded: $(unhealthy "$health")"
apt-get -q -o DPkg::Lock::Timeout=600 install -y --only-upgrade --no-install-recommends \
  -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold etcd-server etcd-client >/dev/null
installed=$(dpkg-query -W -f '${Version}' etcd-server)
candidate=$(LC_ALL=C apt-cache policy etcd-server | sed -n 's/^ *Candidate: *//p')
[ "$installed" = "$candidate" ] || fail "etcd-server is $installed after the upgrade, but apt's candidate is $candidate"
binary=$(etcd --version | sed -n 's/^etcd Version: //p')
status=$(etcdctl_tls --endpoints=https://127.0.0.1:2379 endpoint status -w json) || status=
running=$(printf '%s\n' "$status" | sed -n 's/.*"version":"\([^"]*\)".*/\1/p')
running=${running:-(not running)}
if [ "$running" != "$binary" ]; then
  systemctl restart etcd
  log "restarted etcd: it ran $running, the binary is $binary"
fi
i=0
until etcdctl_tls --endpoints="$all" endpoint health >/dev/null 2>&1; do
  i=$((i + 1))
  [ "$i" -le 60 ] || fail "the cluster is not healthy 2 minutes after upgrading this member"
  sleep 2
done
log "ok: etcd-server $installed (apt's candidate); the member runs $binary; every endpoint healthy"
BODY
etcdctl_tls --endpoints="$(client_endpoints "")" lock "opsgraph-upgrade/$CLUSTER" sh "$body"
