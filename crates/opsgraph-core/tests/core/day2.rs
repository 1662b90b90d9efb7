//! Day-2 plans ([I]): an action on a recorded resource takes what its intent does not give from
//! the record — never a secret — and its preview shows what it changes.

use std::collections::BTreeMap;

use expect_test::{expect, Expect};
use opsgraph_core::model::{Attributes, Intent, ParamSpec, ParamType, ResourceStatus};
use opsgraph_core::pack::Pack;
use opsgraph_core::plan::Recorded;
use serde_json::{json, Value};

use crate::builders::*;
use crate::plan::world;
use crate::preview_text::section;

fn param(default: Option<Value>, secret: bool) -> ParamSpec {
    ParamSpec {
        type_: if default.as_ref().is_some_and(Value::is_number) { ParamType::Integer } else { ParamType::String },
        default,
        required: secret,
        description: None,
        enum_: Vec::new(),
        secret,
        artifact: None,
        once: false,
    }
}

/// A database pack: `install` and `upgrade`, each with a version, a port and a secret password,
/// on the nodes of `targets.nodes`.
fn db_pack() -> Pack {
    let mut p = pack("db", "db.instance", vec![job("converge").on("nodes")]);
    let mut install = p.templates[0].clone();
    install.id = "db.install".into();
    install.action = "install".into();
    install.parameters = [
        ("version".to_string(), param(Some(json!("15")), false)),
        ("port".to_string(), param(Some(json!(5432)), false)),
        ("password".to_string(), param(None, true)),
        // A decision for one action: never taken from the record.
        ("force".to_string(), ParamSpec { type_: ParamType::Boolean, once: true, ..param(Some(json!(false)), false) }),
    ]
    .into();
    let mut upgrade = install.clone();
    upgrade.id = "db.upgrade".into();
    upgrade.action = "upgrade".into();
    p.templates = vec![install, upgrade];
    p.manifest.actions = vec!["install".into(), "upgrade".into()];
    p
}

/// The store's record of `db.instance/main`: installed as 16 on port 5433 on n1, observed 16.4.
fn recorded() -> Recorded {
    let mut resource = resource("db.instance", "main").0;
    resource.status = Some(ResourceStatus::Running);
    resource.observed.insert("version".into(), "16.4".into());
    Recorded {
        resource,
        created_by: "install".into(),
        operation: "op-1".into(),
        // A secret handed in by mistake is still not taken; nor is an earlier action's `force`.
        parameters: attrs(&[
            ("version", json!("16")),
            ("port", json!(5433)),
            ("password", json!("hunter2-hunter2")),
            ("force", json!(true)),
        ]),
        targets: BTreeMap::from([("nodes".to_string(), vec!["compute_node/n1".to_string()])]),
    }
}

fn db_intent(action: &str, name: &str, parameters: &[(&str, Value)], nodes: &[&str]) -> Intent {
    let mut i = intent("db.instance", "dev");
    i.action = action.into();
    i.name = Some(name.into());
    i.parameters = attrs(parameters);
    if !nodes.is_empty() {
        i.targets.insert("nodes".into(), nodes.iter().map(|n| format!("compute_node/{n}")).collect());
    }
    i
}

/// An upgrade of `db.instance/main` to 17, with a secret password.
fn upgrade_to_17() -> Intent {
    db_intent("upgrade", "main", &[("version", json!("17")), ("password", json!("s3cret-s3cret"))], &[])
}

/// Builds the plan against the record and shows its parameters, job instances, gates and the
/// preview's section on the change — or its errors.
fn check(intent: Intent, expect: Expect) {
    let w = world(db_pack(), intent).on_nodes(&["n1", "n2"]).recorded(Some(recorded()));
    let text = match w.build() {
        Ok(plan) => {
            let shown: Attributes = plan.parameters.clone().into_iter().filter(|(k, _)| k != "password").collect();
            let mut s = format!("parameters {}\n", serde_json::to_string(&shown).unwrap());
            let list = |ids: Vec<&str>| if ids.is_empty() { "-".to_string() } else { ids.join(", ") };
            s.push_str(&format!("jobs {}\n", list(plan.jobs.iter().map(|j| j.id.as_str()).collect())));
            s.push_str(&format!("gates {}\n", list(plan.gates.iter().map(|g| g.id.as_str()).collect())));
            let preview = opsgraph_core::plan::render::text(&plan);
            match preview.lines().find(|l| l.starts_with("Changes to ")) {
                Some(heading) => s.push_str(&section(&preview, heading)),
                None => s.push_str("(no change section)\n"),
            }
            s
        }
        Err(errors) => errors.iter().map(|e| format!("error[{}]: {e}\n", e.code())).collect(),
    };
    expect.assert_eq(&text);
}

