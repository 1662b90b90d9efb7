#!/bin/sh
# install-etcd-member (executor: ssh, as root, one instance per member): Debian's etcd-server and
# etcd-client, and the member's certificates under /etc/etcd/pki.
# Requires: etcd_ca_cert, etcd_member_cert, etcd_member_key (secret). Provides: etcd.installed.
# Records in /etc/etcd/pki/ca.operation the operation whose artifacts hold the CA (check-etcd-ca).
# The package would start a default single-node etcd at once (ETCD_NAME=hostname, data in
# /var/lib/etcd/default); a policy-rc.d that refuses starts keeps it stopped until configured.
set -eu

: "${OPSGRAPH_ARTIFACT_ETCD_CA_CERT:?the CA certificate artifact is missing}"
: "${OPSGRAPH_ARTIFACT_ETCD_MEMBER_CERT:?the member certificate artifact is missing}"
: "${OPSGRAPH_ARTIFACT_ETCD_MEMBER_KEY:?the member key artifact is missing}"
command -v apt-get >/dev/null 2>&1 || { echo "apt-get not found: this pack needs Debian 12 (bookworm)" >&2; exit 1; }

installed() {
  [ "$(dpkg-query -W -f '${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]
}

if ! installed etcd-server || ! installed etcd-client; then
  # Ours, left by an attempt that was killed (a timeout) before it could remove it, is replaced;
  # anyone else's is not touched.
  marker='# opsgraph etcd pack: no service starts while etcd-server installs'
  if [ -e /usr/sbin/policy-rc.d ] && ! grep -qxF "$marker" /usr/sbin/policy-rc.d; then
    echo "/usr/sbin/policy-rc.d exists already: refusing to replace it (remove it or install etcd-server by hand)" >&2
    exit 1
  fi
  printf '#!/bin/sh\n%s\nexit 101\n' "$marker" >/usr/sbin/policy-rc.d
  chmod 755 /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  trap 'rm -f /usr/sbin/policy-rc.d; exit 143' TERM
  trap 'rm -f /usr/sbin/policy-rc.d; exit 130' INT
  export DEBIAN_FRONTEND=noninteractive
  apt-get -q -o DPkg::Lock::Timeout=600 update
  apt-get -q -o DPkg::Lock::Timeout=600 install -y --no-install-recommends etcd-server etcd-client
  rm -f /usr/sbin/policy-rc.d
  trap - EXIT TERM INT
  echo "installed etcd-server and etcd-client"
else
  echo "etcd-server and etcd-client are installed already"
fi
getent group etcd >/dev/null || { echo "the etcd-server package did not create the etcd group" >&2; exit 1; }

# Writes stdin to $1 with mode $2 and group $3, only when its content differs.
write_file() {
  tmp="$1.opsgraph-tmp"
  cat >"$tmp"
  chmod "$2" "$tmp"
  chown "root:$3" "$tmp"
  if [ -f "$1" ] && cmp -s "$tmp" "$1"; then
    rm -f "$tmp"
  else
    mv "$tmp" "$1"
    echo "wrote $1"
  fi
}

install -d -m 750 -o root -g etcd /etc/etcd /etc/etcd/pki
write_file /etc/etcd/pki/ca.crt 644 root <"$OPSGRAPH_ARTIFACT_ETCD_CA_CERT"
# The operation whose artifacts hold this CA (and its key, on the control host): the one a
# parameter ca_cert names, else this one (it issued it). check-etcd-ca names it when an apply
# brings another CA.
issuer=${OPSGRAPH_PARAM_CA_CERT:-}
issuer=${issuer%%/*}
printf '%s\n' "${issuer:-${OPSGRAPH_OPERATION_ID:?OPSGRAPH_OPERATION_ID is not set}}" | write_file /etc/etcd/pki/ca.operation 644 root
write_file /etc/etcd/pki/member.crt 644 root <"$OPSGRAPH_ARTIFACT_ETCD_MEMBER_CERT"
(umask 077 && write_file /etc/etcd/pki/member.key 640 etcd <"$OPSGRAPH_ARTIFACT_ETCD_MEMBER_KEY")
