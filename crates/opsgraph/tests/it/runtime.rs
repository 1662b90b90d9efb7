//! The durable runtime on a small pack of real shell jobs and a real SQLite store: evidence
//! decides, retries, gates and roles, idempotency, crash recovery.

use std::collections::BTreeSet;

use expect_test::{expect, Expect};
use opsgraph_core::model::OperationState;
use opsgraph_runtime::{GateAnswer, Runtime};
use opsgraph_store::{JobState, Store, Write};
use opsgraph_store_sqlite::{Durability, SqliteStore};

use crate::support::{temp_dir, TempDir};

const PACK: &[(&str, &str)] = &[
    (
        "mini/pack.yaml",
        "scenario_pack:\n  id: mini\n  version: 1.0.0\n  title: Mini\n  resource_types: [mini.app]\n  actions: [install]\n  provides: [app.service]\n  plan_templates: [{id: mini.install}]\n",
    ),
    (
        "mini/templates.yaml",
        r#"plan_template:
  id: mini.install
  action: install
  parameters:
    port: {type: integer, default: 8080}
    expect_port: {type: integer, default: 8080}
    gate_verify: {type: boolean, default: false}
  scopes:
    nodes: {resource_type: compute_node, from: targets.nodes}
  stages:
    - {id: config, name: Configure, jobs: [make-config]}
    - {id: start, name: Start, jobs: [start-app, flaky]}
    - {id: verify, name: Verify, jobs: [verify]}
  jobs: [make-config, start-app, flaky, verify]
"#,
    ),
    (
        "mini/jobs.yaml",
        r#"job:
  id: make-config
  outputs: {artifacts: [app_config]}
  run: {command: "printf 'port=%s\n' \"$OPSGRAPH_PARAM_PORT\" > \"$OPSGRAPH_OUT/app_config\""}
---
job:
  id: start-app
  scope: {resources: [compute_node]}
  inputs:
    requires:
      artifacts: [app_config]
      capabilities: [{key: linux.host, scope: nodes}]
  outputs:
    provides: {capabilities: [{key: app.running, scope: nodes}]}
    evidence: [app_configured]
  controls:
    idempotency: {key: "start-app:{node_id}:{port}"}
  run: {script: scripts/start-app.sh}
---
job:
  id: flaky
  outputs:
    provides: {capabilities: [app.flaky_done]}
    evidence: [flaky_done]
  controls:
    retry_policy: {max_attempts: 3, backoff: 10ms}
  run: {script: scripts/flaky.sh}
---
job:
  id: verify
  inputs:
    requires:
      capabilities: [{key: app.running, scope: nodes}, app.flaky_done]
  outputs:
    provides: {capabilities: [app.service]}
    evidence: [all_nodes_up]
  run: {command: [true]}
"#,
    ),
    (
        "mini/evidence.yaml",
        r#"evidence:
  - id: app_configured
    source: command
    command: cat "$OPSGRAPH_LAB_DIR/$OPSGRAPH_TARGET_NAME/app.conf"
    expected: "port=8080"
  - id: flaky_done
    source: command
    command: cat "$OPSGRAPH_LAB_DIR/flaky.count"
    expected: "3"
  - id: all_nodes_up
    source: command
    command: set -- "$OPSGRAPH_LAB_DIR"/n*; [ -e "$1" ] && echo "$#"
    expected: "2"
"#,
    ),
    ("mini/artifacts.yaml", "artifact: {id: app_config, type: app.config, sensitivity: internal}\n"),
    (
        "mini/scripts/start-app.sh",
        "mkdir -p \"$OPSGRAPH_LAB_DIR/$OPSGRAPH_TARGET_NAME\"\ncp \"$OPSGRAPH_ARTIFACT_APP_CONFIG\" \"$OPSGRAPH_LAB_DIR/$OPSGRAPH_TARGET_NAME/app.conf\"\necho started >> \"$OPSGRAPH_LAB_DIR/$OPSGRAPH_TARGET_NAME/runs\"\n",
    ),
    (
        "mini/scripts/flaky.sh",
        "f=\"$OPSGRAPH_LAB_DIR/flaky.count\"\nn=$(cat \"$f\" 2>/dev/null || echo 0)\nn=$((n + 1))\necho \"$n\" > \"$f\"\nif [ \"$n\" -lt 3 ]; then echo \"transient failure $n\" >&2; exit 1; fi\n",
    ),
    (
        "world.yaml",
        "resource: {type: compute_node, name: n1, access: {local: true}, provides: [linux.host]}\n---\nresource: {type: compute_node, name: n2, access: {local: true}, provides: [linux.host]}\n",
    ),
    (
        "intent.yaml",
        "intent:\n  target_resource_type: mini.app\n  action: install\n  name: app-1\n  environment: dev\n  targets: {nodes: [compute_node/n1, compute_node/n2]}\n",
    ),
];

