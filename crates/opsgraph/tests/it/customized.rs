//! A plan customised before its run (`apply --patch`, [O]): the stored plan keeps the patch as a
//! customization, the operation's timeline and the audit log record it, and `describe
//! operation` says it is customised and how, with the operation's `intent_id`, `plan_id` and
//! each stage's status.

use crate::support::{opsgraph, temp_dir};

const FILES: &[(&str, &str)] = &[
    (
        "packs/tiny/pack.yaml",
        "scenario_pack:\n  id: tiny\n  version: 1.0.0\n  resource_types: [tiny.box]\n  actions: [make]\n  plan_templates: [{id: tiny.make}]\n",
    ),
    (
        "packs/tiny/templates.yaml",
        "plan_template:\n  id: tiny.make\n  action: make\n  stages: [{id: all, name: All, jobs: [first, second]}]\n  jobs: [first, second]\n",
    ),
    (
        "packs/tiny/jobs.yaml",
        "job:\n  id: first\n  run: {command: 'true'}\n---\njob:\n  id: second\n  after: [first]\n  run: {command: 'true'}\n",
    ),
    ("make.yaml", "intent: {id: make-b1, target_resource_type: tiny.box, action: make, name: b-1, environment: dev}\n"),
    (
        "look.yaml",
        "plan_patch:\n  id: look-first\n  author: user:alice\n  reason: an SRE looks before the second job\n  changes:\n    - add_gate: {id: look, reason: look at it, before: [second]}\n",
    ),
];

#[test]
fn a_plan_patched_before_its_run_is_recorded_and_described_as_customized() {
    let tmp = temp_dir(FILES);
    let data = tmp.join("data").display().to_string();
    let packs = tmp.join("packs").display().to_string();
    let (intent, patch) = (tmp.join("make.yaml").display().to_string(), tmp.join("look.yaml").display().to_string());
    let run = opsgraph(&["--data-dir", &data, "apply", "-f", &intent, "--packs", &packs, "--patch", &patch, "--yes"]);
    // It stops at the gate the patch added.
    assert!(run.out.contains("Patched before the run:\n+ gate look"), "{}", run.render());
    let ops: serde_json::Value =
        serde_json::from_str(&opsgraph(&["--data-dir", &data, "get", "operations", "-o", "json"]).out).unwrap();
    let id = ops[0]["id"].as_str().unwrap().to_owned();
    let described = opsgraph(&["--data-dir", &data, "describe", "operation", &id, "-o", "json"]);
    assert_eq!(described.code, 0, "{}", described.render());
    let op: serde_json::Value = serde_json::from_str(&described.out).unwrap();
    assert_eq!(op["customized"], true, "{op:#}");
    assert_eq!(op["intent_id"], "make-b1");
    assert_eq!(op["plan_id"], op["plan_revision"]);
    let c = &op["customizations"][0];
    assert_eq!(
        (c["patch"].as_str(), c["author"].as_str(), c["revision"].as_u64()),
        (Some("look-first"), Some("user:alice"), Some(2))
    );
    assert_eq!(c["diff"], serde_json::json!(["+ gate look"]));
    assert_eq!(op["stages"][0]["status"], "waiting", "{:#}", op["stages"]);
    let customized: Vec<&serde_json::Value> =
        op["timeline"].as_array().unwrap().iter().filter(|e| e["event"] == "customized").collect();
    assert_eq!(customized.len(), 1, "{:#}", op["timeline"]);
    assert_eq!(customized[0]["actor"], "user:alice");
    let audit = opsgraph(&["--data-dir", &data, "audit", "-o", "json"]);
    assert!(audit.out.contains("\"plan.customize\"") && audit.out.contains("look-first"), "{}", audit.render());
}

/// Locally, the roles policy rules see are the user's in the data directory's `config.yaml`
/// (`users:`), as for answering gates ([O]).
#[test]
fn local_plans_see_the_users_roles_from_the_config() {
    let tmp = temp_dir(FILES);
    let data = tmp.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let policy = tmp.join("ops.yaml");
    std::fs::write(
        &policy,
        "operations_policy:\n  dev:\n    rules:\n      - {name: sre-only, when: \"!('sre' in roles)\", deny: only SREs plan here}\n",
    )
    .unwrap();
    let me = std::env::var("USER").ok().filter(|n| !n.trim().is_empty()).unwrap_or_else(|| "local".into());
    let plan = |roles: &str| {
        std::fs::write(data.join("config.yaml"), format!("users: {{{me}: [{roles}]}}\n")).unwrap();
        let (intent, packs) = (tmp.join("make.yaml").display().to_string(), tmp.join("packs").display().to_string());
        let policy = policy.display().to_string();
        opsgraph(&[
            "--data-dir",
            &data.display().to_string(),
            "plan",
            "-f",
            &intent,
            "--packs",
            &packs,
            "--policy",
            &policy,
        ])
    };
    let refused = plan("operator");
    assert_eq!(refused.code, 1, "{}", refused.render());
    assert!(
        refused.err.contains(
            "error[P013]: refused by operations policy rule sre-only (when `!('sre' in roles)`): only SREs plan here"
        ),
        "{}",
        refused.render()
    );
    let planned = plan("sre");
    assert_eq!(planned.code, 0, "{}", planned.render());
}
