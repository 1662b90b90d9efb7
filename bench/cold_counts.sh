#!/bin/sh
# Load-independent figures of a cold `opsgraph apply` (issue [N] 5, docs/benchmarks.md): for each
# binary given, one job (`sh -c true`) on a fresh data directory, its `fsync`s (strace -f -c) and
# the instructions of the whole command (valgrind --tool=callgrind, the job's process not counted).
#   sh bench/cold_counts.sh before after
set -eu
W=$(mktemp -d /tmp/opsgraph-cold-XXXXXX)
mkdir -p "$W/pack"
cat > "$W/pack/pack.yaml" <<'Y'
scenario_pack: {id: bench, version: 1.0.0, resource_types: [bench.thing], actions: [chain], plan_templates: [{id: bench.chain, entrypoint: c0, action: chain}]}
Y
cat > "$W/pack/jobs.yaml" <<'Y'
job: {id: c0, type: noop, run: {executor: local, command: [sh, -c, 'true']}}
Y
cat > "$W/pack/templates.yaml" <<'Y'
plan_template: {id: bench.chain, action: chain, stages: [{id: all, name: All, jobs: [c0]}], jobs: [c0]}
Y
cat > "$W/intent.yaml" <<'Y'
intent: {target_resource_type: bench.thing, action: chain, name: bench, environment: bench}
Y
for b in "$@"; do
  d=$(mktemp -d "$W/data-XXXX")
  strace -f -c -o "$W/strace" "$b" apply --yes -f "$W/intent.yaml" --packs "$W/pack" --data-dir "$d" >/dev/null 2>&1
  fsyncs=$(awk '$NF == "fsync" || $NF == "fdatasync" {n += $4} END {print n + 0}' "$W/strace")
  d=$(mktemp -d "$W/data-XXXX")
  valgrind --tool=callgrind --callgrind-out-file="$W/cg" "$b" apply --yes -f "$W/intent.yaml" --packs "$W/pack" \
    --data-dir "$d" >/dev/null 2>"$W/vg"
  ir=$(sed -n 's/.*Collected : //p' "$W/vg")
  echo "$b: $fsyncs fsyncs, $ir instructions"
done
rm -rf "$W"
