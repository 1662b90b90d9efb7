//! A template parameter that names an artifact of an earlier operation (`artifact:` in its
//! declaration; the postgresql pack's restore takes its backup this way): the value is
//! `<operation>/<artifact>`, checked in form when planning and in existence when the operation
//! is created; a job that declares the parameter among its inputs gets the artifact's file
//! (opened, for a secret one) in `OPSGRAPH_ARTIFACT_<ID>`, the same variable a dependency's
//! artifact would use; the plan's other jobs get nothing of it.

use crate::support::{opsgraph, temp_dir, TempDir};

const FILES: &[(&str, &str)] = &[
    (
        "packs/keeper/pack.yaml",
        "scenario_pack:\n  id: keeper\n  version: 1.0.0\n  resource_types: [keeper.box]\n  actions: [save, load]\n  plan_templates: [{id: keeper.save}, {id: keeper.load}]\n",
    ),
    (
        "packs/keeper/templates.yaml",
        "plan_template:\n  id: keeper.save\n  action: save\n  stages: [{id: all, name: All, jobs: [save]}]\n  jobs: [save]\n---\nplan_template:\n  id: keeper.load\n  action: load\n  parameters:\n    from: {type: string, required: true, artifact: snapshot}\n  stages: [{id: all, name: All, jobs: [load, bystander]}]\n  jobs: [load, bystander]\n",
    ),
    (
        "packs/keeper/jobs.yaml",
        r#"job:
  id: save
  outputs: {artifacts: [snapshot]}
  run:
    command: printf %s "SNAPSHOT-CANARY-5e1d" > "$OPSGRAPH_OUT/snapshot"
---
job:
  id: load
  inputs: {parameters: {from: ""}}
  outputs: {provides: {capabilities: [keeper.loaded]}, evidence: [loaded]}
  run:
    command: |
      [ -n "${OPSGRAPH_ARTIFACT_SNAPSHOT:-}" ] || { echo "no snapshot: ${OPSGRAPH_MISSING_ARTIFACT_SNAPSHOT:-}" >&2; exit 1; }
      mkdir -p "$OPSGRAPH_LAB_DIR" && cp "$OPSGRAPH_ARTIFACT_SNAPSHOT" "$OPSGRAPH_LAB_DIR/loaded"
---
# A job that does not declare the parameter gets neither the file nor the reason.
job:
  id: bystander
  run:
    command: '[ -z "${OPSGRAPH_ARTIFACT_SNAPSHOT:-}${OPSGRAPH_MISSING_ARTIFACT_SNAPSHOT:-}" ]'
"#,
    ),
    (
        "packs/keeper/evidence.yaml",
        "evidence:\n  - {id: loaded, source: command, command: 'cat \"$OPSGRAPH_LAB_DIR/loaded\"', expected: SNAPSHOT-CANARY-5e1d}\n",
    ),
    (
        "packs/keeper/artifacts.yaml",
        "artifact: {id: snapshot, type: snapshot, sensitivity: secret}\n---\nartifact: {id: other, type: other, sensitivity: internal}\n",
    ),
    ("save.yaml", "intent: {target_resource_type: keeper.box, action: save, name: b-1, environment: dev}\n"),
];

fn load_intent(tmp: &TempDir, from: &str) -> String {
    let file = tmp.join("load.yaml");
    std::fs::write(
        &file,
        format!(
            "intent: {{target_resource_type: keeper.box, action: load, name: b-1, environment: dev, parameters: {{from: \"{from}\"}}}}\n"
        ),
    )
    .unwrap();
    file.display().to_string()
}

fn operations(data: &str) -> usize {
    let ops = opsgraph(&["--data-dir", data, "get", "operations", "-o", "json"]);
    serde_json::from_str::<serde_json::Value>(&ops.out).unwrap().as_array().unwrap().len()
}

#[test]
fn a_parameter_names_an_artifact_of_an_earlier_operation_and_the_job_gets_its_file() {
    let tmp = temp_dir(FILES);
    let data = tmp.join("data").display().to_string();
    let packs = tmp.join("packs").display().to_string();
    let apply = |intent: &str| opsgraph(&["--data-dir", &data, "apply", "-f", intent, "--packs", &packs, "--yes"]);
    let save = apply(&tmp.join("save.yaml").display().to_string());
    assert_eq!(save.code, 0, "{}", save.render());
    let ops: serde_json::Value =
        serde_json::from_str(&opsgraph(&["--data-dir", &data, "get", "operations", "-o", "json"]).out).unwrap();
    let saved = ops[0]["id"].as_str().unwrap().to_owned();

    // The form is checked when planning: another artifact, or no operation, is refused.
    for bad in [format!("{saved}/other"), "snapshot".to_owned()] {
        let run = apply(&load_intent(&tmp, &bad));
        assert_eq!(run.code, 1, "{}", run.render());
        assert!(
            run.err.contains(&format!(
                "parameter `from` names an artifact of an earlier operation, `<operation>/snapshot`, found \"{bad}\""
            )),
            "{}",
            run.render()
        );
    }
    // An operation that produced no such artifact: refused at creation, nothing recorded.
    let run = apply(&load_intent(&tmp, "op-0nothing000/snapshot"));
    assert_ne!(run.code, 0, "{}", run.render());
    assert!(
        run.err.contains("parameter from: operation op-0nothing000 produced no artifact snapshot"),
        "{}",
        run.render()
    );
    assert_eq!(operations(&data), 1, "a refused operation was recorded");

    // The real one: the job reads the (secret) artifact's file, and the evidence sees its content.
    let run = apply(&load_intent(&tmp, &format!("{saved}/snapshot")));
    assert_eq!(run.code, 0, "{}", run.render());
    assert_eq!(std::fs::read_to_string(tmp.join("data/lab/loaded")).unwrap(), "SNAPSHOT-CANARY-5e1d");
    assert!(!run.render().contains("SNAPSHOT-CANARY-5e1d"), "the secret artifact's content was printed");
}
