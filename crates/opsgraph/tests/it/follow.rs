//! The live view of a local `apply`: the driver runs on a thread of its own and the CLI follows
//! beside it (`opsgraph::follower`), reading the timeline back and printing it. What it prints
//! must be the operation's whole timeline, in commit order, its last entries included, and the
//! run ends as before (its finish, its exit code).

use std::collections::BTreeMap;

use expect_test::{expect, Expect};
use opsgraph_api::Client as _;

use crate::support::{opsgraph, temp_dir, Run, TempDir};

/// A pack `chain` of `commands.len()` jobs `c0`, `c1`, …, each after the one before, job `k`
/// running `commands[k]` (a YAML flow list): the runtime bench's chain (`bench/compare.py`).
fn chain(commands: &[&str]) -> TempDir {
    let ids: Vec<String> = (0..commands.len()).map(|k| format!("c{k}")).collect();
    let jobs: Vec<String> = commands
        .iter()
        .enumerate()
        .map(|(k, command)| {
            let after = if k == 0 { String::new() } else { format!("\n  after: [c{}]", k - 1) };
            format!("job:\n  id: c{k}\n  type: noop{after}\n  run: {{executor: local, command: {command}}}\n")
        })
        .collect();
    let list = ids.join(", ");
    temp_dir(&[
        (
            "pack/pack.yaml",
            "scenario_pack:\n  id: chain\n  version: 1.0.0\n  resource_types: [chain.thing]\n  actions: [run]\n  plan_templates:\n    - {id: chain.run, entrypoint: c0, action: run}\n",
        ),
        ("pack/jobs.yaml", &jobs.join("---\n")),
        (
            "pack/templates.yaml",
            &format!("plan_template:\n  id: chain.run\n  action: run\n  stages:\n    - {{id: all, name: All, jobs: [{list}]}}\n  jobs: [{list}]\n"),
        ),
        ("intent.yaml", "intent:\n  target_resource_type: chain.thing\n  action: run\n  name: chain\n  environment: dev\n"),
        ("data/.keep", ""),
    ])
}

/// `apply --yes` of the chain; the run and the live view its stored timeline renders to.
fn apply(dir: &TempDir) -> (Run, String) {
    let (pack, intent, data) = (dir.join("pack"), dir.join("intent.yaml"), dir.join("data"));
    let run = opsgraph(&[
        "apply",
        "--yes",
        "-f",
        &intent.display().to_string(),
        "--packs",
        &pack.display().to_string(),
        "--data-dir",
        &data.display().to_string(),
    ]);
    let id = run.operation_id();
    let store = opsgraph::storage::open_store(&data).unwrap();
    let client = opsgraph::client::Local::new(&*store, &data);
    let view = client.operation(&id).unwrap();
    let stages: BTreeMap<String, String> =
        view.stages.iter().flat_map(|s| s.jobs.iter().map(|j| (j.clone(), s.name.clone()))).collect();
    let mut stored = Vec::new();
    let mut live = opsgraph::render::live(&mut stored, stages);
    for e in opsgraph_api::timeline_after(&client, &id, 0).unwrap() {
        live(&e);
    }
    drop(live);
    (run, String::from_utf8(stored).unwrap())
}

/// The live part of a run's output: its lines that start with a time (`12:34:56  `).
fn live_part(run: &Run) -> String {
    run.out.lines().filter(|l| timed(l)).map(|l| format!("{l}\n")).collect()
}

fn timed(line: &str) -> bool {
    let b = line.as_bytes();
    b.len() > 10
        && b[2] == b':'
        && b[5] == b':'
        && b[8..10] == *b"  "
        && line[..8].replace(':', "").bytes().all(|c| c.is_ascii_digit())
}

