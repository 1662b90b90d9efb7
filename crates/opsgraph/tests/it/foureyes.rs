//! Four eyes on every plan change ([K] 1), AI identities bounded ([K] 2), typed gate values
//! ([K] 4) and `visible_to_roles` ([K] 11), through the API as an attacker would try them.

use expect_test::expect;
use serde_json::json;

use crate::server::{intent, Api};

const FIX: &str = "plan_patch:\n  reason: the greeting must be hello\n  changes:\n    - set_parameters: {parameters: {word: hello}}\n    - retry: {job: say-hello}\n";

/// An operation of the hello pack created by `creator` with `word: bye` (its evidence expects
/// hello), approved by `approver`, run to its failure. Returns its id.
fn failed_after_approval(api: &Api, creator: &str, approver: &str) -> String {
    let created =
        api.post("/api/v1/operations", creator, &format!("{}  parameters: {{word: bye}}\n", intent("h-four-eyes")));
    assert_eq!(created.status, 201, "{}", created.body);
    let id = created.body["id"].as_str().unwrap().to_string();
    api.idle();
    let answer = json!({"option": "approve", "revision": created.body["plan_revision"]}).to_string();
    let r = api.post(&format!("/api/v1/operations/{id}/gates/approve-hello/answer"), approver, &answer);
    assert_eq!(r.status, 200, "{}", r.body);
    api.idle();
    let op = api.get(&format!("/api/v1/operations/{id}"), approver).body;
    assert_eq!(op["state"], "failed", "{op}");
    id
}

fn answer_patch(api: &Api, id: &str, who: &str, gate: &str) -> (u16, String) {
    let op = api.get(&format!("/api/v1/operations/{id}"), who).body;
    let body = json!({"option": "approve patch", "revision": op["plan_revision"]}).to_string();
    let r = api.post(&format!("/api/v1/operations/{id}/gates/{gate}/answer"), who, &body);
    (r.status, format!("{} {}", r.code(), r.body["error"]["message"].as_str().unwrap_or("")).trim().to_string())
}

