//! A cold `apply` (a fresh data directory, one job) `fsync`s what a crash needs and nothing else
//! (issue [N] 5, docs/benchmarks.md): counted with `strace`, where this machine has it.

use std::process::{Command, Stdio};

use crate::support::temp_dir;

const PACK: &[(&str, &str)] = &[
    (
        "pack/pack.yaml",
        "scenario_pack: {id: bench, version: 1.0.0, resource_types: [bench.thing], actions: [chain], plan_templates: [{id: bench.chain, entrypoint: c0, action: chain}]}\n",
    ),
    ("pack/jobs.yaml", "job: {id: c0, type: noop, run: {executor: local, command: [sh, -c, 'true']}}\n"),
    (
        "pack/templates.yaml",
        "plan_template: {id: bench.chain, action: chain, stages: [{id: all, name: All, jobs: [c0]}], jobs: [c0]}\n",
    ),
    ("intent.yaml", "intent: {target_resource_type: bench.thing, action: chain, name: bench, environment: bench}\n"),
];

/// Before the job's process starts: the new store file's contents (`create.rs`), the WAL's header
/// and its directory (SQLite's first sync of the store's WAL: the store file's name with it), and
/// the committer's `fdatasync` of the WAL after the commit that records the job `running` — which
/// makes the operation's creation and its lease, committed deferred before it with no sync of
/// their own (`Durable::ByItsDrive`, a lease's commits), durable with it. After: the result and
/// the completion, two commits synced at their commit; the lease's release is not synced, and
/// there is no checkpoint at close (the WAL is small). Main (2f31992, the committer) made 7
/// before the job and 12 in all: the directory after the file, the creation and the lease synced
/// on their own, the lease's release, and SQLite's checkpoint at close (the WAL, then the file).
#[test]
fn a_cold_apply_fsyncs_four_times_before_its_first_job_and_six_in_all() {
    if Command::new("strace").arg("-V").stdout(Stdio::null()).status().map_or(true, |s| !s.success()) {
        eprintln!("no strace here: the fsyncs of a cold apply are not counted");
        return;
    }
    let dir = temp_dir(PACK);
    let Some(text) = traced_apply(dir.path(), "trace=fsync,fdatasync,execve") else {
        eprintln!("strace may not trace here: the fsyncs of a cold apply are not counted");
        return;
    };
    let (mut before, mut job_started, mut all) = (0, false, 0);
    for line in text.lines() {
        if line.contains(r#"execve("/usr/bin/sh", ["sh", "-c", "true"]"#)
            || line.contains(r#"execve("/bin/sh", ["sh", "-c", "true"]"#)
        {
            job_started = true;
        }
        if line.contains(" fsync(") || line.contains(" fdatasync(") {
            all += 1;
            before += usize::from(!job_started);
        }
    }
    assert!(job_started, "the job's process was not seen:\n{text}");
    assert_eq!((before, all), (4, 6), "fsyncs before the first job, in all:\n{text}");
}

/// A pack `chain` of `n` jobs `c0`, `c1`, …, each after the one before, running `/bin/true`.
fn chain(n: usize) -> crate::support::TempDir {
    let list = (0..n).map(|k| format!("c{k}")).collect::<Vec<_>>().join(", ");
    let jobs: Vec<String> = (0..n)
        .map(|k| {
            let after = if k == 0 { String::new() } else { format!(", after: [c{}]", k - 1) };
            format!("job: {{id: c{k}, type: noop{after}, run: {{executor: local, command: [/bin/true]}}}}\n")
        })
        .collect();
    temp_dir(&[
        (
            "pack/pack.yaml",
            "scenario_pack: {id: chain, version: 1.0.0, resource_types: [chain.thing], actions: [run], plan_templates: [{id: chain.run, entrypoint: c0, action: run}]}\n",
        ),
        ("pack/jobs.yaml", &jobs.join("---\n")),
        (
            "pack/templates.yaml",
            &format!("plan_template: {{id: chain.run, action: run, stages: [{{id: all, name: All, jobs: [{list}]}}], jobs: [{list}]}}\n"),
        ),
        ("intent.yaml", "intent: {target_resource_type: chain.thing, action: run, name: chain, environment: dev}\n"),
    ])
}

/// `opsgraph apply` of the pack and intent in `dir`, under `strace -f -e WHAT`: the trace, or
/// `None` where `strace` cannot trace. The command must succeed.
fn traced_apply(dir: &std::path::Path, what: &str) -> Option<String> {
    let trace = dir.join("strace");
    let status = Command::new("strace")
        .args(["-f", "-e", what, "-o"])
        .arg(&trace)
        .arg(env!("CARGO_BIN_EXE_opsgraph"))
        .args(["apply", "--yes", "-f"])
        .arg(dir.join("intent.yaml"))
        .arg("--packs")
        .arg(dir.join("pack"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .ok()?;
    let text = std::fs::read_to_string(&trace).unwrap_or_default();
    if !status.success() && text.contains("PTRACE") {
        return None;
    }
    assert!(status.success(), "{text}");
    Some(text)
}

/// The `fsync`s and `fdatasync`s of `apply` of a chain of `n`, or `None` where `strace` cannot
/// count them.
fn syncs_of_a_chain(n: usize) -> Option<usize> {
    let text = traced_apply(chain(n).path(), "trace=fsync,fdatasync")?;
    Some(text.lines().filter(|l| l.contains(" fsync(") || l.contains(" fdatasync(")).count())
}

/// One sync per chained job, the floor of issue [N] 5's goal: the commit that records a job's
/// result also records the next job `running`, and that one commit is synced before the next
/// process starts (by the driver itself: it has nothing else to do). Counted as the difference
/// between chains of 30 and 10 (the run's own syncs cancel out; 30 jobs' commits stay far below
/// SQLite's checkpoint).
#[test]
fn a_chained_job_costs_one_sync() {
    if Command::new("strace").arg("-V").stdout(Stdio::null()).status().map_or(true, |s| !s.success()) {
        eprintln!("no strace here: the syncs of a chain are not counted");
        return;
    }
    let (Some(short), Some(long)) = (syncs_of_a_chain(10), syncs_of_a_chain(30)) else {
        eprintln!("strace may not trace here: the syncs of a chain are not counted");
        return;
    };
    assert_eq!(long - short, 20, "syncs of 10 chained jobs: {short}, of 30: {long}");
}
