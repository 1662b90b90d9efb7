//! No orphans, and no blind second run ([K] item 8): a job's processes die with the real binary
//! that drives it (`kill -9`), so recovery never races a live orphan; and `opsgraph retry` of a
//! job whose outcome is unknown checks its evidence before it runs the job again.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::crash::{check_outcomes, intent_file, PACK};
use crate::serve::Process;
use crate::support::{temp_dir, TempDir};

/// A slow chain a -> b -> c: `a` and `c` are not idempotent, `b` is (a key, three attempts). Each
/// step writes `start` to the ledger, its pids to `$LAB/<op>.<job>.pids`, waits on a child
/// `sleep` (a second process of its group), then writes `end` and its evidence marker.
const SLOW: &[(&str, &str)] = &[
    (
        "slow/pack.yaml",
        "scenario_pack:\n  id: slow\n  version: 1.0.0\n  resource_types: [slow.thing]\n  actions: [run]\n  plan_templates: [{id: slow.run}]\n",
    ),
    (
        "slow/templates.yaml",
        "plan_template:\n  id: slow.run\n  action: run\n  parameters:\n    ledger: {type: string, required: true}\n  stages:\n    - {id: all, name: All, jobs: [a, b, c]}\n  jobs: [a, b, c]\n",
    ),
    (
        "slow/jobs.yaml",
        "job: {id: a, outputs: {provides: {capabilities: [s.a]}, evidence: [done]}, run: {script: scripts/step.sh}}\n---\n\
         job: {id: b, inputs: {requires: {capabilities: [s.a]}}, outputs: {provides: {capabilities: [s.b]}, evidence: [done]}, controls: {idempotency: {key: 'b:{operation_id}'}, retry_policy: {max_attempts: 3}}, run: {script: scripts/step.sh}}\n---\n\
         job: {id: c, inputs: {requires: {capabilities: [s.b]}}, outputs: {provides: {capabilities: [s.c]}, evidence: [done]}, run: {script: scripts/step.sh}}\n",
    ),
    (
        "slow/evidence.yaml",
        "evidence:\n  - {id: done, source: command, command: 'test -f \"$OPSGRAPH_LAB_DIR/$OPSGRAPH_OPERATION_ID.$OPSGRAPH_JOB_ID\"'}\n",
    ),
    (
        "slow/scripts/step.sh",
        "at=\"$OPSGRAPH_LAB_DIR/$OPSGRAPH_OPERATION_ID.$OPSGRAPH_JOB_ID\"\n\
         sleep 1.5 &\n\
         printf '%s %s\\n' \"$$\" \"$!\" > \"$at.pids\"\n\
         printf '%s %s start\\n' \"$OPSGRAPH_OPERATION_ID\" \"$OPSGRAPH_JOB_ID\" >> \"$OPSGRAPH_PARAM_LEDGER\"\n\
         wait\n\
         printf '%s %s end\\n' \"$OPSGRAPH_OPERATION_ID\" \"$OPSGRAPH_JOB_ID\" >> \"$OPSGRAPH_PARAM_LEDGER\"\n\
         touch \"$at\"\n",
    ),
];

fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X')))
        .unwrap_or(false)
}

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_opsgraph"));
    c.stdout(Stdio::null()).stderr(Stdio::null());
    c
}

