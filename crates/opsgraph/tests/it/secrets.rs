//! Canary secrets: a secret parameter given in the intent, another answered at a missing-input
//! gate, and a secret artifact handed from one job to the next. None of them may appear in plain
//! text (or base64) in the database file, its WAL, the blob store, job logs, the timeline, or
//! what `describe operation` prints; jobs still get the real values.

use base64::Engine;
use opsgraph_model::OperationState;

use crate::subop::{events, World};
use crate::support::opsgraph;

const PARAM: &str = "PW-CANARY-91b2e4d7";
const GATE: &str = "API-CANARY-c0ffee42";
const TOKEN: &str = "TOKEN-CANARY-7f3a9c55";

const FILES: &[(&str, &str)] = &[
    (
        "packs/vault/pack.yaml",
        "scenario_pack:\n  id: vault\n  version: 1.0.0\n  resource_types: [vault.thing]\n  actions: [run]\n  plan_templates: [{id: vault.run}]\n",
    ),
    (
        "packs/vault/templates.yaml",
        "plan_template:\n  id: vault.run\n  action: run\n  parameters:\n    db_password: {type: string, secret: true}\n    api_key: {type: string, secret: true, required: true}\n  stages: [{id: all, name: All, jobs: [make-token, use-token]}]\n  jobs: [make-token, use-token]\n",
    ),
    (
        "packs/vault/jobs.yaml",
        r#"job:
  id: make-token
  outputs: {artifacts: [token]}
  run:
    command: |
      echo "password is $OPSGRAPH_PARAM_DB_PASSWORD, key is $OPSGRAPH_PARAM_API_KEY"
      printf %s "$OPSGRAPH_PARAM_DB_PASSWORD" | base64
      printf %s "TOKEN-CANARY-7f3a9c55" > "$OPSGRAPH_OUT/token"
---
job:
  id: use-token
  inputs: {requires: {artifacts: [token]}}
  outputs: {provides: {capabilities: [vault.used]}, evidence: [token_readable]}
  run:
    command: |
      echo "token: $(cat "$OPSGRAPH_ARTIFACT_TOKEN")"
      stat -c '%a %n' "$OPSGRAPH_ARTIFACT_TOKEN" > "$OPSGRAPH_LAB_DIR/token-file"
      [ "$OPSGRAPH_PARAM_API_KEY" = API-CANARY-c0ffee42 ] && [ "$OPSGRAPH_PARAM_DB_PASSWORD" = PW-CANARY-91b2e4d7 ] && touch "$OPSGRAPH_LAB_DIR/params-ok"
"#,
    ),
    (
        "packs/vault/evidence.yaml",
        "evidence:\n  - {id: token_readable, source: command, command: 'cat \"$OPSGRAPH_ARTIFACT_TOKEN\"', contains: CANARY}\n",
    ),
    ("packs/vault/artifacts.yaml", "artifact: {id: token, type: token, sensitivity: secret}\n"),
    ("world/none.yaml", "# no inventory\n"),
    (
        "intent.yaml",
        "intent: {target_resource_type: vault.thing, action: run, name: v-1, environment: dev, parameters: {db_password: PW-CANARY-91b2e4d7}}\n",
    ),
];

/// Every file under `dir`, with its bytes.
fn files(dir: &std::path::Path, out: &mut Vec<(std::path::PathBuf, Vec<u8>)>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else if let Ok(b) = std::fs::read(&p) {
            out.push((p, b));
        }
    }
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn canary_secrets_never_appear_in_plain_text() {
    let w = World::replacing(FILES);
    let plan = opsgraph::plan_cmd::build(&w.loaded()).unwrap();
    let mut rt = w.runtime();
    let id = rt.create(&plan, "user:alice", &mut |_| {}).unwrap();
    assert!(matches!(rt.store().operation(&id).unwrap().unwrap().state, OperationState::WaitingForInput { .. }));
    let answer = opsgraph_runtime::GateAnswer {
        option: "provide a value".into(),
        actor: "user:bob".into(),
        role: "operator".into(),
        value: Some(serde_json::Value::String(GATE.into())),
    };
    rt.answer_gate(&id, "input-api-key", &answer, &mut |_| {}).unwrap();
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
    files(&data, &mut all);
    assert!(all.iter().any(|(p, _)| p.ends_with("opsgraph.db")), "no database file scanned");
    for (path, bytes) in &all {
        if path.ends_with("token-file") || path.ends_with("params-ok") {
            continue; // written by the test's own job, on purpose
        }
        for c in canaries {
            assert!(!contains(bytes, c), "{c} in plain text in {}", path.display());
            assert!(!contains(bytes, &b64(c)), "{c} as base64 in {}", path.display());
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
    files(&data, &mut all);
    for (path, bytes) in &all {
        if path.ends_with("token-file") || path.ends_with("params-ok") {
            continue;
        }
        for c in canaries {
            assert!(!contains(bytes, c), "{c} in plain text in {} after rotation", path.display());
        }
    }
}
