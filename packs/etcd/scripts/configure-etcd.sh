#!/bin/sh
# configure-etcd-member (executor: ssh, as root, one instance per member): /etc/default/etcd.
# Parameters: cluster_name, member_addresses. Target: OPSGRAPH_TARGET_NAME (the member's name).
# Provides: etcd.configured. Leaves /var/lib/opsgraph/etcd.restart when the file changed, for
# start-etcd-member.
set -eu

# member_addresses is `name=IPv4,...` (names are inventory names). The same helpers are in
# issue-member-certificate.sh: an SSH job receives its own script and its artifacts, nothing else.
# Fails with a message unless OPSGRAPH_PARAM_MEMBER_ADDRESSES is well-formed.
check_member_addresses() {
  list=${OPSGRAPH_PARAM_MEMBER_ADDRESSES:-}
  [ -n "$list" ] || { echo "member_addresses is empty: give name=IPv4 for every member" >&2; return 2; }
  old_ifs=$IFS
  IFS=,
  for entry in $list; do
    case $entry in
      [a-z0-9]*=[0-9]*.[0-9]*.[0-9]*.[0-9]*) ;;
      *) IFS=$old_ifs; echo "member_addresses: '$entry' is not name=IPv4" >&2; return 2 ;;
    esac
    case ${entry%%=*} in *[!a-z0-9.-]*) IFS=$old_ifs; echo "member_addresses: bad name in '$entry'" >&2; return 2 ;; esac
    case ${entry#*=} in *[!0-9.]*) IFS=$old_ifs; echo "member_addresses: bad address in '$entry'" >&2; return 2 ;; esac
  done
  IFS=$old_ifs
}

# Prints the address of member $1, or fails with a message.
member_address() {
  old_ifs=$IFS
  IFS=,
  for entry in ${OPSGRAPH_PARAM_MEMBER_ADDRESSES:-}; do
    if [ "${entry%%=*}" = "$1" ]; then
      IFS=$old_ifs
      printf '%s\n' "${entry#*=}"
      return 0
    fi
  done
  IFS=$old_ifs
  echo "member $1 has no address in member_addresses" >&2
  return 1
}

# Prints etcd's initial cluster: name=https://address:2380,...
initial_cluster() {
  out=
  old_ifs=$IFS
  IFS=,
  for entry in ${OPSGRAPH_PARAM_MEMBER_ADDRESSES:-}; do
    out="${out:+$out,}${entry%%=*}=https://${entry#*=}:2380"
  done
  IFS=$old_ifs
  printf '%s\n' "$out"
}

member=${OPSGRAPH_TARGET_NAME:?OPSGRAPH_TARGET_NAME is not set: the job is scoped to members}
name=${OPSGRAPH_PARAM_CLUSTER_NAME:-etcd}
case $name in '' | *[!a-z0-9-]*) echo "cluster_name must match [a-z0-9-]+, got '$name'" >&2; exit 2 ;; esac
check_member_addresses
addr=$(member_address "$member")
cluster=$(initial_cluster)
[ -f /etc/etcd/pki/member.key ] || { echo "/etc/etcd/pki/member.key is missing: install-etcd-member did not run here" >&2; exit 1; }

data=/var/lib/etcd/$name
if [ -d "$data/member" ] && ! grep -qx "ETCD_INITIAL_CLUSTER_TOKEN=$name" /etc/default/etcd 2>/dev/null; then
  echo "$data holds a member of another cluster: refusing to reconfigure it (a person decides)" >&2
  exit 1
fi

tmp=/etc/default/etcd.opsgraph-tmp
cat >"$tmp" <<CONF
# Written by the opsgraph etcd pack (configure-etcd-member); read by etcd.service.
ETCD_NAME=$member
ETCD_DATA_DIR=$data
ETCD_LISTEN_PEER_URLS=https://$addr:2380
ETCD_LISTEN_CLIENT_URLS=https://$addr:2379,https://127.0.0.1:2379
ETCD_INITIAL_ADVERTISE_PEER_URLS=https://$addr:2380
ETCD_ADVERTISE_CLIENT_URLS=https://$addr:2379
ETCD_INITIAL_CLUSTER=$cluster
ETCD_INITIAL_CLUSTER_STATE=new
ETCD_INITIAL_CLUSTER_TOKEN=$name
ETCD_TRUSTED_CA_FILE=/etc/etcd/pki/ca.crt
ETCD_CERT_FILE=/etc/etcd/pki/member.crt
ETCD_KEY_FILE=/etc/etcd/pki/member.key
ETCD_CLIENT_CERT_AUTH=true
ETCD_PEER_TRUSTED_CA_FILE=/etc/etcd/pki/ca.crt
ETCD_PEER_CERT_FILE=/etc/etcd/pki/member.crt
ETCD_PEER_KEY_FILE=/etc/etcd/pki/member.key
ETCD_PEER_CLIENT_CERT_AUTH=true
CONF
chmod 644 "$tmp"
if cmp -s "$tmp" /etc/default/etcd; then
  rm -f "$tmp"
  echo "/etc/default/etcd is up to date"
else
  mv "$tmp" /etc/default/etcd
  mkdir -p /var/lib/opsgraph
  : >/var/lib/opsgraph/etcd.restart
  echo "wrote /etc/default/etcd: member $member at $addr of $cluster"
fi
