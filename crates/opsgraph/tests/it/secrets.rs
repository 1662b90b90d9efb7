//! Canary secrets: a secret parameter given in the intent, another answered at a missing-input
//! gate, and a secret artifact handed from one job to the next. None of them may appear in plain
//! text (or base64) in the database file, its WAL, the blob store, job logs, the timeline, or
//! what `describe operation` prints; jobs still get the real values.

use base64::Engine;
use opsgraph_core::model::OperationState;

use crate::subop::{events, World};
use crate::support::{files_under, holds, opsgraph};

const PARAM: &str = "PW-CANARY-91b2e4d7";
const GATE: &str = "API-CANARY-c0ffee42";
const TOKEN: &str = "TOKEN-CANARY-7f3a9c55";

/// The vault pack's manifest and template: two secret parameters, `make-token` then `use-token`
/// in one stage. The server's canary test (`server_stream.rs`) brings other jobs to them.
pub(crate) const VAULT_PACK: &str = "scenario_pack:\n  id: vault\n  version: 1.0.0\n  resource_types: [vault.thing]\n  actions: [run]\n  plan_templates: [{id: vault.run}]\n";
pub(crate) const VAULT_TEMPLATES: &str = "plan_template:\n  id: vault.run\n  action: run\n  parameters:\n    db_password: {type: string, secret: true}\n    api_key: {type: string, secret: true, required: true}\n  stages: [{id: all, name: All, jobs: [make-token, use-token]}]\n  jobs: [make-token, use-token]\n";

/// The vault pack's `jobs.yaml`: `make-token` makes the artifacts `$outputs`, printing the secret
/// parameters and running `$make`; `use-token` is handed the token, prints it and runs `$then`.
macro_rules! vault_jobs {
    ($outputs:literal, $make:literal, $then:literal) => {
        concat!(
            "job:\n  id: make-token\n  outputs: {artifacts: [",
            $outputs,
            "]}\n  run:\n    command: |\n",
            "      echo \"password is $OPSGRAPH_PARAM_DB_PASSWORD, key is $OPSGRAPH_PARAM_API_KEY\"\n",
            $make,
            "---\njob:\n  id: use-token\n  inputs: {requires: {artifacts: [token]}}\n",
            "  outputs: {provides: {capabilities: [vault.used]}, evidence: [token_readable]}\n",
            "  run:\n    command: |\n      echo \"token: $(cat \"$OPSGRAPH_ARTIFACT_TOKEN\")\"\n",
            $then
        )
    };
}
pub(crate) use vault_jobs;

/// The evidence `token_readable`: the token `use-token` is handed holds a canary.
pub(crate) const VAULT_EVIDENCE: &str =
    "evidence:\n  - {id: token_readable, source: command, command: 'cat \"$OPSGRAPH_ARTIFACT_TOKEN\"', contains: CANARY}\n";

const FILES: &[(&str, &str)] = &[
    ("packs/vault/pack.yaml", VAULT_PACK),
    ("packs/vault/templates.yaml", VAULT_TEMPLATES),
    (
        "packs/vault/jobs.yaml",
        vault_jobs!(
            "token",
            r#"      printf %s "$OPSGRAPH_PARAM_DB_PASSWORD" | base64
      printf %s "TOKEN-CANARY-7f3a9c55" > "$OPSGRAPH_OUT/token"
"#,
            r#"      stat -c '%a %n' "$OPSGRAPH_ARTIFACT_TOKEN" > "$OPSGRAPH_LAB_DIR/token-file"
      [ "$OPSGRAPH_PARAM_API_KEY" = API-CANARY-c0ffee42 ] && [ "$OPSGRAPH_PARAM_DB_PASSWORD" = PW-CANARY-91b2e4d7 ] && touch "$OPSGRAPH_LAB_DIR/params-ok"
"#
        ),
    ),
    ("packs/vault/evidence.yaml", VAULT_EVIDENCE),
    ("packs/vault/artifacts.yaml", "artifact: {id: token, type: token, sensitivity: secret}\n"),
    ("world/none.yaml", "# no inventory\n"),
    (
        "intent.yaml",
        "intent: {target_resource_type: vault.thing, action: run, name: v-1, environment: dev, parameters: {db_password: PW-CANARY-91b2e4d7}}\n",
    ),
];

