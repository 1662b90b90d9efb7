#!/bin/sh
# opsgraph pack lab-cluster - jobs validate-nodes: check a lab node and record its facts.
#
# Runs on each node of target_nodes. Creates the node directory "$OPSGRAPH_LAB_DIR/<node>" when
# it is missing, checks it is writable and that the node is not a member of another cluster,
# checks the tools the lab needs, and writes <node>/node.env and the node_inventory artifact.
#
# Conventions (packs/README.md, scripts/lib/lab-lib.sh): run with `sh -eu`; POSIX sh; idempotent.
# Requires:   cluster_spec (OPSGRAPH_ARTIFACT_CLUSTER_SPEC)
# Parameters: fail_job, fail_mode
# Produces:   node_inventory - KEY=value lines (NODE, ADDRESS, OS, KERNEL, ARCH, CPUS)
set -eu
# shellcheck source-path=SCRIPTDIR source=lib/lab-lib.sh
. "$OPSGRAPH_LIB/lab-lib.sh"; lab_init node cluster
# shellcheck source-path=SCRIPTDIR source=cluster-lib.sh disable=SC1091
. "$LAB_SCRIPTS/cluster-lib.sh"

SPEC=${OPSGRAPH_ARTIFACT_CLUSTER_SPEC:?the cluster_spec artifact is required}
[ -r "$SPEC" ] || fail "cannot read the cluster_spec artifact $SPEC"
[ "$(kv "$SPEC" CLUSTER_NAME)" = "$CLUSTER" ] || fail "cluster_spec is for cluster '$(kv "$SPEC" CLUSTER_NAME)', not '$CLUSTER'"

lab_failpoint "error execution phase preflight: [preflight] Some fatal errors occurred:" \
    "	[ERROR Mem]: the system RAM (1024 MB) is less than the minimum 1700 MB" \
    "	[ERROR NumCPU]: the number of available CPUs 1 is less than the required 2"

[ "$NODE" != "$CLUSTER" ] || fail "node name '$NODE' is the cluster's name"
for tool in date od cksum grep sed awk sleep; do
    command -v "$tool" >/dev/null 2>&1 || fail "the lab needs '$tool' on PATH"
done
command -v setsid >/dev/null 2>&1 || command -v nohup >/dev/null 2>&1 ||
    fail "the lab needs setsid or nohup to start node processes"

mkdir -p "$NODE_DIR"
probe="$NODE_DIR/.write-probe.$$"
: >"$probe" 2>/dev/null || fail "node directory $NODE_DIR is not writable"
rm -f "$probe"
member=$(kcfg "$NODE_DIR/kubernetes/kubelet.conf" cluster)
if [ -n "$member" ] && [ "$member" != "$CLUSTER" ]; then
    fail "node $NODE is already a member of cluster '$member': run lab-reset on it first"
fi

# A stable lab address from the name: 10.77.<0..3>.<2..251>.
sum=$(printf '%s' "$NODE" | cksum | cut -d' ' -f1)
ADDRESS="10.77.$(( sum / 250 % 4 )).$(( sum % 250 + 2 ))"
CPUS=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)

if lab_proven; then
    {
        printf 'NODE=%s\n' "$NODE"
        printf 'ADDRESS=%s\n' "$ADDRESS"
    } | write_file "$NODE_DIR/node.env"
fi
{
    printf 'NODE=%s\n' "$NODE"
    printf 'ADDRESS=%s\n' "$ADDRESS"
    printf 'OS=%s\n' "$(uname -s)"
    printf 'KERNEL=%s\n' "$(uname -r)"
    printf 'ARCH=%s\n' "$(uname -m)"
    printf 'CPUS=%s\n' "$CPUS"
    printf 'NODE_DIR=%s\n' "$NODE_DIR"
} | lab_artifact node_inventory
log "ok: $NODE_DIR, address $ADDRESS"
