//! Audit everywhere ([K] item 10): the local CLI writes the server's audit rows, in the change's
//! own transaction, with the local user (`--as`, else `$USER`) as the actor; `opsgraph audit`
//! shows them. Every command runs as the real binary.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::temp_dir;

const FILES: &[(&str, &str)] = &[
    (
        "packs/aud/pack.yaml",
        "scenario_pack:\n  id: aud\n  version: 1.0.0\n  resource_types: [aud.thing]\n  actions: [run]\n  plan_templates: [{id: aud.run}]\n",
    ),
    (
        "packs/aud/templates.yaml",
        "plan_template:\n  id: aud.run\n  action: run\n  stages: [{id: all, name: All, jobs: [slow, flaky]}]\n  jobs: [slow, flaky]\n",
    ),
    (
        "packs/aud/jobs.yaml",
        "job: {id: slow, outputs: {provides: {capabilities: [aud.slow]}, evidence: [slow_done]}, run: {command: 'i=0; until [ -e \"$OPSGRAPH_LAB_DIR/release\" ] || [ $i -ge 1200 ]; do sleep 0.1; i=$((i + 1)); done; touch \"$OPSGRAPH_LAB_DIR/slow.$OPSGRAPH_OPERATION_ID\"'}}\n---\n\
         job: {id: flaky, inputs: {requires: {capabilities: [aud.slow]}}, outputs: {provides: {capabilities: [aud.flaky]}, evidence: [fixed]}, run: {command: 'true'}}\n",
    ),
    (
        "packs/aud/evidence.yaml",
        "evidence:\n  - {id: slow_done, source: command, command: 'test -f \"$OPSGRAPH_LAB_DIR/slow.$OPSGRAPH_OPERATION_ID\"'}\n  - {id: fixed, source: command, command: 'test -f \"$OPSGRAPH_LAB_DIR/fixed.$OPSGRAPH_OPERATION_ID\"'}\n",
    ),
    ("data/config.yaml", "users: {carol: [sre]}\n"),
    ("patch.yaml", "plan_patch:\n  reason: try the flaky job again\n  approval: {required: true, roles: [sre]}\n  changes:\n    - retry: {job: flaky}\n"),
    ("one.yaml", "intent: {target_resource_type: aud.thing, action: run, name: one, environment: dev}\n"),
    ("two.yaml", "intent: {target_resource_type: aud.thing, action: run, name: two, environment: dev}\n"),
];

struct Ctx {
    data: String,
    packs: String,
}

impl Ctx {
    fn cmd(&self, user: &str, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_opsgraph"));
        c.arg("--data-dir").arg(&self.data).args(args).env("USER", user).stdout(Stdio::piped()).stderr(Stdio::piped());
        c
    }

