//! Day-2 actions through the CLI ([I]): an action on a resource an operation created plans
//! against its record — parameters and targets the intent leaves out come from it, secrets are
//! given again — its preview shows the change, it adds none of the pack's capabilities, and an
//! action that removes the resource leaves no record behind, only its history. A day-2 action
//! its template refuses changes nothing.

use expect_test::expect;
use opsgraph_store::Store;
use serde_json::Value;

use crate::support::{opsgraph, temp_dir, Run, TempDir};

const RESOURCE: &str = "kv.store/kv-1";

const FILES: &[(&str, &str)] = &[
    (
        "kv/pack.yaml",
        r#"scenario_pack:
  id: kv
  version: 1.0.0
  resource_types: [kv.store]
  actions: [install, upgrade, uninstall]
  provides: [kv.service, kv.admin]
  plan_templates: [{id: kv.install}, {id: kv.upgrade}, {id: kv.uninstall}]
"#,
    ),
    (
        "kv/templates.yaml",
        r#"plan_template:
  id: kv.install
  action: install
  parameters:
    version: {type: string, default: "1"}
    port: {type: integer, default: 8000}
    token: {type: string, required: true, secret: true}
  scopes:
    nodes: {resource_type: compute_node, from: targets.nodes, min: 1}
  stages: [{id: write, name: Write, jobs: [kv-write]}]
  jobs: [kv-write]
  provides: [kv.service]
---
plan_template:
  id: kv.upgrade
  action: upgrade
  parameters:
    version: {type: string, default: "1"}
    port: {type: integer, default: 8000}
    token: {type: string, required: true, secret: true}
  scopes:
    nodes: {resource_type: compute_node, from: targets.nodes, min: 1}
  refuse:
    - when: [{of: params.port, below: 1024}, {of: recorded.port, above: 1023}]
      message: moving kv to a port below 1024 needs root on every node; uninstall and install instead
  stages: [{id: write, name: Write, jobs: [kv-write]}]
  jobs: [kv-write]
---
plan_template:
  id: kv.uninstall
  action: uninstall
  removes_resource: true
  scopes:
    nodes: {resource_type: compute_node, from: targets.nodes, min: 1}
  stages: [{id: remove, name: Remove, jobs: [kv-remove]}]
  jobs: [kv-remove]
"#,
    ),
    (
        "kv/jobs.yaml",
        r#"job:
  id: kv-write
  scope: {resources: [compute_node]}
  inputs: {parameters: {version: {type: string}, port: {type: integer}}}
  run: {script: scripts/write.sh}
---
job:
  id: kv-remove
  scope: {resources: [compute_node]}
  run: {command: "rm -f \"$OPSGRAPH_LAB_DIR/$OPSGRAPH_TARGET_NAME.conf\""}
"#,
    ),
    (
        "kv/scripts/write.sh",
        "mkdir -p \"$OPSGRAPH_LAB_DIR\"\nprintf 'version=%s port=%s\\n' \"$OPSGRAPH_PARAM_VERSION\" \"$OPSGRAPH_PARAM_PORT\" > \"$OPSGRAPH_LAB_DIR/$OPSGRAPH_TARGET_NAME.conf\"\n",
    ),
    (
        "world.yaml",
        "resource: {type: compute_node, name: n1, access: {local: true}, provides: [linux.host]}\n---\nresource: {type: compute_node, name: n2, access: {local: true}, provides: [linux.host]}\n",
    ),
    (
        "install.yaml",
        "intent:\n  target_resource_type: kv.store\n  action: install\n  name: kv-1\n  parameters: {version: \"2\", port: 8001, token: canary-token-install}\n  targets: {nodes: [compute_node/n1]}\n",
    ),
    (
        "upgrade.yaml",
        "intent:\n  target_resource_type: kv.store\n  action: upgrade\n  name: kv-1\n  parameters: {version: \"3\", token: canary-token-upgrade}\n",
    ),
    (
        "upgrade-port80.yaml",
        "intent:\n  target_resource_type: kv.store\n  action: upgrade\n  name: kv-1\n  parameters: {version: \"3\", port: 80, token: canary-token-upgrade}\n",
    ),
    ("uninstall.yaml", "intent:\n  target_resource_type: kv.store\n  action: uninstall\n  name: kv-1\n"),
];

struct Kv {
    dir: TempDir,
}

