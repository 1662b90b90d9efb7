# opsgraph pack etcd - etcd-lib.sh: helpers the pack's scripts source (never run on its own).
# The pack lists it under `libraries:` in pack.yaml, so a job finds it beside its script, in the
# directory OPSGRAPH_LIB names, on the control host and on a member over SSH alike
# (docs/pack-authoring.md). Use, right after `set -eu`:
#     # shellcheck source-path=SCRIPTDIR source=lib/etcd-lib.sh
#     . "$OPSGRAPH_LIB/etcd-lib.sh"

# ME: the job's name in log lines (the script's file name without `.sh`).
ME=${0##*/}
ME=${ME%.sh}
log() { printf '%s[%s]: %s\n' "$ME" "${OPSGRAPH_TARGET_NAME:-$(hostname)}" "$*" >&2; }
fail() { log "ERROR: $*"; exit 1; }

# member_addresses is `name=IPv4,...` (names are inventory names).
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

# Prints the members' names, one a line, sorted.
member_names() {
  old_ifs=$IFS
  IFS=,
  for entry in ${OPSGRAPH_PARAM_MEMBER_ADDRESSES:-}; do
    printf '%s\n' "${entry%%=*}"
  done | sort
  IFS=$old_ifs
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

# Prints the client URLs of the members other than $1 (all with no argument): https://address:2379,...
client_endpoints() {
  out=
  old_ifs=$IFS
  IFS=,
  for entry in ${OPSGRAPH_PARAM_MEMBER_ADDRESSES:-}; do
    [ "${entry%%=*}" = "${1:-}" ] || out="${out:+$out,}https://${entry#*=}:2379"
  done
  IFS=$old_ifs
  printf '%s\n' "$out"
}

# CLUSTER: the validated cluster_name; DATA: its data directory.
cluster_name() {
  CLUSTER=${OPSGRAPH_PARAM_CLUSTER_NAME:-etcd}
  case $CLUSTER in '' | *[!a-z0-9-]*) echo "cluster_name must match [a-z0-9-]+, got '$CLUSTER'" >&2; exit 2 ;; esac
  DATA=/var/lib/etcd/$CLUSTER
}

# this_member SCOPE: member, the member this instance runs for (OPSGRAPH_TARGET_NAME: the job is
# scoped to SCOPE), CLUSTER and DATA (cluster_name), and member_addresses checked.
this_member() {
  # shellcheck disable=SC2034 # member is the scripts'
  member=${OPSGRAPH_TARGET_NAME:?OPSGRAPH_TARGET_NAME is not set: the job is scoped to $1}
  cluster_name
  check_member_addresses
}

# wait_etcd WHAT COMMAND...: runs COMMAND (its output dropped) every 2 s until it succeeds; after
# 2 minutes the script fails: "etcd on <member> WHAT after 2 minutes" and etcd's last log lines.
wait_etcd() {
  _what=$1
  shift
  _i=0
  until "$@" >/dev/null 2>&1; do
    _i=$((_i + 1))
    if [ "$_i" -gt 60 ]; then
      log "etcd on ${OPSGRAPH_TARGET_NAME:-$(hostname)} $_what after 2 minutes; its last log lines:"
      journalctl -u etcd -n 20 --no-pager >&2 || true
      exit 1
    fi
    sleep 2
  done
}

# etcdctl over TLS with this member's certificate (client auth is on); endpoints as arguments.
etcdctl_tls() {
  etcdctl --cacert=/etc/etcd/pki/ca.crt --cert=/etc/etcd/pki/member.crt --key=/etc/etcd/pki/member.key \
    --command-timeout=10s "$@"
}

# live_members ENDPOINTS: "name started|unstarted id" lines of the cluster's member list, sorted
# (an unstarted member has no name yet: it is named by its peer URL's address from
# member_addresses when one matches, else `?`). Fails when the list cannot be read.
live_members() {
  raw=$(etcdctl_tls --endpoints="$1" member list) || return 1
  printf '%s\n' "$raw" | awk -F', ' -v list="${OPSGRAPH_PARAM_MEMBER_ADDRESSES:-}" '
    BEGIN { n = split(list, e, ","); for (i = 1; i <= n; i++) { split(e[i], kv, "="); by_addr[kv[2]] = kv[1] } }
    NF >= 4 {
      name = $3
      if (name == "") { addr = $4; sub(/^https:\/\//, "", addr); sub(/:[0-9]+$/, "", addr); name = (addr in by_addr) ? by_addr[addr] : "?" }
      print name, $2, $1
    }' | sort
}

# write_etcd_config MEMBER STATE: /etc/default/etcd (read by etcd.service) for MEMBER of the
# cluster CLUSTER (cluster_name first), its initial cluster from member_addresses and
# ETCD_INITIAL_CLUSTER_STATE=STATE (new: bootstrapping; existing: joining a running cluster).
# Refuses a data directory that holds a member of another cluster. Leaves
# /var/lib/opsgraph/etcd.restart when the file changed (start-etcd.sh restarts then).
write_etcd_config() {
  addr=$(member_address "$1")
  cluster=$(initial_cluster)
  [ -f /etc/etcd/pki/member.key ] || { echo "/etc/etcd/pki/member.key is missing: install-etcd-member did not run here" >&2; exit 1; }
  if [ -d "$DATA/member" ] && ! grep -qx "ETCD_INITIAL_CLUSTER_TOKEN=$CLUSTER" /etc/default/etcd 2>/dev/null; then
    echo "$DATA holds a member of another cluster: refusing to reconfigure it (a person decides)" >&2
    exit 1
  fi
  tmp=/etc/default/etcd.opsgraph-tmp
  cat >"$tmp" <<CONF
# Written by the opsgraph etcd pack ($ME); read by etcd.service.
ETCD_NAME=$1
ETCD_DATA_DIR=$DATA
ETCD_LISTEN_PEER_URLS=https://$addr:2380
ETCD_LISTEN_CLIENT_URLS=https://$addr:2379,https://127.0.0.1:2379
ETCD_INITIAL_ADVERTISE_PEER_URLS=https://$addr:2380
ETCD_ADVERTISE_CLIENT_URLS=https://$addr:2379
ETCD_INITIAL_CLUSTER=$cluster
ETCD_INITIAL_CLUSTER_STATE=$2
ETCD_INITIAL_CLUSTER_TOKEN=$CLUSTER
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
    echo "wrote /etc/default/etcd: member $1 at $addr of $cluster"
  fi
}

# minus A B: the lines of A (names, one a line) that are not lines of B.
minus() {
  printf '%s\n' "$1" | awk -v b="$(printf '%s\n' "$2" | tr '\n' ' ')" '
    BEGIN { n = split(b, x, " "); for (i = 1; i <= n; i++) skip[x[i]] = 1 }
    $0 != "" && !($0 in skip)'
}

# words TEXT: TEXT's lines on one line, separated by spaces.
words() { printf '%s\n' "$1" | awk 'NF { printf "%s%s", sep, $0; sep = " " } END { print "" }'; }

# unhealthy OUTPUT: from `etcdctl endpoint health` output, the endpoints it found unhealthy
# ("https://a:2379 https://b:2379 unhealthy"), else its last line.
unhealthy() {
  bad=$(printf '%s\n' "$1" | awk '/ is unhealthy/ { printf "%s%s", sep, $1; sep = " " }')
  if [ -n "$bad" ]; then printf '%s unhealthy\n' "$bad"; else printf '%s\n' "$1" | tail -n 1; fi
}