    /// Runs `args` as `user` (with `--packs` for the commands that load packs); stdout.
    fn run(&self, user: &str, args: &[&str]) -> String {
        let mut args = args.to_vec();
        if !matches!(args[0], "audit" | "token" | "get" | "pause" | "cancel") {
            args.extend(["--packs", &self.packs]);
        }
        let out = self.cmd(user, &args).output().unwrap();
        if !out.status.success() {
            println!("{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        String::from_utf8(out.stdout).unwrap()
    }

    fn state(&self, id: &str) -> String {
        let ops: serde_json::Value =
            serde_json::from_str(&self.run("x", &["get", "operations", "-o", "json"])).unwrap();
        ops.as_array()
            .unwrap()
            .iter()
            .find(|o| o["id"] == id)
            .map(|o| o["state"].as_str().unwrap().to_string())
            .unwrap()
    }

    fn id_of(&self, name: &str) -> String {
        let ops: serde_json::Value =
            serde_json::from_str(&self.run("x", &["get", "operations", "-o", "json"])).unwrap();
        let op = ops.as_array().unwrap().iter().find(|o| o["resource"] == format!("aud.thing/{name}"));
        op.map(|o| o["id"].as_str().unwrap().to_string()).unwrap_or_default()
    }
}

#[test]
fn each_local_command_writes_the_servers_audit_row_as_the_local_user() {
    let dir = temp_dir(FILES);
    let c = Ctx { data: dir.join("data").display().to_string(), packs: dir.join("packs/aud").display().to_string() };
    let lab = dir.join("data/lab");
    let file = |f: &str| dir.join(f).display().to_string();

    // alice applies `one`; while its slow job runs (it waits for the file `release`, so that a
    // loaded machine cannot let it finish before it is seen running), bob pauses it.
    let mut apply = c.cmd("alice", &["apply", "-f", &file("one.yaml"), "--packs", &c.packs, "--yes"]).spawn().unwrap();
    let started = Instant::now();
    let one = loop {
        let id = c.id_of("one");
        if !id.is_empty() && c.state(&id) == "running" {
            break id;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "`one` never ran");
        std::thread::sleep(Duration::from_millis(20));
    };
    c.run("bob", &["pause", &one]);
    std::fs::create_dir_all(&lab).unwrap();
    std::fs::write(lab.join("release"), "").unwrap();
    apply.wait().unwrap();
    assert_eq!(c.state(&one), "paused");
    // bob resumes it: `flaky`'s evidence fails. carol retries `flaky`: it fails again. dave fixes
    // it by hand (`--as dave`, not $USER) and the evidence proves the fix.
    c.run("bob", &["resume", &one]);
    assert_eq!(c.state(&one), "failed");
    c.run("carol", &["retry", &one, "flaky"]);
    assert_eq!(c.state(&one), "failed");
    std::fs::write(lab.join(format!("fixed.{one}")), "").unwrap();
    c.run(
        "nobody",
        &["intervene", &one, "--job", "flaky", "--note", "fixed by hand", "--verify", "fixed", "--as", "dave"],
    );
    assert_eq!(c.state(&one), "completed");

    // `two` fails; bob proposes a patch that needs approval; carol (sre) approves it at its gate
    // (`--as carol`); it fails again and alice cancels it.
    c.run("alice", &["apply", "-f", &file("two.yaml"), "--yes"]);
    let two = c.id_of("two");
    assert_eq!(c.state(&two), "failed");
    let proposed = c.run("bob", &["patch", &two, "-f", &file("patch.yaml")]);
    let gate = proposed
        .split("waiting for approval at ")
        .nth(1)
        .and_then(|r| r.split(':').next())
        .unwrap_or_else(|| panic!("{proposed}"))
        .to_string();
    c.run("nobody", &["gate", "answer", &gate, "--operation", &two, "--option", "approve patch", "--as", "carol"]);
    c.run("alice", &["cancel", &two]);
    assert_eq!(c.state(&two), "cancelled");

    // erin creates a token and revokes it.
    let created = c.run("erin", &["token", "create", "--name", "ci", "--role", "viewer"]);
    let token = created.split_whitespace().nth(1).unwrap().to_string();
    c.run("erin", &["token", "revoke", &token]);

    let rows: serde_json::Value = serde_json::from_str(&c.run("x", &["audit", "-o", "json"])).unwrap();
    let text: Vec<String> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let name =
                |s: &str| s.replace(&one, "ONE").replace(&two, "TWO").replace(&gate, "GATE").replace(&token, "TOKEN");
            format!(
                "{:<11} {:<20} {}",
                r["actor"].as_str().unwrap(),
                r["action"].as_str().unwrap(),
                name(r["target"].as_str().unwrap())
            )
        })
        .collect();
    expect_test::expect![[r#"
        user:alice  operation.create     ONE
        user:bob    operation.pause      ONE
        user:bob    operation.resume     ONE
        user:carol  operation.retry      ONE
        user:dave   operation.intervene  ONE
        user:alice  operation.create     TWO
        user:bob    operation.patch      TWO
        user:carol  gate.answer          TWO/GATE
        user:alice  operation.cancel     TWO
        user:erin   token.create         TOKEN
        user:erin   token.revoke         TOKEN"#]]
    .assert_eq(&text.join("\n"));

    // `--since` is any RFC 3339 time, as the server takes it, compared as a time.
    let count = |since: &str| {
        let out = c.run("x", &["audit", "-o", "json", "--since", since]);
        serde_json::from_str::<serde_json::Value>(&out).map(|v| v.as_array().unwrap().len()).ok()
    };
    assert_eq!(count("2000-01-01T00:00:00+14:00"), Some(rows.as_array().unwrap().len()));
    assert_eq!(count("2999-01-01t00:00:00.5z"), Some(0));
    let refused = c.cmd("x", &["audit", "--since", "2026-02-30T00:00:00Z"]).output().unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("an RFC 3339 time is expected"));
}