struct Lab {
    dir: TempDir,
}

impl Lab {
    fn new(extra: &[(&str, &str)]) -> Lab {
        let mut files: Vec<(&str, &str)> = PACK.to_vec();
        files.retain(|(p, _)| !extra.iter().any(|(q, _)| q == p));
        files.extend_from_slice(extra);
        Lab { dir: temp_dir(&files) }
    }

    fn path(&self, rel: &str) -> String {
        self.dir.join(rel).display().to_string()
    }

    fn loaded(&self) -> opsgraph::plan_cmd::Loaded {
        use opsgraph::load::Source;
        opsgraph::plan_cmd::load_inputs(
            &Source::parse(&self.path("intent.yaml")),
            opsgraph::load::packs(&[Source::parse(&self.path("mini"))]),
            &[Source::parse(&self.path("world.yaml"))],
        )
    }

    fn runtime(&self) -> Runtime {
        let loaded = self.loaded();
        assert!(loaded.diagnostics.is_empty(), "{:?}", loaded.diagnostics);
        let data = self.dir.join("data");
        std::fs::create_dir_all(&data).unwrap();
        let store = SqliteStore::open(&data.join("opsgraph.db"), Durability::Full).unwrap();
        Runtime::new(Box::new(store), loaded.packs, loaded.world.resources, data)
    }

    fn plan(&self) -> opsgraph_core::plan::Plan {
        opsgraph::plan_cmd::build(&self.loaded()).unwrap()
    }
}

/// Creates and drives an operation; shows the timeline (events and reasons) and the end state.
fn run_all(rt: &mut Runtime, plan: &opsgraph_core::plan::Plan) -> (String, String) {
    let mut lines = Vec::new();
    let mut progress = |e: &opsgraph_store::TimelineEntry| lines.push(format!("{} {}", e.event, e.reason));
    let id = rt.create(plan, "user:alice", &mut progress).unwrap();
    let state = rt.drive(&id, &mut progress).unwrap();
    lines.push(format!("=> {}", opsgraph_core::plan::lifecycle::state_name(state.kind())));
    (id, lines.join("\n"))
}

fn check_timeline(text: &str, expect: Expect) {
    // Job order within one group commit depends on thread timing: compare sorted runs of job lines.
    let mut out = Vec::new();
    let mut group: Vec<String> = Vec::new();
    for line in text.lines() {
        if line.starts_with("job_") {
            group.push(line.to_string());
        } else {
            group.sort();
            out.append(&mut group);
            out.push(line.to_string());
        }
    }
    group.sort();
    out.append(&mut group);
    expect.assert_eq(&(out.join("\n") + "\n"));
}