/// Times (`12:34:56`) and operation ids made stable for a snapshot.
fn stable(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut line = line.to_string();
        if timed(&line) {
            line.replace_range(..8, "hh:mm:ss");
        }
        while let Some(i) = line.find("op-") {
            let end = line[i + 3..].find(|c: char| !c.is_ascii_alphanumeric()).map_or(line.len(), |e| i + 3 + e);
            line.replace_range(i..end, "OP");
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

fn check(commands: &[&str], expect: Expect) {
    let dir = chain(commands);
    let (run, stored) = apply(&dir);
    assert!(live_part(&run) == stored, "the live view is not the stored timeline:\n{}", run.render());
    expect.assert_eq(&stable(&run.render()));
}

#[test]
fn the_live_view_shows_every_entry_to_the_last() {
    check(
        &["[/bin/true]", "[/bin/true]", "[/bin/true]"],
        expect![[r#"
            exit: 0
            --- stdout
            Plan chain.run (chain@1.0.0) for: run chain.thing chain in dev
            Revision 1 sha256:1e7092c18ceb   Risk: low

            Capabilities

            Stages
              1. All                c0; c1; c2

            3 jobs, 0 gates. Nothing has run. Status: ready to apply.

            hh:mm:ss  created: run chain@1.0.0 from chain.run
            hh:mm:ss  operation draft_intent -> plan_preview: plan preview built
            hh:mm:ss  operation plan_preview -> capability_resolution: capabilities resolved
            hh:mm:ss  operation capability_resolution -> running: no approval needed
            hh:mm:ss  All                started   c0 attempt 1
            hh:mm:ss  All                done      c0: exited with code 0 (0 evidence checks passed)
            hh:mm:ss  All                started   c1 attempt 1
            hh:mm:ss  All                done      c1: exited with code 0 (0 evidence checks passed)
            hh:mm:ss  All                started   c2 attempt 1
            hh:mm:ss  All                done      c2: exited with code 0 (0 evidence checks passed)
            hh:mm:ss  operation running -> completed: every job's outputs are verified by evidence

            Operation OP: completed
            Resource chain.thing/chain: status running, health healthy; completed: 0 evidence checks passed
        "#]],
    );
    // The last job fails: its line and the operation's are the last ones, and the exit code says so.
    check(
        &["[/bin/true]", "[/bin/false]"],
        expect![[r#"
            exit: 1
            --- stdout
            Plan chain.run (chain@1.0.0) for: run chain.thing chain in dev
            Revision 1 sha256:39918be3461b   Risk: low

            Capabilities

            Stages
              1. All                c0; c1

            2 jobs, 0 gates. Nothing has run. Status: ready to apply.

            hh:mm:ss  created: run chain@1.0.0 from chain.run
            hh:mm:ss  operation draft_intent -> plan_preview: plan preview built
            hh:mm:ss  operation plan_preview -> capability_resolution: capabilities resolved
            hh:mm:ss  operation capability_resolution -> running: no approval needed
            hh:mm:ss  All                started   c0 attempt 1
            hh:mm:ss  All                done      c0: exited with code 0 (0 evidence checks passed)
            hh:mm:ss  All                started   c1 attempt 1
            hh:mm:ss  operation running -> failed: c1: exited with code 1
            hh:mm:ss  All                FAILED    c1: exited with code 1

            Operation OP: failed: c1: exited with code 1
            Resource chain.thing/chain: status error, health error; operation OP failed: c1: exited with code 1
            Inspect with: opsgraph describe operation OP; opsgraph logs OP; retry with: opsgraph retry OP
        "#]],
    );
}

/// A long chain, fast jobs: commits come faster than a line is printed; none is lost or repeated.
#[test]
fn a_long_fast_chain_is_shown_whole() {
    let dir = chain(&["[/bin/true]"; 120]);
    let (run, stored) = apply(&dir);
    assert_eq!(run.code, 0, "{}", run.render());
    assert!(live_part(&run) == stored, "{}", run.render());
    assert_eq!(stored.lines().filter(|l| l.contains(" done ")).count(), 120, "{stored}");
    assert!(stored
        .trim_end()
        .ends_with("operation running -> completed: every job's outputs are verified by evidence"));
}