/// The bypass of the issue: the creator, who may not approve its plan, waits for someone else's
/// approval, then patches the approved revision (set_parameters + retry). That revision must
/// wait for a second person, who is neither the patch's author nor the operation's creator.
#[test]
fn a_change_to_an_approved_plan_waits_for_a_second_person() {
    let api = Api::new("");
    let sam = api.token("sam", &["sre"]); // creates
    let bob = api.token("bob", &["sre"]); // approves the plan
    let dave = api.token("dave", &["sre"]);
    let id = failed_after_approval(&api, &sam, &bob);

    let r = api.post(&format!("/api/v1/operations/{id}/patches"), &sam, FIX);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!((&r.body["gate"], &r.body["state"]), (&json!("patch-p1"), &json!("plan_patch_review")), "{}", r.body);
    assert_eq!(r.body["approval"], json!([{"rule": "approved_plan", "gate": "approve-hello", "by": "user:bob"}]));
    // Nothing ran: the job is still failed and the plan is still the approved revision.
    let jobs = api.get(&format!("/api/v1/operations/{id}/jobs"), &bob).body;
    assert_eq!(jobs["jobs"][0]["state"], "failed", "{jobs}");

    let mut seen = vec![format!("sam (author and creator): {:?}", answer_patch(&api, &id, &sam, "patch-p1"))];
    seen.push(format!("dave: {:?}", answer_patch(&api, &id, &dave, "patch-p1")));
    api.idle();
    let op = api.get(&format!("/api/v1/operations/{id}"), &bob).body;
    seen.push(format!("then: {}", op["state"]));
    expect![[r#"
        sam (author and creator): (403, "self_approval user:sam created operation `OP` and may not approve gate `patch-p1`")
        dave: (200, "")
        then: "completed""#]]
    .assert_eq(&seen.join("\n").replace(&id, "OP"));

    // The other way round: the plan's approver patches; the creator may not approve the patch.
    let id = failed_after_approval(&api, &sam, &bob);
    let r = api.post(&format!("/api/v1/operations/{id}/patches"), &bob, FIX);
    assert_eq!(r.body["gate"], "patch-p1", "{}", r.body);
    let seen = [
        format!("bob (author): {:?}", answer_patch(&api, &id, &bob, "patch-p1")),
        format!("sam (creator): {:?}", answer_patch(&api, &id, &sam, "patch-p1")),
        format!("dave: {:?}", answer_patch(&api, &id, &dave, "patch-p1")),
    ];
    expect![[r#"
        bob (author): (403, "self_approval user:bob proposed patch p1 and may not approve gate `patch-p1`")
        sam (creator): (403, "self_approval user:sam created operation `OP` and may not approve gate `patch-p1`")
        dave: (200, "")"#]]
    .assert_eq(&seen.join("\n").replace(&id, "OP"));
}

/// `patch_policy.safe_changes: [retry_idempotent]` lets a retry of an idempotent job through
/// without a second person; a set_parameters never. Inserted jobs always wait.
#[test]
fn only_changes_a_policy_lists_as_safe_skip_the_second_person() {
    let api = Api::new("patch_policy:\n  safe_changes: [retry_idempotent]\n");
    let sam = api.token("sam", &["sre"]);
    let bob = api.token("bob", &["sre"]);
    let id = failed_after_approval(&api, &sam, &bob);
    // say-hello has no idempotency key: a retry of it is not safe either.
    let retry = "plan_patch:\n  changes:\n    - retry: {job: say-hello}\n";
    let r = api.post(&format!("/api/v1/operations/{id}/patches"), &sam, retry);
    assert_eq!(r.body["gate"], "patch-p1", "{}", r.body);
    // A policy cannot list inserts as safe.
    let bad =
        opsgraph_runtime::PatchRules::from_config(&json!({"patch_policy": {"safe_changes": ["insert_diagnostic"]}}));
    assert_eq!(
        bad.unwrap_err(),
        "`patch_policy.safe_changes: insert_diagnostic` is no longer accepted: a patch that inserts jobs always waits for a person's approval"
    );
    let bad = opsgraph_runtime::PatchRules::from_config(&json!({"ai_policy": {"auto_apply": ["skip"]}}));
    assert_eq!(bad.unwrap_err(), "unknown `ai_policy.auto_apply` entry `skip`; known: retry_idempotent");
}

/// A token holding `ai_agent` acts as an AI whatever else it holds: no gates, no reveals, no
/// tokens. New tokens may not mix `ai_agent` with a role that lets a person act.
#[test]
fn ai_identities_stay_bounded_whatever_else_they_hold() {
    let api = Api::new("");
    let admin = api.token("root", &["platform_admin"]);
    let mixed = json!({"name": "planner", "roles": ["ai_agent", "platform_admin"]}).to_string();
    let r = api.post("/api/v1/tokens", &admin, &mixed);
    assert_eq!((r.status, r.code()), (422, "ai_role_mixed"), "{}", r.body);
    let fine = json!({"name": "planner2", "roles": ["ai_agent", "viewer"]}).to_string();
    assert_eq!(api.post("/api/v1/tokens", &admin, &fine).status, 201);

    // A token minted before this rule (written straight to the store) is still bounded.
    let legacy = {
        let mut store = api.state.store().unwrap();
        let token = opsgraph_server::auth::new_token().unwrap();
        let record = opsgraph_store::TokenRecord {
            id: "tok-legacy".into(),
            name: "legacy".into(),
            hash: opsgraph_server::auth::token_hash(&token),
            roles: vec!["ai_agent".into(), "platform_admin".into()],
            created_by: "test".into(),
            created_at: opsgraph_store::now(),
            revoked_at: None,
        };
        store.commit(&[opsgraph_store::Write::Token(record)]).unwrap();
        token
    };
    let me = api.get("/api/v1/me", &legacy).body;
    let perms: Vec<&str> = me["permissions"].as_array().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
    assert!(
        !perms.iter().any(|p| ["answer_gates", "approve_patches", "reveal_secrets", "manage_tokens"].contains(p)),
        "{me}"
    );
    let sam = api.token("sam", &["sre"]);
    let created = api.post("/api/v1/operations", &sam, &intent("h-ai"));
    let id = created.body["id"].as_str().unwrap().to_string();
    api.idle();
    let answer = json!({"option": "approve", "revision": created.body["plan_revision"]}).to_string();
    let seen: Vec<String> = [
        ("answer a gate", api.post(&format!("/api/v1/operations/{id}/gates/approve-hello/answer"), &legacy, &answer)),
        ("mint a token", api.post("/api/v1/tokens", &legacy, &json!({"name": "h", "roles": ["sre"]}).to_string())),
        ("revoke a token", api.call("DELETE", "/api/v1/tokens/tok-legacy", Some(&legacy), "", &[])),
        ("reveal", api.post(&format!("/api/v1/operations/{id}/artifacts/x/reveal"), &legacy, "")),
    ]
    .into_iter()
    .map(|(what, r)| format!("{what}: {} {}", r.status, r.code()))
    .collect();
    expect![[r#"
        answer a gate: 403 forbidden
        mint a token: 403 forbidden
        revoke a token: 403 forbidden
        reveal: 403 ai_identity"#]]
    .assert_eq(&seen.join("\n"));
}

const TYPED: &[(&str, &str)] = &[
    (
        "packs/typed/pack.yaml",
        "scenario_pack:\n  id: typed\n  version: 1.0.0\n  resource_types: [typed.thing]\n  actions: [run]\n  plan_templates: [{id: typed.run}]\n",
    ),
    (
        "packs/typed/templates.yaml",
        "plan_template:\n  id: typed.run\n  action: run\n  parameters:\n    replicas: {type: integer, required: true}\n    tier: {type: string, required: true, enum: [gold, silver]}\n    api_key: {type: string, secret: true, required: true}\n  stages: [{id: all, name: All, jobs: [use]}]\n  jobs: [use]\n",
    ),
    (
        "packs/typed/jobs.yaml",
        "job:\n  id: use\n  inputs: {parameters: {replicas: {type: integer}, tier: {type: string}, api_key: {type: string}}}\n  run: {command: 'true'}\n",
    ),
    ("world/none.yaml", "# no inventory\n"),
    ("intent.yaml", "intent: {target_resource_type: typed.thing, action: run, name: t-1, environment: dev}\n"),
];

/// A value given at a missing-input gate is checked by the intent's own check: type, enum, size;
/// a refused value changes nothing and a secret one is never quoted.
#[test]
fn gate_values_are_checked_like_an_intents() {
    let w = crate::subop::World::replacing(TYPED);
    let (mut rt, _, id) = w.created();
    let mut give = |gate: &str, value: serde_json::Value| {
        let answer = opsgraph_runtime::GateAnswer {
            option: "provide a value".into(),
            actor: "user:bob".into(),
            role: "operator".into(),
            value: Some(value),
        };
        match rt.answer_gate(&id, gate, &answer) {
            Ok(_) => format!("{gate}: accepted"),
            Err(e) => format!("{gate}: {e}"),
        }
    };
    let big = "x".repeat(70 * 1024);
    let seen = [
        give("input-replicas", json!("three")),
        give("input-replicas", json!(2.5)),
        give("input-tier", json!("bronze")),
        give("input-api-key", json!({"nested": "SECRET-CANARY-1"})),
        give("input-api-key", json!(big)),
        give("input-replicas", json!(3)),
        give("input-tier", json!("gold")),
        give("input-api-key", json!("SECRET-CANARY-2")),
    ];
    expect![[r#"
        input-replicas: gate `input-replicas`: P003: parameter `replicas` must be a integer, found "three"
        input-replicas: gate `input-replicas`: P003: parameter `replicas` must be a integer, found 2.5
        input-tier: gate `input-tier`: P003: parameter `tier` must be one of "gold", "silver", found "bronze"
        input-api-key: gate `input-api-key`: P003: parameter `api_key` must be a string, found "(secret)"
        input-api-key: gate `input-api-key`: P010: bytes of one parameter value: 71682, above the limit of 65536
        input-replicas: accepted
        input-tier: accepted
        input-api-key: accepted"#]]
    .assert_eq(&seen.join("\n"));
    // The refused answers left the gates unanswered; the accepted ones hold the checked values.
    let gates = rt.store().gates(&id).unwrap();
    let replicas = gates.iter().find(|g| g.id == "input-replicas").unwrap();
    assert_eq!((replicas.answered_by.as_deref(), replicas.value.clone()), (Some("user:bob"), Some(json!(3))));
}