#[test]
fn an_operation_runs_to_completion_and_evidence_decides() {
    let lab = Lab::new(&[]);
    let mut rt = lab.runtime();
    let plan = lab.plan();
    let (id, timeline) = run_all(&mut rt, &plan);
    check_timeline(
        &timeline,
        expect![[r#"
            created install mini@1.0.0 from mini.install
            plan_built plan preview built
            resolve capabilities resolved
            start no approval needed
            job_retry flaky: exited with code 1: transient failure 1; attempt 1 of 3, retrying
            job_retry flaky: exited with code 1: transient failure 2; attempt 2 of 3, retrying
            job_started flaky attempt 1
            job_started flaky attempt 2
            job_started flaky attempt 3
            job_started make-config attempt 1
            job_started start-app@n1 attempt 1
            job_started start-app@n2 attempt 1
            job_started verify attempt 1
            job_succeeded flaky: exited with code 0 (1 evidence checks passed)
            job_succeeded make-config: exited with code 0 (0 evidence checks passed)
            job_succeeded start-app@n1: exited with code 0 (1 evidence checks passed)
            job_succeeded start-app@n2: exited with code 0 (1 evidence checks passed)
            job_succeeded verify: exited with code 0 (1 evidence checks passed)
            complete every job's outputs are verified by evidence
            => completed
        "#]],
    );
    let store = rt.store();
    let evidence: Vec<String> = store
        .evidence(&id)
        .unwrap()
        .iter()
        .filter(|e| e.passed)
        .map(|e| format!("{} {} expected {:?} observed {:?}", e.job, e.check, e.expected, e.observed))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    expect![[r#"
        flaky flaky_done expected "3" observed "3"
        start-app@n1 app_configured expected "port=8080" observed "port=8080"
        start-app@n2 app_configured expected "port=8080" observed "port=8080"
        verify all_nodes_up expected "2" observed "2""#]]
    .assert_eq(&evidence.join("\n"));
    let artifacts = store.artifacts(&id).unwrap();
    assert_eq!(artifacts.len(), 1);
    assert_eq!(std::fs::read_to_string(lab.dir.join("data").join(&artifacts[0].location)).unwrap(), "port=8080\n");
    let resource = store.resource("mini.app/app-1").unwrap().unwrap();
    expect![[r#"{"id":"mini.app/app-1","type":"mini.app","name":"app-1","environment":"dev","desired_state":"install mini.app","observed_state":"completed: 4 evidence checks passed","health":"healthy","status":"running","provides":[{"capability":"app.service"}]}"#]]
    .assert_eq(&serde_json::to_string(&resource.doc).unwrap());
    // A completed run cannot be resumed, and says why.
    let err = rt.resume(&id, "user:alice").unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot apply `resume` to an operation in state `completed`: the operation is completed"
    );
}

/// The calling thread's nice value (field 19 of `/proc/thread-self/stat`; its name has no space).
fn own_nice() -> i32 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    stat.rsplit_once(") ").unwrap().1.split(' ').nth(16).unwrap().parse().unwrap()
}

/// Local jobs run below the control plane (`OPSGRAPH_JOBS_NICE`, docs/operations.md#executors):
/// a job's process and its evidence check's report a nice value `jobs_nice` above the driver's,
/// and the thread that drove the operation keeps its own.
#[test]
fn jobs_and_their_checks_run_below_the_driver_which_keeps_its_priority() {
    let nice = "cut -d' ' -f19 /proc/self/stat > \"$OPSGRAPH_LAB_DIR/$1.nice\"\n";
    let flaky = format!("set -- job\n{nice}{}", PACK.iter().find(|(p, _)| *p == "mini/scripts/flaky.sh").unwrap().1);
    let evidence = PACK.iter().find(|(p, _)| *p == "mini/evidence.yaml").unwrap().1.replace(
        r#"command: cat "$OPSGRAPH_LAB_DIR/flaky.count""#,
        r#"command: cut -d' ' -f19 /proc/self/stat > "$OPSGRAPH_LAB_DIR/check.nice"; cat "$OPSGRAPH_LAB_DIR/flaky.count""#,
    );
    let lab = Lab::new(&[("mini/scripts/flaky.sh", &flaky), ("mini/evidence.yaml", &evidence)]);
    let before = own_nice();
    let (_, timeline) = run_all(&mut lab.runtime(), &lab.plan());
    assert!(timeline.ends_with("=> completed"), "{timeline}");
    let expected = (before + opsgraph_exec::jobs_nice()).min(19).to_string();
    let read = |file: &str| std::fs::read_to_string(lab.dir.join("data/lab").join(file)).unwrap().trim().to_string();
    assert_eq!([read("job.nice"), read("check.nice")], [expected.clone(), expected]);
    assert_eq!(own_nice(), before, "the driving thread keeps its priority");
}

/// Where an operation's artifact contents and job logs land, by blob store: the data
/// directory's files, or PostgreSQL's tables with nothing under `blobs/` (a job still reads its
/// input artifact, copied into its directory). Shown: the artifact, flaky's first log, whether
/// `DATA_DIR/blobs` exists. `None` where PostgreSQL is not at hand.
fn blobs(backend: opsgraph_store::testing::Backend) -> Option<String> {
    use opsgraph_store::testing::Backend;
    let lab = Lab::new(&[]);
    let data = lab.dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let loaded = lab.loaded();
    let (mut rt, _db) = match backend {
        Backend::Sqlite => (lab.runtime(), None),
        Backend::Postgres => {
            let db = opsgraph_store_pg::test_db("runtime::check_blobs")?;
            let mut rt = Runtime::new(db.store(), loaded.packs, loaded.world.resources, data.clone());
            rt.blobs = std::sync::Arc::new(opsgraph_store_pg::PgBlobStore::connect(db.url()).unwrap());
            (rt, Some(db))
        }
    };
    let (id, timeline) = run_all(&mut rt, &lab.plan());
    assert!(timeline.ends_with("=> completed"), "{timeline}");
    let artifact = rt.store().artifacts(&id).unwrap().remove(0);
    let content = rt.blobs.get(&artifact.location).unwrap().map(|b| String::from_utf8(b).unwrap());
    let log = rt.job_log(&id, "flaky", 1).map(|b| String::from_utf8(b).unwrap());
    Some(format!("{content:?}\n{log:?}\nblobs dir: {}", data.join("blobs").exists()))
}

/// With SQLite, files in the data directory; with PostgreSQL, the same contents in the database.
#[test]
fn artifacts_and_logs_are_files_with_sqlite_and_in_the_database_with_postgresql() {
    let sqlite = blobs(opsgraph_store::testing::Backend::Sqlite).unwrap();
    expect![[r#"
        Some("port=8080\n")
        Some("--- stderr\ntransient failure 1\n")
        blobs dir: true"#]]
    .assert_eq(&sqlite);
    let Some(postgres) = blobs(opsgraph_store::testing::Backend::Postgres) else { return };
    assert_eq!(postgres, sqlite.replace("blobs dir: true", "blobs dir: false"));
}

#[test]
fn exit_zero_with_failing_evidence_is_a_failure_naming_the_check() {
    let lab = Lab::new(&[(
        "intent.yaml",
        "intent:\n  target_resource_type: mini.app\n  action: install\n  name: app-1\n  parameters: {port: 9090}\n  targets: {nodes: [compute_node/n1, compute_node/n2]}\n",
    )]);
    let mut rt = lab.runtime();
    let (id, _) = run_all(&mut rt, &lab.plan());
    let op = rt.store().operation(&id).unwrap().unwrap();
    let OperationState::Failed { reason } = op.state else { panic!("{:?}", op.state) };
    assert!(
        reason.ends_with("evidence app_configured failed: expected `port=8080`, observed `port=9090`")
            || reason.contains("evidence app_configured failed"),
        "{reason}"
    );
    let resource = rt.store().resource("mini.app/app-1").unwrap().unwrap();
    assert_eq!(resource.doc["health"], "error");
    assert_eq!(resource.last_operation.as_deref(), Some(id.as_str()));
}

/// mini.install with the approval gate `look-before-verify` (an SRE's, for `reason`) before
/// `verify`; `parameters` are its parameter lines.
fn gated_template(parameters: &str, reason: &str) -> String {
    format!(
        "plan_template:\n  id: mini.install\n  action: install\n  parameters:\n{parameters}  scopes:\n    nodes: {{resource_type: compute_node, from: targets.nodes}}\n  stages:\n    - {{id: config, name: Configure, jobs: [make-config]}}\n    - {{id: start, name: Start, jobs: [start-app, flaky]}}\n    - {{id: verify, name: Verify, jobs: [verify]}}\n  jobs: [make-config, start-app, flaky, verify]\n  gates:\n    - {{id: look-before-verify, type: approval, reason: {reason}, options: [proceed, cancel operation], required_roles: [sre], before: [verify]}}\n"
    )
}

#[test]
fn gates_block_descendants_and_check_roles() {
    let gate = gated_template("    port: {type: integer, default: 8080}\n", "an SRE checks the nodes");
    let lab = Lab::new(&[("mini/templates.yaml", gate.as_str())]);
    let mut rt = lab.runtime();
    let (id, timeline) = run_all(&mut rt, &lab.plan());
    assert!(timeline.ends_with("pause waiting for gate look-before-verify\n=> paused"), "{timeline}");
    let answer =
        |role: &str| GateAnswer { option: "proceed".into(), actor: "user:bob".into(), role: role.into(), value: None };
    let err = rt.answer_gate(&id, "look-before-verify", &answer("viewer")).unwrap_err();
    assert_eq!(err.to_string(), "role `viewer` may not answer gate `look-before-verify`; it needs one of: sre");
    let state = rt.answer_gate(&id, "look-before-verify", &answer("sre")).unwrap();
    assert_eq!(state, OperationState::Running);
    let err = rt.answer_gate(&id, "look-before-verify", &answer("sre")).unwrap_err();
    assert!(
        err.to_string().starts_with("gate `look-before-verify` was already answered `proceed` by user:bob at "),
        "{err}"
    );
    assert_eq!(rt.drive(&id, &mut |_| {}).unwrap(), OperationState::Completed);
}

#[test]
fn a_succeeded_idempotency_key_with_passing_evidence_is_not_run_again() {
    let lab = Lab::new(&[]);
    let mut rt = lab.runtime();
    let plan = lab.plan();
    run_all(&mut rt, &plan);
    std::fs::remove_file(lab.dir.join("data/lab/flaky.count")).unwrap();
    let (id, _) = run_all(&mut rt, &plan);
    let jobs = rt.store().jobs(&id).unwrap();
    let start = jobs.iter().filter(|j| j.id.starts_with("start-app@")).map(|j| j.state).collect::<Vec<_>>();
    assert_eq!(start, vec![JobState::AlreadySatisfied, JobState::AlreadySatisfied]);
    // The script ran once per node in all.
    assert_eq!(std::fs::read_to_string(lab.dir.join("data/lab/n1/runs")).unwrap(), "started\n");
}

/// An operation whose `start-app@n1` was recorded as started when the process died.
fn crashed(lab: &Lab, rt: &mut Runtime) -> String {
    let id = rt.create(&lab.plan(), "user:alice", &mut |_| {}).unwrap();
    let mut store = SqliteStore::open(&lab.dir.join("data/opsgraph.db"), Durability::Full).unwrap();
    let mut j = store.jobs(&id).unwrap().into_iter().find(|j| j.id == "start-app@n1").unwrap();
    j.state = JobState::Running;
    j.attempts = 1;
    store.commit(&[Write::Job(j)]).unwrap();
    id
}

#[test]
fn after_a_crash_passing_evidence_means_recovered_not_run_again() {
    let lab = Lab::new(&[]);
    let mut rt = lab.runtime();
    let id = crashed(&lab, &mut rt);
    // The job had done its work before the crash.
    std::fs::create_dir_all(lab.dir.join("data/lab/n1")).unwrap();
    std::fs::write(lab.dir.join("data/lab/n1/app.conf"), "port=8080\n").unwrap();
    let mut events = Vec::new();
    let state = rt.drive(&id, &mut |e| events.push(format!("{} {}", e.event, e.reason))).unwrap();
    assert_eq!(state, OperationState::Completed, "{events:#?}");
    assert!(
        events
            .contains(&"job_recovered start-app@n1: outcome unknown after a restart; its evidence passes".to_string()),
        "{events:#?}"
    );
    assert!(!lab.dir.join("data/lab/n1/runs").exists(), "start-app@n1 was run again");
    let job = rt.store().jobs(&id).unwrap().into_iter().find(|j| j.id == "start-app@n1").unwrap();
    assert_eq!(job.state, JobState::Recovered);
}

#[test]
fn after_a_crash_failing_evidence_without_retry_waits_for_a_person() {
    let lab = Lab::new(&[]);
    let mut rt = lab.runtime();
    let id = crashed(&lab, &mut rt);
    let state = rt.drive(&id, &mut |_| {}).unwrap();
    let OperationState::Failed { reason } = state else { panic!("{state:?}") };
    assert!(
        reason.starts_with("start-app@n1: outcome unknown after a restart and evidence app_configured failed"),
        "{reason}"
    );
    assert!(reason.ends_with("a person decides"), "{reason}");
}

/// The CLI over the same pack: apply with a live view, then get, describe and logs.
#[test]
fn cli_apply_then_inspect() {
    use crate::support::opsgraph;
    let lab = Lab::new(&[]);
    let data = lab.path("cli-data");
    let (mini, world, intent) = (lab.path("mini"), lab.path("world.yaml"), lab.path("intent.yaml"));
    let run =
        opsgraph(&["--data-dir", &data, "apply", "-f", &intent, "--packs", &mini, "--inventory", &world, "--yes"]);
    assert_eq!(run.code, 0, "{}", run.render());
    assert!(run.out.contains("done      start-app@n2: exited with code 0 (1 evidence checks passed)"), "{}", run.out);
    assert!(run.out.contains("Evidence: 4 of 4 checks passed"), "{}", run.out);
    assert!(run.out.contains("Resource mini.app/app-1: status running, health healthy"), "{}", run.out);
    // Evidence says what it proves, and where.
    assert!(run.out.contains("  proves app.running: 2 checks on 2 resources"), "{}", run.out);
    assert!(run.out.contains("  proves app.service: 1 check on mini.app/app-1"), "{}", run.out);
    let ops: serde_json::Value =
        serde_json::from_str(&opsgraph(&["--data-dir", &data, "get", "operations", "-o", "json"]).out).unwrap();
    let id = ops[0]["id"].as_str().unwrap().to_string();
    assert_eq!(ops[0]["state"], "completed");
    let jobs = opsgraph(&["--data-dir", &data, "get", "jobs", &id]);
    expect![[r#"
        ID            STATE      ATTEMPTS  OUTCOME             FAILURE
        make-config   succeeded  1         exited with code 0  -
        start-app@n1  succeeded  1         exited with code 0  -
        start-app@n2  succeeded  1         exited with code 0  -
        flaky         succeeded  3         exited with code 0  -
        verify        succeeded  1         exited with code 0  -
    "#]]
    .assert_eq(&jobs.out);
    let describe = opsgraph(&["--data-dir", &data, "describe", "operation", &id]);
    assert!(describe.out.contains("event: job_retry"), "{}", describe.out);
    let logs = opsgraph(&["--data-dir", &data, "logs", &id, "flaky"]);
    expect![[r#"
        ==> flaky attempt 1 <==
        --- stderr
        transient failure 1
        ==> flaky attempt 2 <==
        --- stderr
        transient failure 2
        ==> flaky attempt 3 <==
        (no output)
    "#]]
    .assert_eq(&logs.out);
    let resources = opsgraph(&["--data-dir", &data, "get", "resources", "-o", "yaml"]);
    assert!(resources.out.contains("- id: mini.app/app-1"), "{}", resources.out);
    // Applying again while nothing runs is fine; the second run finds its work done.
    let again =
        opsgraph(&["--data-dir", &data, "apply", "-f", &intent, "--packs", &mini, "--inventory", &world, "--yes"]);
    assert!(again.out.contains("already satisfied"), "{}", again.out);
}

#[test]
fn cli_apply_for_machines() {
    use crate::support::opsgraph;
    let lab = Lab::new(&[]);
    let data = lab.path("cli-data");
    let (mini, world, intent) = (lab.path("mini"), lab.path("world.yaml"), lab.path("intent.yaml"));
    // No preview, no live view: the operation once it stops, as `describe operation` shows it.
    let args = ["--data-dir", &data, "apply", "-f", &intent, "--packs", &mini, "--inventory", &world];
    let refused = opsgraph(&[&args[..], &["-o", "json"]].concat());
    assert_eq!(
        (refused.code, refused.err.trim()),
        (1, "error: `apply -o json|yaml` prints no preview to confirm: add --yes")
    );
    let json = opsgraph(&[&args[..], &["-o", "json", "--yes", "--concurrency", "1"]].concat());
    assert_eq!(json.code, 0, "{}", json.render());
    let doc: serde_json::Value = serde_json::from_str(&json.out).unwrap();
    assert_eq!(doc["state"], "completed");
    // One job at a time: every start follows the end of the one before.
    let mut running = 0;
    for e in doc["timeline"].as_array().unwrap() {
        match e["event"].as_str().unwrap() {
            "job_started" => running += 1,
            "job_succeeded" | "job_failed" | "job_retry" => running -= 1,
            _ => {}
        }
        assert!(running <= 1, "two jobs at once with --concurrency 1: {}", doc["timeline"]);
    }
    let proven: Vec<&str> =
        doc["evidence"].as_array().unwrap().iter().filter_map(|e| e["capability"].as_str()).collect();
    assert!(proven.contains(&"app.service"), "{proven:?}");
    let id = doc["id"].as_str().unwrap();
    let yaml = opsgraph(&["--data-dir", &data, "describe", "operation", id, "-o", "yaml"]);
    assert!(yaml.out.starts_with(&format!("id: {id}\n")), "{}", yaml.out);
    let dot = opsgraph(&[&args[..], &["-o", "dot", "--yes"]].concat());
    assert!(dot.err.contains("`apply` has no dot output"), "{}", dot.render());
    let logs: serde_json::Value =
        serde_json::from_str(&opsgraph(&["--data-dir", &data, "logs", id, "flaky", "-o", "json"]).out).unwrap();
    assert_eq!(logs.as_array().unwrap().len(), 3, "{logs}");
    assert_eq!(logs[0]["output"], "--- stderr\ntransient failure 1\n");
}

#[test]
fn cli_control_commands_for_machines() {
    use crate::support::opsgraph;
    let gate = gated_template("    port: {type: integer, default: 8080}\n", "an SRE checks");
    let lab = Lab::new(&[("mini/templates.yaml", gate.as_str()), ("cli-data/config.yaml", "users:\n  alice: [sre]\n")]);
    let data = lab.path("cli-data");
    let (mini, world, intent) = (lab.path("mini"), lab.path("world.yaml"), lab.path("intent.yaml"));
    let run = opsgraph(&[
        "--data-dir",
        &data,
        "apply",
        "-f",
        &intent,
        "--packs",
        &mini,
        "--inventory",
        &world,
        "--yes",
        "-o",
        "json",
    ]);
    let doc: serde_json::Value = serde_json::from_str(&run.out).unwrap_or_else(|_| panic!("{}", run.render()));
    assert_eq!(doc["state"], "paused", "{doc}");
    let answered = opsgraph(&[
        "--data-dir",
        &data,
        "gate",
        "answer",
        "look-before-verify",
        "--option",
        "proceed",
        "--as",
        "alice",
        "--packs",
        &mini,
        "--inventory",
        &world,
        "-o",
        "yaml",
    ]);
    assert!(answered.out.contains("\nstate: completed\n"), "{}", answered.render());
    let paused = opsgraph(&["--data-dir", &data, "pause", doc["id"].as_str().unwrap(), "-o", "json"]);
    assert!(paused.err.contains("completed"), "{}", paused.render());
}

/// A person cancels from another process while the driver runs jobs: the driver stops them,
/// keeps what it observed, and ends in the state the person chose.
#[test]
fn cancel_from_another_process_stops_running_jobs_and_keeps_results() {
    let slow = "mkdir -p \"$OPSGRAPH_LAB_DIR/$OPSGRAPH_TARGET_NAME\"\nsleep 5\n";
    let lab = Lab::new(&[("mini/scripts/start-app.sh", slow)]);
    let mut rt = lab.runtime();
    let id = rt.create(&lab.plan(), "user:alice", &mut |_| {}).unwrap();
    let driver = {
        let id = id.clone();
        std::thread::spawn(move || rt.drive(&id, &mut |_| {}).unwrap())
    };
    std::thread::sleep(std::time::Duration::from_millis(600));
    let mut other = lab.runtime();
    other.cancel(&id, "user:bob", "wrong cluster").unwrap();
    let started = std::time::Instant::now();
    let state = driver.join().unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(4), "running jobs were not stopped");
    assert_eq!(state, OperationState::Cancelled { reason: "wrong cluster".into() });
    let jobs = other.store().jobs(&id).unwrap();
    let state_of = |id: &str| jobs.iter().find(|j| j.id == id).unwrap().state;
    assert_eq!(state_of("make-config"), JobState::Succeeded);
    assert_eq!(state_of("start-app@n1"), JobState::Cancelled);
    assert_eq!(state_of("verify"), JobState::Pending);
}

/// A patch to a paused operation: it stays paused while the patch waits; rejected, nothing
/// changes; approved by another person, the plan's next revision runs on.
#[test]
fn a_paused_operation_is_patched_and_resumes_with_the_new_revision() {
    let gate = gated_template(
        "    port: {type: integer, default: 8080}\n    expect_port: {type: integer, default: 8080}\n",
        "an SRE checks",
    );
    let lab = Lab::new(&[("mini/templates.yaml", gate.as_str())]);
    let mut rt = lab.runtime();
    let (id, _) = run_all(&mut rt, &lab.plan());
    let before = rt.store().operation(&id).unwrap().unwrap();
    assert!(matches!(before.state, OperationState::Paused { .. }), "{:?}", before.state);
    let patch = |reason: &str| opsgraph_core::model::PlanPatch {
        id: None,
        operation: None,
        author: None,
        reason: Some(reason.into()),
        changes: vec![opsgraph_core::model::PatchChange::AddGate(opsgraph_core::model::Gate {
            id: format!("second-look-{reason}"),
            type_: opsgraph_core::model::GateType::Approval,
            reason: "a second SRE checks".into(),
            options: vec!["proceed".into(), "cancel operation".into()],
            required_roles: vec!["sre".into()],
            before: vec!["verify".into()],
        })],
        approval: Some(opsgraph_core::model::Approval { required: true, roles: vec!["sre".into()] }),
    };
    let answer = |option: &str, actor: &str| GateAnswer {
        option: option.into(),
        actor: actor.into(),
        role: "sre".into(),
        value: None,
    };
    let p = rt.propose_patch(&id, &patch("first"), "user:alice").unwrap();
    assert_eq!(p.gate.as_deref(), Some("patch-p1"));
    assert!(matches!(p.state, OperationState::Paused { .. }), "it stays paused: {:?}", p.state);
    let state = rt.answer_gate(&id, "patch-p1", &answer("reject patch", "user:bob")).unwrap();
    assert!(matches!(state, OperationState::Paused { .. }), "{state:?}");
    assert_eq!(rt.store().operation(&id).unwrap().unwrap().plan_revision, before.plan_revision);

    rt.propose_patch(&id, &patch("second"), "user:alice").unwrap();
    let state = rt.answer_gate(&id, "patch-p2", &answer("approve patch", "user:bob")).unwrap();
    assert_eq!(state, OperationState::Running);
    let after = rt.store().operation(&id).unwrap().unwrap();
    assert_ne!(after.plan_revision, before.plan_revision, "the next revision runs");
    rt.answer_gate(&id, "look-before-verify", &answer("proceed", "user:bob")).unwrap();
    // The patch's own gate now stands before verify too.
    assert!(matches!(rt.drive(&id, &mut |_| {}).unwrap(), OperationState::Paused { .. }));
    rt.answer_gate(&id, "second-look-second", &answer("proceed", "user:bob")).unwrap();
    assert_eq!(rt.drive(&id, &mut |_| {}).unwrap(), OperationState::Completed);
}