/// Waits (at most 30 s) until job `at` has started, by the ledger: its operation and the pids its
/// job wrote (its shell's and the shell's child's).
fn started(dir: &TempDir, ledger: &str, at: &str) -> (String, Vec<String>) {
    let started = Instant::now();
    loop {
        assert!(started.elapsed() < Duration::from_secs(30), "job {at} never started");
        let text = std::fs::read_to_string(ledger).unwrap_or_default();
        if let Some(op) =
            text.lines().find(|l| l.ends_with(&format!(" {at} start"))).map(|l| l.split(' ').next().unwrap())
        {
            let pids = std::fs::read_to_string(dir.join(&format!("data/lab/{op}.{at}.pids"))).unwrap();
            return (op.to_string(), pids.split_whitespace().map(str::to_string).collect());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `kill -9` of `process`; the `pids` still alive a second later.
fn kill_9(process: &mut Child, pids: &[String]) -> Vec<String> {
    process.kill().unwrap(); // SIGKILL
    process.wait().unwrap();
    let killed = Instant::now();
    while pids.iter().any(|p| alive(p)) && killed.elapsed() < Duration::from_secs(1) {
        std::thread::sleep(Duration::from_millis(5));
    }
    pids.iter().filter(|p| alive(p)).cloned().collect()
}

/// Runs `apply`, kills it with `kill -9` while job `at` runs, and reports what was alive after
/// the kill and how the operation ended after `resume` (and how often each job started and
/// ended, from the ledger).
fn kill_during(at: &str) -> String {
    let dir = temp_dir(SLOW);
    let data = dir.join("data").display().to_string();
    let ledger = dir.join("ledger").display().to_string();
    let pack = dir.join("slow").display().to_string();
    let intent = dir.join("intent.yaml");
    std::fs::write(
        &intent,
        format!("intent:\n  target_resource_type: slow.thing\n  action: run\n  name: t\n  parameters: {{ledger: '{ledger}'}}\n"),
    )
    .unwrap();
    let intent = intent.display().to_string();
    let mut driver =
        bin().args(["--data-dir", &data, "apply", "-f", &intent, "--packs", &pack, "--yes"]).spawn().unwrap();
    // Until the job runs and its pids are written.
    let (_, pids) = started(&dir, &ledger, at);
    // Its job's shell and the shell's child die with it: within a second, long before the
    // `sleep` would have ended.
    let left = kill_9(&mut driver, &pids);
    let after_kill = if left.is_empty() { "no job process alive".to_string() } else { format!("ALIVE: {left:?}") };
    // A person resumes it: recovery checks the evidence of the attempt without an outcome.
    let ops =
        bin().args(["--data-dir", &data, "get", "operations", "-o", "json"]).stdout(Stdio::piped()).output().unwrap();
    let ops: serde_json::Value = serde_json::from_slice(&ops.stdout).unwrap();
    let id = ops[0]["id"].as_str().unwrap().to_string();
    bin().args(["--data-dir", &data, "resume", &id, "--packs", &pack]).status().unwrap();
    // Long enough for a surviving orphan to have finished and written its end.
    std::thread::sleep(Duration::from_millis(1600));
    let ops =
        bin().args(["--data-dir", &data, "get", "operations", "-o", "json"]).stdout(Stdio::piped()).output().unwrap();
    let ops: serde_json::Value = serde_json::from_slice(&ops.stdout).unwrap();
    let text = std::fs::read_to_string(&ledger).unwrap_or_default();
    let mut counts = Vec::new();
    for job in ["a", "b", "c"] {
        let n = |what: &str| text.lines().filter(|l| l.ends_with(&format!(" {job} {what}"))).count();
        counts.push(format!("{job} {}/{}", n("start"), n("end")));
    }
    format!(
        "killed in {at}: {after_kill}; then {}; started/ended {}",
        ops[0]["state"].as_str().unwrap(),
        counts.join(", ")
    )
}

/// `kill -9` of the driving binary at several points: the killed job's process group dies with it
/// (a guardian process kills it), the killed attempt never ends behind recovery's back, and no
/// job without an idempotency key runs twice. Killed in `a` (no key), the operation waits for a
/// person ("outcome unknown"); killed in `b` (a key), `b` runs again and the run completes.
#[test]
fn kill_9_of_the_driver_stops_its_jobs_and_nothing_runs_twice() {
    let table: Vec<String> = ["a", "b", "c"].iter().map(|at| kill_during(at)).collect();
    expect_test::expect![[r#"
        killed in a: no job process alive; then failed; started/ended a 1/0, b 0/0, c 0/0
        killed in b: no job process alive; then completed; started/ended a 1/1, b 2/1, c 1/1
        killed in c: no job process alive; then failed; started/ended a 1/1, b 1/1, c 1/0"#]]
    .assert_eq(&table.join("\n"));
}

/// `opsgraph serve` drives the slow chain (created through the API) and is killed with
/// `kill -9` while job `a` runs: its job processes die with it, and the attempt never ends.
#[test]
fn kill_9_of_the_server_stops_its_jobs() {
    let dir = temp_dir(SLOW);
    let data = dir.join("data").display().to_string();
    let ledger = dir.join("ledger").display().to_string();
    let pack = dir.join("slow").display().to_string();
    let mut server = Process::start(
        Command::new(env!("CARGO_BIN_EXE_opsgraph"))
            .args(["--data-dir", &data, "serve", "--listen", "127.0.0.1:0", "--packs", &pack])
            .env_remove("OPSGRAPH_ADMIN_TOKEN_FILE"),
        &dir.join("serve.log"),
    );
    let (admin, addr) = (server.admin.clone().expect("an admin token"), server.addr);
    let intent = format!(
        "intent:\n  target_resource_type: slow.thing\n  action: run\n  name: s\n  parameters: {{ledger: '{ledger}'}}\n"
    );
    let (status, created) = crate::server::http(addr, "POST", "/api/v1/operations", &admin, &intent);
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    let (op, pids) = started(&dir, &ledger, "a");
    assert_eq!(op, id);
    let left = kill_9(&mut server.child, &pids);
    assert!(left.is_empty(), "job processes outlived the server: {left:?}");
    std::thread::sleep(Duration::from_millis(1600));
    let text = std::fs::read_to_string(&ledger).unwrap();
    assert!(!text.contains(" a end"), "the killed attempt finished behind the server's back:\n{text}");
}

/// Runs the crash pack's operation, killed by the `attempts.recorded` fail point (job `a`
/// recorded running, its process never started) and resumed: `a`'s outcome is unknown and its
/// evidence fails, so the operation waits for a person. Then, with `a`'s evidence made true or
/// not, `opsgraph retry`: the job's state and which jobs ran (from the ledger).
fn check_retry(evidence_now: bool, expect: expect_test::Expect) {
    let dir = temp_dir(PACK);
    let data = dir.join("data").display().to_string();
    let ledger = dir.join("ledger").display().to_string();
    let pack = dir.join("crashy").display().to_string();
    let intent = intent_file(dir.path(), "t", &ledger);
    let status = bin()
        .args(["--data-dir", &data, "apply", "-f", &intent, "--packs", &pack, "--yes"])
        .env("OPSGRAPH_FAIL_POINT", "attempts.recorded")
        .status()
        .unwrap();
    assert!(!status.success());
    let ops =
        bin().args(["--data-dir", &data, "get", "operations", "-o", "json"]).stdout(Stdio::piped()).output().unwrap();
    let ops: serde_json::Value = serde_json::from_slice(&ops.stdout).unwrap();
    let id = ops[0]["id"].as_str().unwrap().to_string();
    bin().args(["--data-dir", &data, "resume", &id, "--packs", &pack]).status().unwrap();
    let state = |data: &str| {
        let ops = bin()
            .args(["--data-dir", data, "get", "operations", "-o", "json"])
            .stdout(Stdio::piped())
            .output()
            .unwrap();
        let ops: serde_json::Value = serde_json::from_slice(&ops.stdout).unwrap();
        ops[0]["state"].as_str().unwrap().to_string()
    };
    let before = state(&data);
    if evidence_now {
        // The effect is there now (a person did it by hand, or a slow side effect landed).
        std::fs::write(dir.join(&format!("data/lab/{id}.a")), "").unwrap();
    }
    bin().args(["--data-dir", &data, "retry", &id, "a", "--packs", &pack]).status().unwrap();
    let jobs =
        bin().args(["--data-dir", &data, "get", "jobs", &id, "-o", "json"]).stdout(Stdio::piped()).output().unwrap();
    let jobs: serde_json::Value = serde_json::from_slice(&jobs.stdout).unwrap();
    let a = jobs.as_array().unwrap().iter().find(|j| j["id"] == "a").unwrap()["state"].clone();
    let text = std::fs::read_to_string(&ledger).unwrap_or_default();
    let ran: Vec<&str> = text.lines().map(|l| l.split(' ').nth(1).unwrap()).collect();
    let (_, _, _) = check_outcomes(dir.path(), &ledger);
    let actual = format!(
        "before retry: {before}; after: {}; job a {}; ran: {}",
        state(&data),
        a.as_str().unwrap(),
        ran.join(" ")
    );
    expect.assert_eq(&actual);
}

#[test]
fn retry_of_a_job_whose_outcome_is_unknown_checks_its_evidence_first() {
    check_retry(
        true,
        expect_test::expect!["before retry: failed; after: completed; job a recovered; ran: b c d e f g h"],
    );
    check_retry(
        false,
        expect_test::expect!["before retry: failed; after: completed; job a succeeded; ran: a b c d e f g h"],
    );
}