#[test]
fn a_day2_action_takes_what_its_intent_does_not_give_from_the_record() {
    // Version, port and node come from the record; the password is secret: it is asked for.
    check(
        db_intent("upgrade", "main", &[], &[]),
        expect![[r#"
            parameters {"force":false,"port":5433,"version":"16"}
            jobs converge@n1
            gates input-password
            Changes to db.instance/main (running, recorded by op-1)
              no parameter or target differs from the record
              as recorded: port=5433, version=16, targets.nodes=compute_node/n1
              observed: version 16.4
        "#]],
    );
}

#[test]
fn the_preview_shows_what_a_day2_action_changes() {
    check(
        db_intent("upgrade", "main", &[("version", json!("17")), ("password", json!("s3cret-s3cret"))], &["n2"]),
        expect![[r#"
            parameters {"force":false,"port":5433,"version":"17"}
            jobs converge@n2
            gates -
            Changes to db.instance/main (running, recorded by op-1)
              ~ version        16 → 17
              ~ targets.nodes  compute_node/n1 → compute_node/n2
              as recorded: port=5433
              observed: version 16.4
        "#]],
    );
}

#[test]
fn the_creating_action_and_other_resources_are_planned_from_their_intent_alone() {
    // Installing again is declarative: the template's defaults, not the record.
    check(
        db_intent("install", "main", &[("password", json!("s3cret-s3cret"))], &["n1"]),
        expect![[r#"
            parameters {"force":false,"port":5432,"version":"15"}
            jobs converge@n1
            gates -
            (no change section)
        "#]],
    );
    // Another instance's upgrade knows nothing of main's record: no node, no version.
    check(
        db_intent("upgrade", "other", &[], &[]),
        expect![[r#"
            parameters {"force":false,"port":5432,"version":"15"}
            jobs -
            gates input-password
            (no change section)
        "#]],
    );
}

#[test]
fn the_json_preview_carries_the_change_without_secrets() {
    let w = world(db_pack(), upgrade_to_17()).on_nodes(&["n1"]).recorded(Some(recorded()));
    let plan = w.build().unwrap();
    let v = opsgraph_core::plan::render::json(&plan, &w.packs);
    let text = serde_json::to_string_pretty(&v["inherited"]).unwrap();
    assert!(!serde_json::to_string(&v).unwrap().contains("s3cret"), "a secret in the JSON preview");
    expect![[r#"
        {
          "resource": "db.instance/main",
          "status": "running",
          "operation": "op-1",
          "parameters": {
            "port": 5433
          },
          "targets": {
            "nodes": [
              "compute_node/n1"
            ]
          },
          "changes": [
            {
              "name": "version",
              "from": "16",
              "to": "17"
            }
          ],
          "observed": {
            "version": "16.4"
          }
        }"#]]
    .assert_eq(&text);
}

/// The rollback of a day-2 action ([I] 6) runs its undo jobs with the recorded values of the
/// parameters it changed, and its preview shows the change back.
#[test]
fn the_rollback_of_a_day2_action_returns_to_the_recorded_values() {
    use opsgraph_core::model::{Rollback, RollbackSupport};
    let mut w = world(db_pack(), upgrade_to_17()).on_nodes(&["n1"]).recorded(Some(recorded()));
    let job = w.packs[0].jobs.get_mut("converge").unwrap();
    job.controls.rollback = Some(Rollback { supported: RollbackSupport::Full, job: Some("converge".into()) });
    let plan = w.build().unwrap();
    let done = plan.jobs.iter().map(|j| j.id.clone()).collect();
    let rb = opsgraph_core::plan::rollback::rollback(&plan, &w.packs[0], &done).unwrap().plan;
    let preview = opsgraph_core::plan::render::text(&rb);
    let shown: Attributes = rb.parameters.clone().into_iter().filter(|(k, _)| k != "password").collect();
    let text = format!(
        "parameters {}\njobs {}\nrisk {}\n{}",
        serde_json::to_string(&shown).unwrap(),
        rb.jobs.iter().map(|j| j.id.as_str()).collect::<Vec<_>>().join(", "),
        rb.risk.reasons.join("; "),
        section(&preview, preview.lines().find(|l| l.starts_with("Changes to ")).unwrap()),
    );
    expect![[r#"
        parameters {"force":false,"port":5433,"version":"16"}
        jobs converge@n1
        risk rolls back 1 completed job(s) of db.upgrade; returns to the recorded version 17 → 16
        Changes to db.instance/main (running, recorded by op-1)
          ~ version  17 → 16
          as recorded: port=5433, targets.nodes=compute_node/n1
    "#]]
    .assert_eq(&text);
}
