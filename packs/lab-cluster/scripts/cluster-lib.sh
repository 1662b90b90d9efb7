# opsgraph pack lab-cluster - cluster-lib.sh: helpers of the cluster scripts, sourced after
# shellcheck shell=sh disable=SC2034  # variables set here are read by the scripts that source it
# lab-lib.sh (never run on its own).
#
# Lab cluster layout:
#   <lab>/<node>/kubernetes/admin.conf    control plane: the admin kubeconfig (cluster, server,
#                                         CA hash, admin token), mode 0600
#   <lab>/<node>/kubernetes/tokens        control plane: bootstrap tokens, "ID.SECRET EXPIRES OPERATION"
#   <lab>/<node>/kubernetes/kubelet.conf  every member: the kubelet's kubeconfig
#   <lab>/<cluster>/spec.env              validated parameters
#   <lab>/<cluster>/nodes/<node>          one file per registered node: NODE, ROLE, ADDRESS, STATUS
#   <lab>/<cluster>/cni.conflist          the pod network configuration nodes copy when they join

# kcfg FILE FIELD: a field of a lab kubeconfig: `cluster` (the name of its first cluster),
# server, certificate-authority-hash, token. Empty when absent.
kcfg() {
    case $2 in
        cluster) sed -n 's/^- name: //p' "$1" 2>/dev/null | head -n 1 ;;
        *) sed -n "s/^ *$2: *//p" "$1" 2>/dev/null | head -n 1 ;;
    esac
}

# write_kubeconfig FILE USER SERVER CA_HASH TOKEN: a lab kubeconfig for CLUSTER (mode 0600).
write_kubeconfig() {
    {
        printf 'apiVersion: v1\nkind: Config\n'
        printf 'clusters:\n- name: %s\n  cluster:\n' "$CLUSTER"
        printf '    server: https://%s\n' "$3"
        printf '    certificate-authority-hash: %s\n' "$4"
        printf 'contexts:\n- name: %s@%s\n  context: {cluster: %s, user: %s}\n' "$2" "$CLUSTER" "$CLUSTER" "$2"
        printf 'current-context: %s@%s\n' "$2" "$CLUSTER"
        printf 'users:\n- name: %s\n  user:\n    token: %s\n' "$2" "$5"
    } | write_file "$1" 0600
}

# token_valid TOKENS TOKEN: TOKEN is in the tokens file and has not expired.
token_valid() {
    awk -v t="$2" -v now="$(now)" '$1 == t && $2 > now { found = 1 } END { exit !found }' "$1" 2>/dev/null
}

# operation_token TOKENS: an unexpired token made by this operation (empty when none).
operation_token() {
    [ -f "$1" ] || return 0
    awk -v op="${OPSGRAPH_OPERATION_ID:-}" -v now="$(now)" \
        'op != "" && $3 == op && $2 > now { t = $1 } END { if (t != "") print t }' "$1" 2>/dev/null
}

# bootstrap_token TOKENS TTL: sets BOOTSTRAP_TOKEN to a token valid for TTL seconds, made by this
# operation (reused when it has one). Unless the output is to stay unproven, the token is
# added to the control plane's TOKENS file. Sets TOKEN_EXPIRES (epoch seconds) too.
bootstrap_token() {
    bt_token=$(operation_token "$1")
    if [ -n "$bt_token" ]; then
        TOKEN_EXPIRES=$(awk -v t="$bt_token" '$1 == t { print $2; exit }' "$1")
    else
        bt_token="$(random_hex 6).$(random_hex 16)"
        TOKEN_EXPIRES=$(( $(now) + $2 ))
        if lab_proven; then
            (
                umask 077
                printf '%s %s %s\n' "$bt_token" "$TOKEN_EXPIRES" "${OPSGRAPH_OPERATION_ID:-none}" >>"$1"
            )
        fi
    fi
    BOOTSTRAP_TOKEN=$bt_token
}

# register_node ROLE STATUS: records NODE in the cluster's nodes directory.
register_node() {
    mkdir -p "$CLUSTER_DIR/nodes"
    {
        printf 'NODE=%s\n' "$NODE"
        printf 'ROLE=%s\n' "$1"
        printf 'ADDRESS=%s\n' "$(kv "$NODE_DIR/node.env" ADDRESS)"
        printf 'STATUS=%s\n' "$2"
    } | write_file "$CLUSTER_DIR/nodes/$NODE"
}

# set_status NODE STATUS: changes a registered node's STATUS.
set_status() {
    ss_file=$CLUSTER_DIR/nodes/$1
    [ -f "$ss_file" ] || return 1
    sed "s/^STATUS=.*/STATUS=$2/" "$ss_file" | write_file "$ss_file"
}