#[test]
fn canary_secrets_never_appear_in_plain_text() {
    let w = World::replacing(FILES);
    let (mut rt, _, id) = w.created();
    assert!(matches!(rt.store().operation(&id).unwrap().unwrap().state, OperationState::WaitingForInput { .. }));
    let answer = opsgraph_runtime::GateAnswer {
        option: "provide a value".into(),
        actor: "user:bob".into(),
        role: "operator".into(),
        value: Some(serde_json::Value::String(GATE.into())),
    };
    rt.answer_gate(&id, "input-api-key", &answer).unwrap();
    assert_eq!(rt.drive(&id, &mut |_| {}).unwrap(), OperationState::Completed, "{:#?}", events(&rt, &id));

    let data = w.dir.join("data");
    // The jobs got the real values, and the secret artifact as a private file.
    assert!(data.join("lab/params-ok").exists(), "the job did not get the secret parameters");
    let token_file = std::fs::read_to_string(data.join("lab/token-file")).unwrap();
    assert!(token_file.starts_with("600 ") && token_file.contains("/secrets/use-token/"), "{token_file}");
    assert!(!data.join(format!("runs/{id}/secrets")).join("use-token").exists(), "plaintext left behind");
    // The log shows the masks.
    let log = std::fs::read_to_string(data.join(format!("runs/{id}/make-token.1.log"))).unwrap();
    assert_eq!(log.lines().next(), Some("password is ***, key is ***"), "{log}");
    let describe = opsgraph(&["--data-dir", &data.display().to_string(), "describe", "operation", &id, "-o", "json"]);
    assert_eq!(describe.code, 0, "{}", describe.render());

    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let canaries = [PARAM, GATE, TOKEN];
    let mut all = Vec::new();
    files_under(&data, &mut all);
    assert!(all.iter().any(|(p, _)| p.ends_with("opsgraph.db")), "no database file scanned");
    for (path, bytes) in &all {
        if path.ends_with("token-file") || path.ends_with("params-ok") {
            continue; // written by the test's own job, on purpose
        }
        for c in canaries {
            assert!(!holds(bytes, c), "{c} in plain text in {}", path.display());
            assert!(!holds(bytes, &b64(c)), "{c} as base64 in {}", path.display());
        }
    }
    for c in canaries {
        assert!(!describe.out.contains(c), "{c} in describe output");
    }
    // Secrets show as references, not even as ciphertext.
    assert!(!describe.out.contains("sealed:"), "{}", describe.out);
    assert!(describe.out.contains(r#""secret": "sealed""#), "{}", describe.out);

    // Rotation: a new key, every sealed value moved to it in one transaction, the old key gone.
    let before = std::fs::read_to_string(data.join("master.key")).unwrap();
    let rotation = rt.rotate_master_key().unwrap();
    assert_eq!(rotation.resealed, 5, "plan and intent parameters, the intent, the gate value, the artifact");
    let after = std::fs::read_to_string(data.join("master.key")).unwrap();
    assert_ne!(before, after);
    assert!(after.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).count() == 1, "{after}");
    assert!(after.contains(&format!("active {}", rotation.active)), "{after}");
    // Only the new key remains, and it opens what was sealed before.
    assert_eq!(rt.reveal_artifact(&id, "token").unwrap().expose(), TOKEN.as_bytes());
    assert_eq!(rt.reseal_all().unwrap(), 0, "everything is under the active key");
    let mut all = Vec::new();
    files_under(&data, &mut all);
    for (path, bytes) in &all {
        if path.ends_with("token-file") || path.ends_with("params-ok") {
            continue;
        }
        for c in canaries {
            assert!(!holds(bytes, c), "{c} in plain text in {} after rotation", path.display());
        }
    }
}

/// A secret parameter's value is never echoed: not by `plan -o json|yaml|text`, not by
/// `POST /api/v1/plans`, not in a P003 error about the value, in any of them.
#[test]
fn secret_parameter_values_are_never_echoed_in_previews_or_errors() {
    let dir = crate::support::temp_dir(FILES);
    let at = |p: &str| dir.join(p).display().to_string();
    // The same value with the wrong type: the error names the parameter, not the value.
    std::fs::write(
        dir.join("bad-type.yaml"),
        format!("intent: {{target_resource_type: vault.thing, action: run, name: v-1, environment: dev, parameters: {{db_password: [{PARAM}]}}}}\n"),
    )
    .unwrap();
    let mut shown = Vec::new();
    for output in ["json", "yaml", "text"] {
        let run = opsgraph(&["plan", "-f", &at("intent.yaml"), "--packs", &at("packs"), "-o", output]);
        assert!(run.out.contains("db_password") || output == "text", "{}", run.render());
        shown.push((format!("plan -o {output}"), run.render()));
    }
    let run = opsgraph(&["plan", "-f", &at("bad-type.yaml"), "--packs", &at("packs"), "-o", "json"]);
    expect_test::expect![[r#"
        error[P003]: parameter `db_password` must be a string, found "(secret)"
        the plan cannot be built: 1 error
    "#]]
    .assert_eq(&run.err);
    shown.push(("plan, wrong type".into(), run.render()));
    // Through the API, from the same packs.
    let api = crate::server::Api::over(dir).packs(&["packs"]).build();
    let sam = api.token("sam", &["operator"]);
    for file in ["intent.yaml", "bad-type.yaml"] {
        let r = api.post("/api/v1/plans", &sam, &std::fs::read_to_string(api.dir.join(file)).unwrap());
        shown.push((format!("POST /api/v1/plans {file}: {}", r.status), r.body.to_string()));
    }
    let r = api.post("/api/v1/plans", &sam, &std::fs::read_to_string(api.dir.join("intent.yaml")).unwrap());
    assert_eq!(
        (r.body["parameters"]["db_password"].as_str(), r.body["intent"]["parameters"]["db_password"].as_str()),
        (Some("(secret)"), Some("(secret)")),
        "{}",
        r.body
    );
    // A plan patch carrying the secret, of the wrong type too: refused without quoting it.
    let w = World::replacing(FILES);
    let loaded = w.loaded();
    let plan = opsgraph::plan_cmd::build(&loaded).unwrap();
    let pack = loaded.packs.iter().find(|p| p.manifest.id == "vault").unwrap();
    for value in [format!("[{PARAM}]"), PARAM.to_string()] {
        let yaml = format!("plan_patch:\n  changes:\n    - set_parameters: {{parameters: {{db_password: {value}}}}}\n");
        let parsed = opsgraph_core::pack::parse_file("patch.yaml", &yaml);
        let Some(opsgraph_core::model::Document::PlanPatch(patch)) = parsed.docs.into_iter().next().map(|d| d.doc)
        else {
            panic!("not a patch: {yaml}")
        };
        let Err(findings) = opsgraph_core::plan::patch::apply_patch(&plan, pack, &patch) else {
            panic!("not refused: {yaml}")
        };
        let text: Vec<String> = findings.iter().map(|f| f.message.clone()).collect();
        assert_eq!(text, ["parameter `db_password` is secret: a patch cannot carry it"]);
        shown.push((format!("patch {value}"), text.join("\n")));
    }
    for (what, text) in &shown {
        assert!(!text.contains(PARAM), "{what} echoes the secret: {text}");
    }
}