impl Kv {
    /// A server over the same data directory, packs and world as the CLI's runs.
    fn api(&self) -> crate::server::Api {
        let (packs, world) =
            (self.dir.join("kv").display().to_string(), self.dir.join("world.yaml").display().to_string());
        crate::server::Api::over(temp_dir(&[])).data(&self.dir.join("data")).packs(&[&packs]).world(&[&world]).build()
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    fn run(&self, command: &str, intent: &str, extra: &[&str]) -> Run {
        let (data, packs, world) = (self.data(), self.dir.join("kv"), self.dir.join("world.yaml"));
        let intent = self.dir.join(intent).display().to_string();
        let (packs, world) = (packs.display().to_string(), world.display().to_string());
        let args =
            [&["--data-dir", data.as_str(), command, "-f", &intent, "--packs", &packs, "--inventory", &world], extra];
        opsgraph(&args.concat())
    }

    fn apply(&self, intent: &str) -> Run {
        let applied = self.run("apply", intent, &["--yes"]);
        assert_eq!(applied.code, 0, "{}", applied.render());
        assert!(applied.out.contains("completed"), "{}", applied.render());
        applied
    }

    fn conf(&self) -> String {
        std::fs::read_to_string(self.dir.join("data/lab/n1.conf")).unwrap_or_else(|e| format!("({e})"))
    }

    fn resource(&self) -> Option<Value> {
        let described = opsgraph(&["--data-dir", &self.data(), "describe", "resource", RESOURCE, "-o", "json"]);
        (described.code == 0).then(|| serde_json::from_str(&described.out).unwrap())
    }
}

/// The recorded operation's id (random) as `OP`.
fn redact(text: &str, r: &Value) -> String {
    text.replace(r["last_operation"].as_str().unwrap(), "OP")
}

#[test]
fn a_day2_action_plans_against_the_record_shows_the_change_and_uninstall_removes_the_resource() {
    let kv = Kv { dir: temp_dir(FILES) };
    kv.apply("install.yaml");
    assert_eq!(kv.conf(), "version=2 port=8001\n");
    let installed = kv.resource().expect("the install's resource");
    assert_eq!(installed["resource"]["status"], "running", "{installed:#}");

    // The upgrade gives a version and the token again; port and node come from the record.
    let planned = kv.run("plan", "upgrade.yaml", &[]);
    assert_eq!(planned.code, 0, "{}", planned.render());
    let text = redact(&planned.out, &installed);
    let section = crate::preview_text::section(&text, "Changes to kv.store/kv-1 (running, recorded by OP)");
    expect![[r#"
        Changes to kv.store/kv-1 (running, recorded by OP)
          ~ version  2 → 3
          as recorded: port=8001, targets.nodes=compute_node/n1
    "#]]
    .assert_eq(&section);
    let json = kv.run("plan", "upgrade.yaml", &["-o", "json"]);
    let v: Value = serde_json::from_str(&json.out).unwrap();
    expect![[r#"{"resource":"kv.store/kv-1","status":"running","operation":"OP","parameters":{"port":8001},"targets":{"nodes":["compute_node/n1"]},"changes":[{"name":"version","from":"2","to":"3"}]}"#]]
    .assert_eq(&redact(&v["inherited"].to_string(), &installed));
    assert!(!json.out.contains("canary-token"), "a secret in the JSON preview");

    // The server plans against the same record (one assembly of planner inputs).
    let api = kv.api();
    let token = api.token("sam", &["operator"]);
    let upgrade = std::fs::read_to_string(kv.dir.join("upgrade.yaml")).unwrap();
    let served = api.post("/api/v1/plans", &token, &upgrade);
    assert_eq!(served.status, 200, "{}", served.body);
    assert_eq!(served.body["inherited"], v["inherited"]);
    assert_eq!(served.body["revision"], v["revision"], "the server's plan is the CLI's");
    drop(api);

    // Run: the job sees the recorded port; the day-2 template adds none of the pack's
    // capabilities (kv.admin).
    let upgrade = kv.apply("upgrade.yaml");
    assert!(upgrade.out.contains("  ~ version  2 → 3\n"), "{}", upgrade.out);
    assert_eq!(kv.conf(), "version=3 port=8001\n");
    let upgraded = kv.resource().unwrap();
    assert_eq!(upgraded["resource"]["status"], "running");
    assert_eq!(upgraded["resource"]["provides"], serde_json::json!([{"capability": "kv.service"}]), "{upgraded:#}");

    // Uninstall names nothing but the resource: its node comes from the record. Completed, the
    // resource is gone; its history stays, its last entry saying it was removed.
    kv.apply("uninstall.yaml");
    assert_eq!(kv.conf(), "(No such file or directory (os error 2))");
    assert!(kv.resource().is_none(), "uninstalled but still recorded: {:#}", kv.resource().unwrap());
    let store = opsgraph_store_sqlite::SqliteStore::open(
        &kv.dir.join("data/opsgraph.db"),
        opsgraph_store_sqlite::Durability::Full,
    )
    .unwrap();
    let history: Vec<String> = store
        .resource_events(RESOURCE, 20)
        .unwrap()
        .iter()
        .map(|e| format!("{} {} {}", e.kind, e.status, e.summary.split(" (operation").next().unwrap_or("")))
        .collect();
    expect![[r#"
        operation.started provisioning install kv.store/kv-1
        operation.completed running completed: 0 evidence checks passed
        operation.started running upgrade kv.store/kv-1
        operation.completed running completed: 0 evidence checks passed
        operation.started running uninstall kv.store/kv-1
        operation.completed removed removed by uninstall"#]]
    .assert_eq(&history.join("\n"));

    // Nothing is recorded any more: an upgrade plans from its intent alone (and has no node).
    let again = kv.run("plan", "upgrade.yaml", &[]);
    assert!(!again.out.contains("Changes to"), "{}", again.render());
}

/// A day-2 action a `refuse:` rule of its template refuses (here: against the recorded port) is
/// refused at plan time: `apply` prints the reason with P012 and exits 1, and nothing changes —
/// no operation, no audit row, the resource and its node as they were.
#[test]
fn a_refused_day2_action_prints_why_and_changes_nothing() {
    let kv = Kv { dir: temp_dir(FILES) };
    kv.apply("install.yaml");
    let before = kv.resource().unwrap();
    let operations = |kv: &Kv| -> Value {
        serde_json::from_str(&opsgraph(&["--data-dir", &kv.data(), "get", "operations", "-o", "json"]).out).unwrap()
    };
    let audit = |kv: &Kv| opsgraph(&["--data-dir", &kv.data(), "audit", "-o", "json"]).out;
    let (ops_before, audit_before) = (operations(&kv), audit(&kv));

    let refused = kv.run("apply", "upgrade-port80.yaml", &["--yes"]);
    assert_eq!(refused.code, 1, "{}", refused.render());
    expect![[r#"
        error[P012]: refused by template `kv.upgrade`: moving kv to a port below 1024 needs root on every node; uninstall and install instead (params.port is 80, below 1024; recorded.port is 8001, above 1023)
        the plan cannot be built: 1 error
    "#]]
    .assert_eq(&refused.err);
    assert!(!refused.out.contains("created"), "{}", refused.render());
    assert_eq!(operations(&kv), ops_before, "a refused apply created an operation");
    assert_eq!(audit(&kv), audit_before, "a refused apply wrote an audit row");
    assert_eq!(kv.resource().unwrap(), before, "a refused apply changed the resource");
    assert_eq!(kv.conf(), "version=2 port=8001\n");

    // `plan` refuses it the same way, and so does the server (a 422 naming P012); the port the
    // record has passes.
    let planned = kv.run("plan", "upgrade-port80.yaml", &[]);
    assert_eq!((planned.code, planned.err.clone()), (1, refused.err.clone()), "{}", planned.render());
    let api = kv.api();
    let token = api.token("sam", &["operator"]);
    let body = std::fs::read_to_string(kv.dir.join("upgrade-port80.yaml")).unwrap();
    let created = api.post("/api/v1/operations", &token, &body);
    assert_eq!(created.status, 422, "{}", created.body);
    assert_eq!(created.body["error"]["details"]["errors"][0]["code"], "P012", "{}", created.body);
    // Many people act through one server: the refusal is on its audit log, with the codes and not
    // the message.
    let rows = api.state.store().unwrap().audit(&Default::default()).unwrap();
    let refused: Vec<String> = rows
        .iter()
        .filter(|a| a.actor == "user:sam")
        .map(|a| format!("{} {} {} {}", a.actor, a.action, a.target, a.detail))
        .collect();
    expect![[r#"
        [
            "user:sam request.refused /api/v1/operations {\"method\":\"POST\",\"route\":\"/api/v1/operations\",\"status\":422,\"code\":\"plan_error\",\"errors\":[\"P012\"]}",
        ]
    "#]].assert_debug_eq(&refused);
    drop(api);
    assert_eq!(operations(&kv), ops_before, "a refused create created an operation");
    kv.apply("upgrade.yaml");
}
