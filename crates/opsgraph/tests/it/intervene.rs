//! Manual interventions (seed §13): a person's fix is verified by the evidence it names before
//! the run goes on; a fix the evidence does not prove leaves the operation failed.

use opsgraph_core::model::{Intervention, InterventionType, OperationState};

use crate::subop::{events, World};

const FILES: &[(&str, &str)] = &[
    (
        "packs/fix/pack.yaml",
        "scenario_pack:\n  id: fix\n  version: 1.0.0\n  resource_types: [fix.thing]\n  actions: [run]\n  plan_templates: [{id: fix.run}]\n",
    ),
    (
        "packs/fix/templates.yaml",
        "plan_template:\n  id: fix.run\n  action: run\n  stages: [{id: setup, name: Set up, jobs: [make-file, strict]}, {id: use, name: Use, jobs: [use-file]}]\n  jobs: [make-file, strict, use-file]\n",
    ),
    (
        "packs/fix/jobs.yaml",
        r#"job:
  id: make-file
  outputs: {provides: {capabilities: [fix.file]}, evidence: [file_present]}
  run: {command: 'echo "cannot reach the mirror" >&2; exit 1'}
---
job:
  id: strict
  outputs: {provides: {capabilities: [fix.strict]}, evidence: [file_present]}
  controls: {manual_intervention: {allowed: false}}
  run: {command: 'exit 1'}
---
job:
  id: use-file
  inputs: {requires: {capabilities: [fix.file]}}
  outputs: {provides: {capabilities: [fix.used]}, evidence: [used]}
  run: {command: 'cp "$OPSGRAPH_LAB_DIR/fixed" "$OPSGRAPH_LAB_DIR/used"'}
"#,
    ),
    (
        "packs/fix/evidence.yaml",
        "evidence:\n  - {id: file_present, source: command, command: 'test -f \"$OPSGRAPH_LAB_DIR/fixed\"'}\n  - {id: used, source: command, command: 'test -f \"$OPSGRAPH_LAB_DIR/used\"'}\n",
    ),
    ("world/none.yaml", "# nothing\n"),
    ("intent.yaml", "intent: {target_resource_type: fix.thing, action: run, name: f-1, environment: dev}\n"),
];

fn iv(stage: Option<&str>, job: Option<&str>, verify: &[&str]) -> Intervention {
    Intervention {
        type_: InterventionType::ManuallyFixed,
        operation: None,
        target_stage: stage.map(str::to_string),
        target_job: job.map(str::to_string),
        actor: None,
        note: "wrote the file by hand".into(),
        requires_verification: verify.iter().map(|s| s.to_string()).collect(),
    }
}

#[test]
fn a_manual_fix_is_verified_before_the_run_goes_on() {
    let w = World::replacing(FILES);
    let (mut rt, _, id) = w.created();
    assert!(matches!(rt.drive(&id, &mut |_| {}).unwrap(), OperationState::Failed { .. }));
    let state = |rt: &opsgraph_runtime::Runtime| rt.store().operation(&id).unwrap().unwrap().state;
    // The pack has no remedy for this: the analyzer says so instead of guessing.
    let found = rt.diagnose(&id).unwrap();
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found.iter().all(|d| d.remedy.is_none() && d.patch.is_none() && d.confidence == 0.0), "{found:?}");
    assert!(found[0].summary.starts_with("no remedy of pack fix matches"), "{found:?}");

    // A job whose contract forbids it is refused; so is naming no evidence, or unknown evidence.
    let err = rt.intervene(&id, &iv(None, Some("strict"), &["file_present"]), "user:bob").unwrap_err();
    assert!(err.to_string().contains("job strict does not allow manual intervention"), "{err}");
    let err = rt.intervene(&id, &iv(Some("setup"), Some("make-file"), &[]), "user:bob").unwrap_err();
    assert!(err.to_string().contains("names the evidence that proves the fix"), "{err}");
    let err = rt.intervene(&id, &iv(None, Some("make-file"), &["nope"]), "user:bob").unwrap_err();
    assert!(err.to_string().contains("no evidence check `nope`"), "{err}");
    assert!(matches!(state(&rt), OperationState::Failed { .. }), "refusals change nothing");
    // An AI identity never answers a gate.
    let answer = opsgraph_runtime::GateAnswer {
        option: "approve".into(),
        actor: "ai-agent:planner".into(),
        role: "sre".into(),
        value: None,
    };
    let err = rt.answer_gate(&id, "any", &answer).unwrap_err();
    assert!(err.to_string().contains("is an AI identity: gates are answered by people"), "{err}");

    // Claimed fixed but not: verification fails, the operation is failed again, with the evidence.
    let v = rt.intervene(&id, &iv(None, Some("make-file"), &["file_present"]), "user:bob").unwrap();
    assert!(
        matches!(&v.state, OperationState::Failed { reason } if reason.contains("verification of iv1 failed on make-file")),
        "{:?}",
        v.state
    );
    assert_eq!(v.checks.iter().map(|c| c.2).collect::<Vec<_>>(), [false]);

    // Fixed for real: verified, marked manually fixed, and the run goes on past it.
    std::fs::write(w.dir.join("data/lab/fixed"), "ok").unwrap();
    let v = rt.intervene(&id, &iv(None, Some("make-file"), &["file_present"]), "user:bob").unwrap();
    assert_eq!(v.state, OperationState::Running, "{:?}", v.checks);
    let stopped = rt.drive(&id, &mut |_| {}).unwrap();
    // `strict` still failed (it may not be fixed by hand): the run ends failed, but use-file ran.
    assert!(matches!(stopped, OperationState::Failed { .. }), "{stopped:?}");
    let jobs = rt.store().jobs(&id).unwrap();
    let job = |j: &str| jobs.iter().find(|r| r.id == j).unwrap().state;
    assert_eq!(job("make-file"), opsgraph_store::JobState::ManuallyFixed);
    assert_eq!(job("use-file"), opsgraph_store::JobState::Succeeded, "{:#?}", events(&rt, &id));
    let ev = events(&rt, &id);
    for e in ["intervention_recorded", "manually_fixed", "still_broken", "verified"] {
        assert!(ev.iter().any(|x| x.starts_with(e)), "no {e} in {ev:#?}");
    }
}
