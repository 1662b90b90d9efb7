//! What a host prints reaches the store and the operator's terminal printable, on both backends:
//! a failure reason or an evidence value holding a NUL (which PostgreSQL's text cannot store: the
//! drive's commit used to fail there and the run stopped with a store error), a terminal escape
//! sequence or a carriage return is stored and shown escaped (`\x1b`, `\x00`, `\x0d`), and the
//! operation ends `failed` as any other failed job's would.

use opsgraph_store::testing::Backend;

use crate::support::{opsgraph, temp_dir, Run};

const PACK: &[(&str, &str)] = &[
    (
        "hostile/pack.yaml",
        "scenario_pack: {id: hostile, version: 1.0.0, resource_types: [hostile.thing], actions: [run], plan_templates: [{id: hostile.run}]}\n",
    ),
    (
        "hostile/templates.yaml",
        "plan_template: {id: hostile.run, action: run, parameters: {how: {type: string}}, stages: [{id: all, name: All, jobs: [speak]}], jobs: [speak]}\n",
    ),
    // `exit`: its last line of stderr; `evidence`: exits 0, its evidence sees the same bytes.
    (
        "hostile/jobs.yaml",
        "job: {id: speak, outputs: {evidence: [said]}, run: {executor: local, command: [sh, -c, 'printf \"boom \\033[2J\\033]0;pwned\\007\\000\\r all good\\n\" >&2; [ \"$OPSGRAPH_PARAM_HOW\" = evidence ]']}}\n",
    ),
    (
        "hostile/evidence.yaml",
        "evidence:\n  - {id: said, source: command, command: [sh, -c, 'printf \"ok\\033[2J\\000\"'], expected: ok}\n",
    ),
];

/// `apply` of the pack with parameter `how`, and `get jobs` of its operation; `None` when
/// the backend is PostgreSQL and none is reachable (the skip is printed; `CI=true` fails instead).
fn run(backend: Backend, how: &str) -> Option<(Run, Run)> {
    let db = match backend {
        Backend::Sqlite => opsgraph_store_sqlite::test_db(),
        Backend::Postgres => opsgraph_store_pg::test_db(&format!("printable::{how} ({backend:?})"))?,
    };
    let dir = temp_dir(PACK);
    std::fs::write(
        dir.join("intent.yaml"),
        format!("intent: {{target_resource_type: hostile.thing, action: run, name: h, parameters: {{how: {how}}}}}\n"),
    )
    .unwrap();
    let (data, intent, pack) = (
        dir.join("data").display().to_string(),
        dir.join("intent.yaml").display().to_string(),
        dir.join("hostile").display().to_string(),
    );
    let args = |rest: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = vec!["--data-dir".into(), data.clone(), "--database".into(), db.url().to_string()];
        a.extend(rest.iter().map(|s| s.to_string()));
        a
    };
    let apply = args(&["apply", "-f", &intent, "--packs", &pack, "--yes"]);
    let applied = opsgraph(&apply.iter().map(String::as_str).collect::<Vec<_>>());
    let id = applied.operation_id();
    let jobs = args(&["get", "jobs", &id]);
    let jobs = opsgraph(&jobs.iter().map(String::as_str).collect::<Vec<_>>());
    Some((applied, jobs))
}

fn check(backend: Backend) {
    for (how, says) in [
        ("exit", r"exited with code 1: boom \x1b[2J\x1b]0;pwned\x07\x00\x0d all good"),
        ("evidence", r"evidence said failed: expected ok, observed ok\x1b[2J\x00"),
    ] {
        let Some((applied, jobs)) = run(backend, how) else { return };
        // The jobs table cuts the failure to its column.
        for (shown, says) in [(&applied, says), (&jobs, &says[..40])] {
            let text = shown.render();
            assert!(text.contains(says), "{backend:?} {how}: `{says}` not in\n{text}");
            assert!(
                !text.contains(['\u{1b}', '\0', '\r', '\u{7}']),
                "{backend:?} {how}: a control character shown:\n{text:?}"
            );
        }
        assert_eq!(applied.code, 1, "{}", applied.render());
        assert!(applied.out.contains("failed"), "{backend:?} {how}: not failed\n{}", applied.render());
        assert!(!applied.err.contains("store"), "{backend:?} {how}: a store error\n{}", applied.render());
    }
}

#[test]
fn a_hosts_control_characters_are_stored_escaped_on_sqlite() {
    check(Backend::Sqlite);
}

#[test]
fn a_hosts_control_characters_are_stored_escaped_on_postgresql() {
    check(Backend::Postgres);
}
